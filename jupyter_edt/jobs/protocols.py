"""What the job service and a runner know of each other, and nothing more.

The service gives a runner orders (`JobRunner`); the runner reports what its processes did
through the calls of `RunnerReports`, which the service hands it once (`report_to`). So a
runner can be replaced (another launcher, a fake in tests) without knowing the service.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..scheduling.inventory import Device
from .models import Job

if TYPE_CHECKING:
    from ..runtime.jobdir import JobDir
    from .metrics import ReadFrom

__all__ = ["JobRunner", "RunnerReports"]


class RunnerReports(Protocol):
    """How a runner tells the service what a job's processes did."""

    async def job_running(self, job_id: str, reason: str = ...) -> None:
        """Its processes have started."""

    async def job_elastic(self, job_id: str) -> None:
        """Its program announced the elastic runtime: it may be resized in place."""

    async def job_formed(self, job_id: str, formed: Mapping[str, Any]) -> None:
        """Its workers formed a group: generation, world_size, pause_s, time."""

    async def job_restarted(self, job_id: str, restart: Mapping[str, Any]) -> None:
        """Its driver started every worker again (a restart job: a resize or a failure):
        count, reason, detail, world_size, the old workers that exited and were killed."""

    async def job_lost(self, job_id: str, why: str, log_tail: str = ...) -> None:
        """Its driver died, and its workers with it; the job itself may resume."""

    async def job_exited(self, job_id: str, succeeded: bool, reason: str) -> None:
        """It ended by itself: succeeded, or failed for `reason`."""

    def add_metrics(
        self,
        batches: Mapping[str, Sequence[Mapping[str, Any]]],
        positions: Mapping[str, Mapping[str, int]] | None = None,
    ) -> None:
        """Metric records its workers wrote, for many jobs at once, and how far each job's
        files were read to find them (`ReadFrom.positions`)."""

    def read_from(self, job_id: str) -> ReadFrom:
        """Where reading the job's metric files takes up again (a resumed job, a restart)."""


class JobRunner(Protocol):
    """Runs jobs' processes on the devices the service orders."""

    def report_to(self, reports: RunnerReports) -> None:
        """Where to report; called once, by the service that owns the runner."""

    async def start(self, job: Job, devices: Sequence[Device]) -> None: ...

    async def resize(self, job: Job, devices: Sequence[Device]) -> None: ...

    async def suspend(self, job: Job) -> bool:
        """Checkpoint and stop; True when it stopped by itself with its checkpoint written."""

    async def cancel(self, job: Job) -> None: ...

    def reattach(self, job: Job) -> bool:
        """After a restart: follow the job's processes again if they still run."""

    def log_dir(self, job_id: str) -> Path: ...

    # uploaded code and artifacts
    def job_dir(self, job_id: str) -> JobDir: ...

    def result_dir(self, job_id: str) -> Path: ...

    def staging_dir(self) -> Path: ...

    def install_code(self, job_id: str, tree: Path) -> None: ...
