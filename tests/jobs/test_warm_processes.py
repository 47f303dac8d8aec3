"""Warm processes on a live server: its jobs' processes come from its fork server, which a
configuration change stops (the running processes go on, new ones start cold) and restarts."""

from __future__ import annotations

import pytest
from jobprograms import elastic, program
from multiuser import api, cancel, wait_for
from realjobs import alive, wait_status
from waiting import eventually

from jupyter_edt.launch.local import ForkedProcess, LocalProcess
from jupyter_edt.runtime.jobdir import JobDir, process_start_time

pytestmark = pytest.mark.multi_user


@pytest.fixture
def edt_config(edt_config):
    return {**edt_config, "warm_workers": True}


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


async def submit(jp_fetch, name: str) -> dict:
    body = {"name": name, "code": program(epochs=1000, delay=0.004), "max_gpus": 2}
    return await api(jp_fetch, "alice", "jobs", method="POST", body=body)


async def test_warm_processes_turned_off_and_on_on_a_live_server(jp_fetch, edt_app, tmp_path):
    first = await submit(jp_fetch, "warm")
    await wait_for(jp_fetch, "alice", first["id"], elastic, "RUNNING")
    forkserver = edt_app._forkserver
    assert forkserver is not None and forkserver.ready
    runner = edt_app.job_service.runner
    assert isinstance(runner._drivers[first["id"]], ForkedProcess)
    status = await wait_status(
        JobDir(tmp_path / "jobs" / first["id"]), lambda s: len(s["pids"]) == 2, "2 workers"
    )
    workers = list(status["pids"].values())
    # the driver and its workers are the fork server's children, not the server's or driver's
    assert {parent_of(p) for p in [status["pid"], *workers]} == {forkserver.process.pid}

    edt_app.warm_workers = False
    await eventually(lambda: process_start_time(forkserver.process.pid) is None, "it stopped")
    assert all(alive(p) for p in [status["pid"], *workers])  # what it started goes on
    second = await submit(jp_fetch, "cold")
    await wait_for(jp_fetch, "alice", second["id"], elastic, "RUNNING")
    assert isinstance(runner._drivers[second["id"]], LocalProcess)

    edt_app.warm_workers = True
    assert edt_app._forkserver is not None and edt_app._forkserver.wait_ready(120)
    await cancel(jp_fetch, "alice", second["id"])
    third = await submit(jp_fetch, "warm again")
    await wait_for(jp_fetch, "alice", third["id"], elastic, "RUNNING")
    assert isinstance(runner._drivers[third["id"]], ForkedProcess)
    for job in (first, third):
        cancelled = await cancel(jp_fetch, "alice", job["id"])
        assert cancelled["state"] == "CANCELLED"
    # a cancel leaves none of their processes
    await eventually(
        lambda: not any(alive(p) for p in [status["pid"], *workers]),
        "the first job's processes gone",
    )
