"""Counters and histograms of what happens to jobs, read from the change feed as it is
published (`EventFeed.on_publish`): every state, allocation, restart and metrics event is
there, with its machine-readable `cause`, so the scheduler and the service never call the
metrics, and a change the store records cannot go uncounted.

Counted from this process's start, as Prometheus expects of counters (its `rate` and
`increase` take a restart's reset in their stride). A job that was already queued when the
service started has no queue wait observed: its QUEUED event came before.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from ..jobs.feed import Published
from ..jobs.models import RESCALES, TERMINAL, ChangeCause, JobState

#: A queue wait: seconds to a day.
WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400, float("inf"))
#: A resize's decision to the first step at the new size: an in-place resize takes about a
#: second, a restart job's tens of seconds.
RESIZE_BUCKETS = (0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, float("inf"))

#: What a lost driver became, by its `state` event.
LOST_OUTCOMES = {JobState.SUSPENDED.value: "requeued", JobState.FAILED.value: "failed"}


@dataclass(frozen=True)
class _Resize:
    """A rescale waiting for its first step: when it was decided, to how many GPUs, and the
    job's newest step then (its run and group generation)."""

    decided: float
    size: int
    kind: str
    before: tuple[Any, Any] | None

    def answered_by(self, step: Mapping[str, Any]) -> bool:
        """Whether `step` is the first at the new size: after the decision, at that size, of
        a new group (another run or generation than the newest step before; a program whose
        steps name neither is taken at its word). Steps the old group took after the
        decision are not: the group changes at a step boundary."""
        group = (step.get("run"), step.get("generation"))
        regrouped = self.before is None or group == (None, None) or group != self.before
        at = step.get("time")
        return (
            regrouped
            and step.get("world_size") == self.size
            and isinstance(at, int | float)
            and at >= self.decided
        )


class EventRecorder:
    """Reads published events into its metrics. `kind_of(job_id)`: the job's kind, None for
    a job that is gone (deleted since)."""

    def __init__(self, registry: CollectorRegistry, kind_of: Callable[[str], str | None]) -> None:
        self.kind_of = kind_of
        self.queue_wait = Histogram(
            "edt_queue_wait_seconds",
            "Seconds a job waited queued before it was given GPUs (QUEUED to STARTING; a "
            "job queued again after a suspension or a lost driver waits again), by job kind.",
            ["kind"],
            buckets=WAIT_BUCKETS,
            registry=registry,
        )
        self.rescales = Counter(
            "edt_rescales",
            "Rescales of running jobs, by job kind and cause: grow and shrink (the policy's "
            "share), move (as many GPUs, others), device_lost, node_drain.",
            ["kind", "cause"],
            registry=registry,
        )
        self.resize_to_first_step = Histogram(
            "edt_resize_to_first_step_seconds",
            "Seconds from a rescale's decision to the job's first training step at its new "
            "size (its new devices held but idle meanwhile), by job kind.",
            ["kind"],
            buckets=RESIZE_BUCKETS,
            registry=registry,
        )
        self.restarts = Counter(
            "edt_restarts",
            "Restarts of every worker of a restart job, by cause: resize, or failure.",
            ["cause"],
            registry=registry,
        )
        self.lost_drivers = Counter(
            "edt_lost_drivers",
            "Jobs whose driver died (or was gone after a restart of the service), by outcome: "
            "requeued to resume from a checkpoint, or failed.",
            ["outcome"],
            registry=registry,
        )
        self._kinds: dict[str, str | None] = {}  # of jobs seen alive
        self._queued: dict[str, float] = {}  # job -> when it was queued
        self._resizing: dict[str, _Resize] = {}
        self._last_step: dict[str, tuple[Any, Any]] = {}  # job -> (run, generation)
        self._readers: Mapping[str, Callable[[Mapping[str, Any]], None]] = {
            "state": self._state,
            "allocation": self._allocation,
            "restart": self._restart,
            "metrics": self._metrics,
        }

    def read(self, items: Sequence[Published]) -> None:
        """Count newly published events (`EventFeed.on_publish`)."""
        for item in items:
            reader = self._readers.get(item.event["kind"])
            if reader is not None:
                reader(item.event)

    def _kind(self, job_id: str) -> str | None:
        if job_id not in self._kinds:
            self._kinds[job_id] = self.kind_of(job_id)
        return self._kinds[job_id]

    def _state(self, event: Mapping[str, Any]) -> None:
        job_id, state, at = event["job_id"], event["state"], float(event["time"])
        if event.get("cause") == ChangeCause.LOST.value and state in LOST_OUTCOMES:
            self.lost_drivers.labels(LOST_OUTCOMES[state]).inc()
        if state == JobState.QUEUED.value:
            self._queued.setdefault(job_id, at)  # a later reason for the wait changes nothing
        elif state == JobState.STARTING.value:
            since = self._queued.pop(job_id, None)
            kind = self._kind(job_id)
            if since is not None and kind is not None:
                self.queue_wait.labels(kind).observe(max(0.0, at - since))
        elif state == JobState.SUSPENDED.value:
            self._resizing.pop(job_id, None)  # it trains at no new size
        elif JobState(state) in TERMINAL:
            for known in (self._kinds, self._queued, self._resizing, self._last_step):
                known.pop(job_id, None)

    def _allocation(self, event: Mapping[str, Any]) -> None:
        job_id, cause = event["job_id"], event.get("cause")
        if cause is None or ChangeCause(cause) not in RESCALES:
            self._resizing.pop(job_id, None)  # started, released or ended: no rescale
            return
        kind = self._kind(job_id)
        if kind is None:
            return
        self.rescales.labels(kind, cause).inc()
        self._resizing[job_id] = _Resize(
            float(event["time"]), len(event["devices"]), kind, self._last_step.get(job_id)
        )

    def _restart(self, event: Mapping[str, Any]) -> None:
        self.restarts.labels(event.get("cause") or "unknown").inc()

    def _metrics(self, event: Mapping[str, Any]) -> None:
        job_id = event["job_id"]
        steps = [r for r in event.get("records", ()) if r.get("type") == "step"]
        resize = self._resizing.get(job_id)
        first = None if resize is None else next(filter(resize.answered_by, steps), None)
        if resize is not None and first is not None:
            self.resize_to_first_step.labels(resize.kind).observe(first["time"] - resize.decided)
            del self._resizing[job_id]
        if steps:
            self._last_step[job_id] = (steps[-1].get("run"), steps[-1].get("generation"))
