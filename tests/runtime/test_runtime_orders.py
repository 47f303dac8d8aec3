"""A worker reads its next step's orders while the current step waits for its sum
(``Membership.read_orders_ahead``): what it read is used once, a hold still stops the step it
names and the orders are read again after it, and a failed read is raised where the orders are
needed. Over a fake group: the store's side is what the elastic tests' holds exercise."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from jupyter_edt.runtime.membership import Membership, Placement


class Orders:
    """The controller's side of a group: its orders, and who read them how."""

    elastic = True

    def __init__(self) -> None:
        self.ctl = {"gen": 1, "hold": -1, "ckpt": 0}
        self.reads: list[tuple[str, str]] = []  # (how, thread name)
        self.held: list[int] = []
        self.fail = False

    def control(self) -> dict[str, int]:
        self.reads.append(("control", threading.current_thread().name))
        return dict(self.ctl)

    def control_aside(self) -> dict[str, int]:
        self.reads.append(("aside", threading.current_thread().name))
        if self.fail:
            raise RuntimeError("the controller's store is gone")
        return dict(self.ctl)

    def hold(self, step: int) -> None:
        self.held.append(step)
        self.ctl["hold"] = -1  # what the controller sets before it releases the step


@contextmanager
def membership(group: Any) -> Iterator[tuple[Membership, list[tuple[str, dict[str, Any]]]]]:
    """A worker's membership over ``group``, its thread ended after the test."""
    events: list[tuple[str, dict[str, Any]]] = []
    m = Membership(
        group, None, None, Placement(), lambda kind, **f: events.append((kind, f)), lambda: None
    )  # type: ignore[arg-type]
    try:
        yield m, events
    finally:
        m.close()


def test_orders_read_ahead_are_used_once_and_read_in_a_thread() -> None:
    g = Orders()
    with membership(g) as (m, _):
        m.read_orders_ahead()
        assert m.orders(5) == {"gen": 1, "hold": -1, "ckpt": 0}
        g.ctl["gen"] = 2  # ordered after the read ahead: the next step reads it
        assert m.orders(6)["gen"] == 2
    [(how, thread), second] = g.reads
    assert how == "aside" and thread.startswith("edt-orders")
    assert second[0] == "control"


def test_a_hold_read_ahead_stops_its_step_and_the_orders_are_read_after_it() -> None:
    g = Orders()
    with membership(g) as (m, events):
        g.ctl.update(hold=7, ckpt=1)
        m.read_orders_ahead()
        g.ctl["gen"] = 3  # ordered while the worker was on its way to the hold
        got = m.orders(7)
    assert g.held == [7] and events == [("held", {"global_step": 7})]
    assert got == {"gen": 3, "hold": -1, "ckpt": 1}  # read again after the hold


def test_a_failed_read_ahead_is_raised_where_the_orders_are_needed() -> None:
    g = Orders()
    g.fail = True
    with membership(g) as (m, _):
        m.read_orders_ahead()
        with pytest.raises(RuntimeError, match="store is gone"):
            m.orders(1)


def test_a_plain_process_reads_nothing_ahead() -> None:
    g = Orders()
    g.elastic = False
    with membership(g) as (m, _):
        m.read_orders_ahead()
        assert m.orders(0)["gen"] == 1
    assert [how for how, _ in g.reads] == ["control"]
