"""What the goodput policy may know of a running job, learnt online from its metric records:
how many optimizer steps remain, and how fast it steps at each GPU count it has run on."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# Weight of the newest step time in the running average: recent speed matters (a job's speed
# changes with its placement), but one slow step (a rescale pause) must not swing it.
EWMA = 0.2


@dataclass
class JobProgress:
    total_steps: int | None = None
    steps_per_epoch: int | None = None
    global_step: int = 0
    steps_per_s: dict[int, float] = field(default_factory=dict)  # by GPU (worker) count
    #: A restart job's measured restart: decision (its workers told to stop) to the first step
    #: of its workers' next run.
    restart_cost_s: float | None = None
    restart_asked: float | None = None  # a restart not yet measured: when it was decided
    run: str | None = None  # the run of the newest step
    asked_in: str | None = None  # the run a restart was decided in

    def observe(self, record: Mapping[str, Any]) -> None:
        kind = record.get("type")
        if kind == "train_begin":
            epochs, per_epoch = record.get("epochs"), record.get("steps_per_epoch")
            if isinstance(epochs, int) and isinstance(per_epoch, int):
                self.total_steps = epochs * per_epoch
                self.steps_per_epoch = per_epoch
            self.global_step = int(record.get("global_step", self.global_step))
        elif kind == "step":
            self.global_step = int(record["global_step"]) + 1
            at, run = record.get("time"), record.get("run")
            asked = self.restart_asked
            restarted = run != self.asked_in  # steps the old run made after the decision: no
            if asked is not None and restarted and isinstance(at, int | float) and at >= asked:
                self.restart_cost_s = at - asked
                self.restart_asked = None
            self.run = run
            seconds, world = record.get("step_s"), record.get("world_size")
            if isinstance(world, int) and isinstance(seconds, int | float) and seconds > 0:
                rate = 1.0 / seconds
                old = self.steps_per_s.get(world)
                self.steps_per_s[world] = rate if old is None else (1 - EWMA) * old + EWMA * rate

    @property
    def remaining_steps(self) -> float | None:
        if self.total_steps is None:
            return None
        return float(max(0, self.total_steps - self.global_step))


class ProgressBook:
    """Every running job's progress, fed with the metric records as they arrive."""

    def __init__(self) -> None:
        self._jobs: dict[str, JobProgress] = {}

    def observe(self, job_id: str, records: Iterable[Mapping[str, Any]]) -> None:
        progress = self._jobs.setdefault(job_id, JobProgress())
        for record in records:
            progress.observe(record)

    def restart_asked(self, job_id: str, when: float) -> None:
        """A restart of the job's workers was decided at `when`: its first step after that
        measures what a restart costs the job."""
        progress = self._jobs.setdefault(job_id, JobProgress())
        progress.restart_asked, progress.asked_in = when, progress.run

    def get(self, job_id: str) -> JobProgress | None:
        return self._jobs.get(job_id)

    def describe_step(self, job_id: str, step: int) -> str:
        """A global step as a user reads it: "step 120 (epoch 4)" when the job said how many
        steps an epoch has (epochs counted from 1, as the progress line shows them)."""
        known = self._jobs.get(job_id)
        if known is None or not known.steps_per_epoch:
            return f"step {step}"
        return f"step {step} (epoch {step // known.steps_per_epoch + 1})"

    def forget(self, job_id: str) -> None:
        self._jobs.pop(job_id, None)
