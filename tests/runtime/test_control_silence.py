"""How the controller settles who is gone after a failure when its launcher asks another
machine (Ray) about each worker: silence past a bound is a loss, a silent worker on the node of
one that vanished is lost with it, and a smaller group is published only once every remaining
member answers. Handles are fakes (the launcher is the layer below; tests/ray runs it for
real); the controller and its store are real."""

from __future__ import annotations

import signal

import pytest

from jupyter_edt.launch.base import ProcessHandle, ProcessSpec
from jupyter_edt.runtime.control import LOST_SILENCE_S, STUCK_GRACE_S, LocalController

LOST = -signal.SIGKILL


class Remote(ProcessHandle):
    """A worker on `node` whose launcher has not heard from it for `silent` seconds."""

    def __init__(self, name: str, node: str, silent: float = 0.0, code: int | None = None):
        self.spec = ProcessSpec(job_id="j", name=name, argv=[], cwd=".", log_dir=".", node=node)  # type: ignore[arg-type]
        self.pid = 1
        self.silent = silent
        self.code = code
        self.vanished = code == LOST
        self.abandoned = False

    @property
    def returncode(self) -> int | None:
        return self.code

    @property
    def silent_s(self) -> float:
        return 0.0 if self.code is not None else self.silent

    def abandon(self) -> None:
        self.abandoned, self.code, self.vanished = True, LOST, True

    def send_signal(self, sig: int) -> None:
        pass


@pytest.fixture
def ctl(tmp_path):
    controller = LocalController(["unused.py"], tmp_path)
    yield controller
    controller.procs = {}  # nothing real to stop
    controller.close()


def members(ctl: LocalController, *handles: Remote) -> dict[str, Remote]:
    ctl.procs = {h.spec.name: h for h in handles}
    ctl.members = tuple(ctl.procs)
    return ctl.procs  # type: ignore[return-value]


def test_a_silent_member_is_waited_for_then_lost(ctl):
    procs = members(ctl, Remote("w0", "a", silent=STUCK_GRACE_S + 0.1), Remote("w1", "b"))
    assert ctl._settle([]) is None  # it may yet answer: no generation meanwhile
    procs["w0"].silent = LOST_SILENCE_S + 0.1
    assert ctl._settle([]) == ["w0"] and procs["w0"].abandoned
    assert not procs["w1"].abandoned


def test_the_members_on_the_node_of_one_that_vanished_are_lost_with_it(ctl):
    """A node dies with all its processes, though not all at the same instant: one keeper is
    gone, another on its node still answers for a moment. Both are lost at once, so the
    smaller group never counts the second (it would fail to form at the group's timeout)."""
    procs = members(
        ctl,
        Remote("w0", "a", code=LOST),  # its keeper died with node a
        Remote("w1", "a"),  # its keeper still answers, for now
        Remote("w2", "b", silent=0.3),  # slow to answer, on a node that lives
        Remote("w3", "b"),
    )
    # w1 is lost at once with its node; w2 may yet answer, so the group waits for it
    assert ctl._settle(["w0"]) is None
    assert procs["w1"].abandoned and not procs["w2"].abandoned
    procs["w2"].silent = 0.0  # it answered: the group without node a may form
    dead = [w for w, p in procs.items() if p.returncode is not None]  # as the watcher reads
    assert dead == ["w0", "w1"] and ctl._settle(dead) == ["w0", "w1"]


def test_silence_past_the_bound_takes_the_members_of_its_node_too(ctl):
    procs = members(
        ctl,
        Remote("w0", "a", silent=LOST_SILENCE_S + 0.1),
        Remote("w1", "a"),
        Remote("w2", "b"),
    )
    assert sorted(ctl._settle([]) or []) == ["w0", "w1"]
    assert not procs["w2"].abandoned


def test_answering_members_of_a_stuck_group_form_again(ctl):
    """One machine, or every keeper answering: nobody is lost, the same members form again
    (a stuck peer), and a dead one is dropped at once."""
    members(ctl, Remote("w0", "a"), Remote("w1", "a"))
    assert ctl._settle([]) == []
    assert ctl._settle(["w1"]) == ["w1"]
