"""A restarted job service finds its jobs again: a live driver is re-attached and its job
finishes; a job whose processes died while no server ran resumes from its checkpoint.

"Restart" here is what it is for the service: new store, runner and service objects on the same
database and job directories, while the job processes of the old ones keep running."""

from __future__ import annotations

import asyncio
import json
import os
import signal

import pytest
from jobprograms import elastic, program
from realjobs import start_service, stop_service
from waiting import eventually

from jupyter_edt.jobs.models import JobSpec, JobState
from jupyter_edt.jobs.service import JobService
from jupyter_edt.runtime.jobdir import JobDir, process_start_time

pytestmark = pytest.mark.asyncio

SLEEPER = "import time\nwhile True:\n    time.sleep(0.05)\n"


async def wait_until(service: JobService, job_id: str, condition, what: str):
    """The job as the service's store holds it, once `condition(job)` holds."""
    return await eventually(
        lambda: service.store.get_job(job_id),
        f"{what} (job {job_id})",
        until=condition,
        interval=0.2,
    )


async def test_a_running_job_is_reattached_and_finishes(tmp_path, database_url):
    first = start_service(tmp_path, database_url=database_url)
    job = await first.submit("alice", JobSpec(code=program(epochs=4, delay=0.02), max_gpus=2))
    await wait_until(first, job.id, elastic, "ran")
    status = JobDir(tmp_path / "jobs" / job.id).read_status()
    await stop_service(first)

    stale = tmp_path / "jobs" / ".uploads" / "interrupted"
    stale.mkdir(parents=True)  # an upload the old server never finished
    second = start_service(tmp_path, database_url=database_url)
    outcome = await second.recover()
    assert outcome == {"reattached": [job.id], "resumed": [], "failed": []}
    assert not stale.exists()
    done = await wait_until(second, job.id, lambda j: j.state != "RUNNING", "finished")
    assert done.state == "SUCCEEDED", done.reason
    assert process_start_time(status["pid"]) is None
    metrics = second.store.metrics(job.id)
    assert metrics and metrics[-1]["type"] == "epoch" and metrics[-1]["epoch"] == 3
    # the new server read the event files from their start: what the old one stored is not
    # stored again
    assert [m["epoch"] for m in metrics if m["type"] == "epoch"] == [0, 1, 2, 3]
    steps = [m["global_step"] for m in metrics if m["type"] == "step"]
    assert steps == list(range(len(steps)))
    await stop_service(second)


async def test_a_job_whose_processes_died_resumes_from_its_checkpoint(tmp_path):
    first = start_service(tmp_path)
    job = await first.submit("alice", JobSpec(code=program(epochs=6, delay=0.02), max_gpus=2))
    job_dir = JobDir(tmp_path / "jobs" / job.id)
    checkpoints = job_dir.result / "checkpoint"
    await wait_until(
        first,
        job.id,
        lambda j: checkpoints.is_dir() and any(checkpoints.glob("*.pt")),
        "checkpointed",
    )
    status = job_dir.read_status()
    await stop_service(first)
    os.killpg(status["pid"], signal.SIGKILL)  # the machine lost the job while no server ran
    while process_start_time(status["pid"]) is not None:  # reaped by its parent shortly
        await asyncio.sleep(0.05)

    second = start_service(tmp_path)
    outcome = await second.recover()
    assert outcome["resumed"] == [job.id]
    history = [e["state"] for e in second.store.events(job_id=job.id) if e["kind"] == "state"]
    # back in line, then restarted (its new driver may already have said it runs)
    lost = len(history) - 1 - history[::-1].index("SUSPENDED")
    assert history[lost : lost + 3] == ["SUSPENDED", "QUEUED", "STARTING"], history
    done = await wait_until(second, job.id, lambda j: j.state in ("SUCCEEDED", "FAILED"), "ended")
    assert done.state == "SUCCEEDED", done.reason
    resumed = [
        json.loads(line)
        for path in job_dir.logs.glob("events-*.jsonl")
        for line in path.read_text().splitlines()
        if '"resumed"' in line
    ]
    assert resumed and all(e["global_step"] > 0 for e in resumed)
    await stop_service(second)
    assert JobState(done.state).terminal


async def test_a_driver_that_died_while_no_server_ran_leaves_no_worker_behind(tmp_path):
    """Only the driver was killed: its workers (in its process group) are stopped when the
    next server finds it gone, before the job resumes with new ones. These workers run a
    plain loop, which nothing else would ever stop."""
    first = start_service(tmp_path)
    job = await first.submit("alice", JobSpec(code=SLEEPER, max_gpus=2))
    job_dir = JobDir(tmp_path / "jobs" / job.id)
    status = await eventually(
        job_dir.read_status,
        "its workers running",
        until=lambda s: s and len(s.get("pids", {})) == 2,
    )
    await stop_service(first)
    os.kill(status["pid"], signal.SIGKILL)  # the driver alone
    await eventually(lambda: process_start_time(status["pid"]) is None, "the driver ended")
    workers = {p: process_start_time(p) for p in status["pids"].values()}
    assert all(workers.values())  # orphaned, looping on

    second = start_service(tmp_path)
    outcome = await second.recover()
    assert outcome["resumed"] == [job.id]
    await eventually(
        lambda: not any(process_start_time(p) == t for p, t in workers.items()),
        "stopped the orphaned workers",
    )
    await second.cancel("alice", job.id)
    await stop_service(second)


async def test_a_suspension_cut_short_by_a_restart_releases_the_gpus_after_the_checkpoint(
    tmp_path,
):
    first = start_service(tmp_path, "priority")
    low = await first.submit("alice", JobSpec(code=program(epochs=1000, delay=0.02), max_gpus=2))
    low_dir = JobDir(tmp_path / "jobs" / low.id)
    await wait_until(first, low.id, elastic, "ran")
    high = await first.submit(
        "bob", JobSpec(code=program(epochs=1), min_gpus=2, max_gpus=2, priority=5)
    )
    # the submission returned at once; low checkpoints, holding its GPUs until it has
    assert high.state == "QUEUED" and high.devices == ()
    suspending = first.store.get_job(low.id)
    assert suspending.state == "SUSPENDED" and len(suspending.devices) == 2
    driver = low_dir.read_status()["pid"]
    await stop_service(first)  # the server stops while low's driver checkpoints

    second = start_service(tmp_path, "priority")
    await second.recover()
    done = await wait_until(second, high.id, lambda j: j.state in ("SUCCEEDED", "FAILED"), "ran")
    assert done.state == "SUCCEEDED", done.reason
    assert process_start_time(driver) is None  # low's driver finished its suspension first
    events = second.store.events()
    released = next(e for e in events if e["job_id"] == low.id and e.get("devices") == [])
    assert released["reason"] == "suspended: checkpoint written, GPUs released"
    admitted = next(e for e in events if e["job_id"] == high.id and e.get("devices"))
    assert released["id"] < admitted["id"]
    assert any((low_dir.result / "checkpoint").glob("*.pt"))
    back = await wait_until(second, low.id, elastic, "resumed")
    assert len(back.devices) == 2
    await second.cancel("alice", low.id)
    await stop_service(second)
