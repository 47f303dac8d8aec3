"""A job whose driver dies while the server runs: with real drivers and gloo workers on
virtual GPUs, through the job service and its runner. A SIGKILLed driver's job goes back to the
queue and resumes from its newest checkpoint, ending where an uninterrupted run ends; without a
checkpoint, or past `max_restarts`, it fails saying which process died, how, and its log."""

from __future__ import annotations

import os
import signal

import pytest
import torch
from jobprograms import FINAL_MODEL, exact_program, reference_model
from realjobs import alive, start_service
from realjobs import stop_service as shut_down
from waiting import eventually

from jupyter_edt.jobs.models import JobSpec
from jupyter_edt.jobs.service import JobService
from jupyter_edt.runtime.jobdir import JobDir

pytestmark = pytest.mark.asyncio

EPOCHS = 8
STEPS_PER_EPOCH = 6  # 48 samples in batches of 8

PROGRAM = exact_program(EPOCHS, 2, work_s=0.02, checkpoint_every=1)  # killed mid-run

SLEEPER = "import time\nwhile True:\n    time.sleep(0.05)\n"


async def stop_service(service: JobService) -> None:
    """Cancel what still runs (no job outlives its test), then stop as a shutdown does."""
    for job in service.store.list_jobs():
        if not job.state.terminal:
            await service.cancel(job.user, job.id)
    await shut_down(service)


async def kill_driver_when(service: JobService, job_id: str, ready) -> dict:
    """SIGKILL the job's driver once `ready(job_dir)` holds; its status at that moment."""
    d = service.runner.job_dir(job_id)
    status = await eventually(lambda: ready(d) and d.read_status(), "was ready to be killed")
    os.kill(status["pid"], signal.SIGKILL)
    return status


def reasons(service: JobService, job_id: str) -> list[str]:
    return [e["reason"] for e in service.store.events(job_id=job_id) if e["kind"] == "state"]


def mid_run(d: JobDir) -> bool:
    """Elastic, with a checkpoint and far from its end."""
    step = d.latest_checkpoint_step()
    status = d.read_status() or {}
    return (
        bool(status.get("elastic")) and step is not None and step < (EPOCHS - 3) * STEPS_PER_EPOCH
    )


async def test_a_killed_driver_resumes_from_its_checkpoint_and_ends_as_an_uninterrupted_run(
    tmp_path,
):
    service = start_service(tmp_path)
    try:
        job = await service.submit("alice", JobSpec(max_gpus=2, code=PROGRAM))
        first = await kill_driver_when(service, job.id, mid_run)
        requeued = await eventually(
            lambda: (j := service.store.get_job(job.id)).restarts == 1 and j,
            "went back to the queue",
            interval=0.01,
        )
        # its workers went with it: nothing of the first run trains on beside the second
        await eventually(
            lambda: not any(alive(p) for p in first["pids"].values()), "stopped the workers"
        )
        done = await eventually(
            lambda: (
                (j := service.store.get_job(job.id)).state in ("SUCCEEDED", "FAILED", "CANCELLED")
                and j
            ),
            "finished",
            interval=0.2,
        )
    finally:
        await stop_service(service)
    assert done.state == "SUCCEEDED", done.reason
    assert done.restarts == 1 and requeued.restarts == 1
    said = reasons(service, job.id)
    assert "driver killed by SIGKILL" in said
    resumed = [r for r in said if r.startswith("driver killed by SIGKILL; resumes from")]
    assert len(resumed) == 1 and "(restart 1 of 3)" in resumed[0], said
    assert "(epoch " in resumed[0]  # the user reads where it resumes, not only a step
    # each driver's steps once: the second's workers append to the first's files, which are
    # read on from where the service's records end, not again from their start
    steps: dict[str, list[int]] = {}
    for record in service.store.metrics(job.id):
        if record["type"] == "step":
            steps.setdefault(record["run"], []).append(record["global_step"])
    assert len(steps) == 2, list(steps)
    killed, resumed_run = steps.values()
    assert killed == list(range(len(killed))), killed
    assert resumed_run == list(range(resumed_run[0], EPOCHS * STEPS_PER_EPOCH)), resumed_run

    # the same run in one plain process, never interrupted
    theirs = reference_model(PROGRAM, tmp_path)
    ours = torch.load(service.runner.result_dir(job.id) / FINAL_MODEL)
    assert ours.keys() == theirs.keys()
    for name in ours:
        assert ours[name].dtype == torch.float64
        assert torch.equal(ours[name], theirs[name]), name


async def test_a_killed_driver_without_a_checkpoint_fails_the_job_saying_how(tmp_path):
    service = start_service(tmp_path)
    try:
        job = await service.submit("alice", JobSpec(max_gpus=2, code=SLEEPER))
        status = await kill_driver_when(
            service, job.id, lambda d: (d.read_status() or {}).get("state") == "running"
        )
        done = await eventually(
            lambda: (j := service.store.get_job(job.id)).state == "FAILED" and j, "failed"
        )
        await eventually(
            lambda: not any(alive(p) for p in status["pids"].values()), "stopped the workers"
        )
    finally:
        await stop_service(service)
    assert done.reason.startswith("driver killed by SIGKILL; no checkpoint to resume from")
    assert done.restarts == 0 and done.elastic is False


async def test_past_max_restarts_a_killed_driver_fails_the_job(tmp_path):
    service = start_service(tmp_path, max_restarts=0)
    try:
        job = await service.submit("alice", JobSpec(max_gpus=1, code=PROGRAM))
        await kill_driver_when(service, job.id, mid_run)
        done = await eventually(
            lambda: (j := service.store.get_job(job.id)).state == "FAILED" and j, "failed"
        )
    finally:
        await stop_service(service)
    assert done.reason.startswith(
        "driver killed by SIGKILL; restarted 0 time(s) already, the most allowed"
    ), done.reason


async def test_a_driver_that_reports_the_jobs_failure_fails_it_without_a_restart(tmp_path):
    """A training failure is the program's, not the driver's: no restart, the error shown."""
    service = start_service(tmp_path)
    try:
        job = await service.submit("alice", JobSpec(max_gpus=1, code="raise ValueError('bad')"))
        done = await eventually(
            lambda: (j := service.store.get_job(job.id)).state == "FAILED" and j, "failed"
        )
    finally:
        await stop_service(service)
    assert done.restarts == 0
    assert done.reason == "ValueError: bad (main.py:1 in <module>; worker w0)"


async def test_max_restarts_must_not_be_negative(tmp_path):
    with pytest.raises(ValueError, match="max_restarts must be 0 or more, got -1"):
        start_service(tmp_path, max_restarts=-1)
