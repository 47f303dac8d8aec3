"""A worker's part in its job's generations: join, hold, rescale, recover.

Kept apart from the training step (as Horovod keeps its run wrapper apart from ``State``): the
step computes and commits; this loop decides who takes part. At a global-step boundary that
every worker agreed on, a worker reads the newest generation (``rescale``); after a failed
collective it drops the step and waits for the controller's next generation (``recover``). In
both cases the members re-form the process group in place and every member's ``TrainState``
becomes the most advanced one: joiners, and members behind, receive it from one holder over the
collective. A worker left out of a generation raises ``LeaveJob``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from .buckets import GradientBuckets
from .group import Group, GroupError, LeaveJob
from .priority import restore_start_priority
from .state import TrainState

__all__ = ["Membership", "Placement"]


class Emit(Protocol):
    def __call__(self, kind: str, **fields: Any) -> None: ...


@dataclass
class Placement:
    """Where this worker sits in its job (what callbacks read as ``trainer.rank``, ...), and
    whether its state is the job's yet. It outlives one ``fit``, as the trainer does.

    A plain process, and a worker before its first generation has formed, sit at rank 0 of a
    world of 1 in generation 1.
    """

    rank: int = 0
    world_size: int = 1
    generation: int = 1
    has_state: bool = False  # a generation formed with us: our state is the job's
    joined_late: bool = False  # we joined a job that had trained before


class Membership:
    """Moves one worker through its job's generations, on any ``Group``.

    ``resume`` reads the latest checkpoint into the state (a job's first generation starts
    from it); ``emit`` records an event.
    """

    def __init__(
        self,
        group: Group,
        state: TrainState,
        grads: GradientBuckets,
        placement: Placement,
        emit: Emit,
        resume: Callable[[], object],
    ) -> None:
        self.group = group
        self.state = state
        self.grads = grads
        self.placement = placement
        self.emit = emit
        self.resume = resume
        self._held = -1  # the global step at which this worker last held
        self._reader: ThreadPoolExecutor | None = None  # reads the next step's orders early
        self._next_orders: Future[dict[str, int]] | None = None

    def join(self) -> None:
        """Enter the job: a solo process from its own checkpoints, a job's worker by waiting
        for the first generation that includes it."""
        g = self.group
        if not g.elastic:
            self.resume()
            return
        restore_start_priority()  # prepared: from here the job waits for this worker too
        g.signal_ready()
        gen, members = g.next_membership(after=0)
        self.form(gen, members, time.monotonic())

    def orders(self, global_step: int) -> dict[str, int]:
        """The controller's orders before ``global_step`` (read by :meth:`read_orders_ahead`
        if it was called since the last step began); waits there once if told to hold."""
        g = self.group
        ahead, self._next_orders = self._next_orders, None
        ctl = ahead.result() if ahead is not None else g.control()
        if ctl["hold"] == global_step and self._held != global_step:
            self._held = global_step
            self.emit("held", global_step=global_step)
            g.hold(global_step)
            ctl = g.control()
        return ctl

    def read_orders_ahead(self) -> None:
        """Start reading the next step's orders from the controller's store now, in a thread,
        while this step waits for its sum: the round trip to the store then overlaps it
        instead of starting the next step (on a GPU, or a core to spare, it costs the step
        nothing). Orders are read at most that wait earlier: an order is asynchronous anyway,
        and a hold is set before workers reach it (``LocalController.hold``)."""
        if not self.group.elastic:
            return
        if self._reader is None:
            self._reader = ThreadPoolExecutor(1, thread_name_prefix="edt-orders")
        self._next_orders = self._reader.submit(self.group.control_aside)

    def close(self) -> None:
        """End the thread that reads orders ahead (``fit`` is over)."""
        self._next_orders = None
        if self._reader is not None:
            self._reader.shutdown(wait=False)
            self._reader = None

    def rescale(self, agreed_generation: int) -> None:
        """After a committed step: move to ``agreed_generation`` if it is newer (every worker
        has seen it ordered, so every worker moves at this boundary)."""
        if agreed_generation <= self.placement.generation:
            return
        t_end = time.monotonic()
        members = self.group.members_of(agreed_generation)
        if self.group.worker_id not in members:
            raise LeaveJob
        self.form(agreed_generation, members, t_end)

    def recover(self, error: Exception, t_start: float) -> None:
        """Re-form without the failed peer; the caller has dropped the half-done step."""
        g = self.group
        self.emit("failure", error=str(error)[:300], global_step=self.state.global_step)
        g.report_failure()
        self.grads.drain()  # its thread must not post into the next generation's group
        g.destroy()
        gen, members = g.next_membership(after=self.placement.generation)
        self.form(gen, members, t_start)

    def form(self, gen: int, members: tuple[str, ...], t_start: float) -> None:
        """Join generation ``gen`` and make every member's state equal the most advanced one."""
        g, place = self.group, self.placement
        self._next_orders = None  # read before the generation changed: read them again
        while True:
            try:
                g.form(gen, members)
                place.rank, place.world_size, place.generation = g.rank, g.world_size, gen
                views = g.all_gather_ints([self.state.global_step, int(place.has_state)])
                holders = [r for r, (_, h) in enumerate(views) if h]
                if not holders:  # a fresh job: rank 0 starts it, from a checkpoint if any
                    if place.rank == 0:
                        self.resume()
                    src, best = 0, -1
                else:
                    best = max(views[r][0] for r in holders)
                    src = min(r for r in holders if views[r][0] == best)
                receivers = [
                    r for r, (s, h) in enumerate(views) if r != src and (not h or s != best)
                ]
                sent = 0
                if place.rank == src:
                    state = self.state.capture()
                    for r in receivers:
                        sent += g.send_state(state, r)
                elif place.rank in receivers:
                    self.state.restore(g.recv_state(src))
                    self.grads.zero()
                if not place.has_state:  # our first group: did the job run before us?
                    place.joined_late = bool(holders)
                place.has_state = True
                break
            except GroupError as e:
                self.emit("form_failed", error=str(e)[:300])
                g.report_failure()
                g.destroy()
                gen, members = g.next_membership(after=gen)
        pause = time.monotonic() - t_start
        info: dict[str, object] = {
            "generation": gen,
            "world_size": place.world_size,
            "members": list(members),
            "pause_s": pause,
            "state_from": src,
            "receivers": receivers,
            "bytes_sent": sent,
            "global_step": self.state.global_step,
            "backend": g.backend,
        }
        self.emit("generation", **info)
        if place.rank == 0:
            g.report_formed(info)
