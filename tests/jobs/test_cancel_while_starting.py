"""A cancel (or a delete) that arrives while the job's driver is being started: the start is
let finish and its driver stopped, never left to run on for a job that has ended. (The WMLA
execs test met it: an exec deleted while STARTING kept its driver and workers running, in a
deleted directory, through the rest of the run.)"""

from __future__ import annotations

import asyncio
import threading

import pytest
from jobprograms import DEADLINE_S
from realjobs import alive, start_service, stop_service
from waiting import eventually

from jupyter_edt.jobs.models import JobSpec, JobState
from jupyter_edt.launch.base import ProcessHandle, ProcessSpec
from jupyter_edt.launch.local import LocalLauncher

pytestmark = pytest.mark.asyncio

SLEEPER = "import time\nwhile True:\n    time.sleep(0.05)\n"


class GatedLauncher(LocalLauncher):
    """Starts a process only once the test opens `gate`; `waiting` says a start is held."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting = threading.Event()
        self.gate = threading.Event()
        self.started: list[ProcessHandle] = []

    def start_sync(self, spec: ProcessSpec) -> ProcessHandle:
        self.waiting.set()
        if not self.gate.wait(DEADLINE_S):
            raise TimeoutError("the test never opened the gate")
        handle = super().start_sync(spec)
        self.started.append(handle)
        return handle


@pytest.mark.parametrize("how", ["cancel", "delete"])
async def test_a_job_ended_while_its_driver_starts_leaves_no_process(tmp_path, how):
    service = start_service(tmp_path)
    launcher = service.runner.launcher = GatedLauncher()
    asked = asyncio.Event()  # the cancel has reached the runner
    cancel = service.runner.cancel

    async def noticed_cancel(job):
        asked.set()
        await cancel(job)

    service.runner.cancel = noticed_cancel  # type: ignore[method-assign]
    try:
        submitted = asyncio.create_task(service.submit("alice", JobSpec(code=SLEEPER, max_gpus=1)))
        assert await asyncio.to_thread(launcher.waiting.wait, DEADLINE_S)
        (job,) = service.store.list_jobs(user="alice")
        assert job.state == JobState.STARTING
        ending = asyncio.create_task(getattr(service, how)("alice", job.id))
        await asyncio.wait_for(asked.wait(), DEADLINE_S)
        launcher.gate.set()  # the driver starts now, after the cancel
        ended = await asyncio.wait_for(ending, DEADLINE_S)
        await asyncio.wait_for(submitted, DEADLINE_S)
        assert ended.state == JobState.CANCELLED
        (driver,) = launcher.started
        await eventually(lambda: not alive(driver.pid), f"the driver ({driver.pid}) stopped")
        assert service.runner._drivers == {}  # nothing follows it
    finally:
        launcher.gate.set()
        await stop_service(service)
