"""What the jobs modules that run real drivers and gloo workers share: a job service on virtual
GPUs with no server around it (`start_service`, `stop_service`), the driver's status file
awaited (`wait_status`) and whether a process still lives (`alive`)."""

from __future__ import annotations

import time

from waiting import eventually

from jupyter_edt.jobs.runner import DriverRunner
from jupyter_edt.jobs.service import JobService
from jupyter_edt.jobs.store import JobStore
from jupyter_edt.launch.local import LocalLauncher
from jupyter_edt.runtime.jobdir import JobDir, process_start_time
from jupyter_edt.scheduling.inventory import VirtualInventory
from jupyter_edt.scheduling.monitor import InventoryMonitor
from jupyter_edt.scheduling.policy import PolicyName


def start_service(
    tmp_path, policy: PolicyName = "fair-share", database_url: str | None = None, **options
) -> JobService:
    """A job service on 2 virtual GPUs with a real runner, its store in `tmp_path` (or at
    `database_url`); `options` go to JobService."""
    runner = DriverRunner(LocalLauncher(), tmp_path / "jobs")
    monitor = InventoryMonitor(VirtualInventory(2))
    monitor.record(monitor.inventory.read(), time.time())
    service = JobService(
        JobStore(database_url or f"sqlite:///{tmp_path / 'edt.sqlite'}"),
        monitor,
        runner,
        policy=policy,
        min_rescale_interval=0.0,
        **options,
    )
    return service


async def stop_service(service: JobService) -> None:
    """What a server shutdown does: stop watching, close the store; jobs keep running."""
    await service.close()
    await service.runner.close()
    service.store.close()


async def wait_status(job_dir: JobDir, condition, what: str) -> dict:
    """The driver's status once `condition(status)` holds."""
    return await eventually(
        job_dir.read_status,
        f"{what} (the driver of job {job_dir.root.name})",
        until=lambda status: status is not None and condition(status),
        interval=0.2,
    )


def alive(pid: int) -> bool:
    """Whether the process runs (a zombie does not: it has ended, unreaped)."""
    return process_start_time(pid) is not None
