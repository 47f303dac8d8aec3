"""A job runner whose jobs are no processes: the test plays their part.

For fast tests of the layer above the runner (the service's lifecycle, the scheduling loop,
recovery) with the real store and the real policies. The end-to-end tests with real drivers and
workers (test_job_lifecycle, test_recovery, test_driver_lost, ...) stay beside these.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jupyter_edt.jobs.models import Job
from jupyter_edt.jobs.protocols import RunnerReports
from jupyter_edt.jobs.service import JobService
from jupyter_edt.jobs.store import JobStore
from jupyter_edt.runtime.jobdir import JobDir, checkpoint_name
from jupyter_edt.scheduling.inventory import Device, VirtualInventory
from jupyter_edt.scheduling.monitor import InventoryMonitor


class FakeRunner:
    """Implements `jupyter_edt.jobs.protocols.JobRunner`. It records the orders it is given
    (`orders`) and the devices each job runs on (`running`); a suspension waits until the
    test ends it (`end_suspension`), as a checkpoint would take its time."""

    def __init__(self, jobs_dir: Path) -> None:
        self.jobs_dir = Path(jobs_dir)
        self.reports: RunnerReports | None = None
        self.orders: list[tuple[str, str, tuple[str, ...]]] = []
        self.running: dict[str, tuple[str, ...]] = {}
        self._suspensions: dict[str, asyncio.Future[bool]] = {}

    # JobRunner ----------------------------------------------------------------------------

    def report_to(self, reports: RunnerReports) -> None:
        self.reports = reports

    async def start(self, job: Job, devices: Sequence[Device]) -> None:
        self._record("start", job, devices)

    async def resize(self, job: Job, devices: Sequence[Device]) -> None:
        self._record("resize", job, devices)

    async def suspend(self, job: Job) -> bool:
        self.orders.append(("suspend", job.id, ()))
        done = self._suspensions.setdefault(job.id, asyncio.get_running_loop().create_future())
        try:
            return await done
        finally:
            self._suspensions.pop(job.id, None)
            self.running.pop(job.id, None)

    async def cancel(self, job: Job) -> None:
        self.orders.append(("cancel", job.id, ()))
        self.running.pop(job.id, None)

    def reattach(self, job: Job) -> bool:
        return job.id in self.running

    def log_dir(self, job_id: str) -> Path:
        return self.job_dir(job_id).logs

    def job_dir(self, job_id: str) -> JobDir:
        return JobDir(self.jobs_dir / job_id)

    def result_dir(self, job_id: str) -> Path:
        return self.job_dir(job_id).result

    def staging_dir(self) -> Path:
        return self.jobs_dir / ".uploads"

    def install_code(self, job_id: str, tree: Path) -> None:
        d = self.job_dir(job_id)
        d.root.mkdir(parents=True, exist_ok=True)
        tree.rename(d.code)

    # what the job's processes do, played by the test --------------------------------------

    async def started(self, job_id: str) -> None:
        await self._reports().job_running(job_id)

    async def goes_elastic(self, job_id: str) -> None:
        await self._reports().job_elastic(job_id)

    async def exits(self, job_id: str, succeeded: bool = True, reason: str = "finished") -> None:
        self.running.pop(job_id, None)
        await self._reports().job_exited(job_id, succeeded, reason)

    async def dies(self, job_id: str, why: str = "driver killed by SIGKILL") -> None:
        self.running.pop(job_id, None)
        await self._reports().job_lost(job_id, why)

    def checkpoints(self, job_id: str, step: int) -> None:
        d = self.job_dir(job_id)
        d.checkpoints.mkdir(parents=True, exist_ok=True)
        (d.checkpoints / checkpoint_name(step)).write_bytes(b"")

    def end_suspension(self, job_id: str, *, clean: bool = True) -> None:
        self._suspensions[job_id].set_result(clean)

    def suspending(self, job_id: str) -> bool:
        return job_id in self._suspensions

    # ----------------------------------------------------------------------------------------

    def _record(self, action: str, job: Job, devices: Sequence[Device]) -> None:
        ids = tuple(d.id for d in devices)
        self.orders.append((action, job.id, ids))
        self.running[job.id] = ids

    def _reports(self) -> RunnerReports:
        assert self.reports is not None, "the service calls report_to() when it is made"
        return self.reports


def fake_service(
    tmp_path: Path,
    runner: FakeRunner | None = None,
    *,
    database_url: str | None = None,
    **options: Any,
) -> JobService:
    """A real service (its store in `tmp_path`, or at `database_url`; real policies) on 4
    virtual GPUs over the fake runner, rescaling at any moment; `options` go to JobService."""
    monitor = InventoryMonitor(VirtualInventory(4))
    monitor.record(monitor.inventory.read(), time.time())
    return JobService(
        JobStore(database_url or f"sqlite:///{tmp_path / 'edt.sqlite'}"),
        monitor,
        runner or FakeRunner(tmp_path / "jobs"),
        **{"min_rescale_interval": 0.0, **options},
    )
