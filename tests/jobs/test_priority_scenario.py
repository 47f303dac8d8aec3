"""Priority policy on 4 virtual GPUs, with real jobs: a high-priority job takes GPUs from a
low-priority one, which keeps its min; one that needs every GPU suspends it, and it resumes
from its checkpoint once the GPUs are free again."""

from __future__ import annotations

import json

import pytest
from jobprograms import elastic, program
from multiuser import api, cancel, finished, wait_for
from realjobs import wait_status

from jupyter_edt.runtime.jobdir import JobDir, process_start_time

pytestmark = pytest.mark.multi_user


@pytest.fixture
def edt_config(edt_config):
    return {**edt_config, "policy": "priority"}


async def test_high_priority_takes_gpus_low_keeps_its_min_or_is_suspended_then_resumes(
    jp_fetch, edt_app, tmp_path
):
    low = await api(
        jp_fetch,
        "alice",
        "jobs",
        method="POST",
        body={"name": "low", "code": program(epochs=1000, delay=0.004), "max_gpus": 4},
    )
    low_dir = JobDir(tmp_path / "jobs" / low["id"])
    await wait_for(jp_fetch, "alice", low["id"], elastic, "RUNNING")

    # a higher priority that wants 3: low shrinks to its min of 1, in place
    high = await api(
        jp_fetch,
        "bob",
        "jobs",
        method="POST",
        body={"name": "high", "code": program(epochs=1), "max_gpus": 3, "priority": 5},
    )
    assert len(high["devices"]) == 3
    assert len((await api(jp_fetch, "alice", "jobs", low["id"]))["devices"]) == 1
    await wait_status(low_dir, lambda s: len(s["workers"]) == 1, "shrank to its min")
    assert (await wait_for(jp_fetch, "bob", high["id"], finished, "done"))["state"] == "SUCCEEDED"
    await wait_for(jp_fetch, "alice", low["id"], lambda j: len(j["devices"]) == 4, "regrown")

    # a higher priority that needs all 4: low cannot keep even its min, so it is suspended
    whole = await api(
        jp_fetch,
        "bob",
        "jobs",
        method="POST",
        body={"code": program(epochs=1), "min_gpus": 4, "max_gpus": 4, "priority": 5},
    )
    # the submission returns at once: the new job waits while low checkpoints and releases
    assert whole["state"] == "QUEUED" and whole["devices"] == []
    assert (await wait_for(jp_fetch, "bob", whole["id"], finished, "done"))["state"] == "SUCCEEDED"
    checkpoints = sorted((low_dir.result / "checkpoint").glob("*.pt"))
    assert checkpoints, "suspending checkpoints the job first"
    # and in this order: low suspended, low's devices released, then given to the new job
    store = edt_app.job_service.store
    events = [e for e in store.events() if e["job_id"] in (low["id"], whole["id"])]

    def first(match) -> int:
        return next(i for i, e in enumerate(events) if match(e))

    preempted = first(lambda e: e["job_id"] == low["id"] and e.get("state") == "SUSPENDED")
    released = first(lambda e: e["job_id"] == low["id"] and e.get("devices") == [])
    admitted = first(lambda e: e["job_id"] == whole["id"] and e.get("devices"))
    assert preempted < released < admitted
    assert events[preempted]["reason"].startswith("preempted")
    assert "checkpoint written" in events[released]["reason"]
    assert len(events[admitted]["devices"]) == 4

    resumed = await wait_for(jp_fetch, "alice", low["id"], elastic, "running again")
    assert len(resumed["devices"]) == 4
    await wait_status(low_dir, lambda s: s["elastic"], "resumed")
    resumes = [
        json.loads(line)
        for path in low_dir.logs.glob("events-*.jsonl")
        for line in path.read_text().splitlines()
        if '"resumed"' in line
    ]
    assert resumes and min(e["global_step"] for e in resumes) > 0  # from the checkpoint
    await cancel(jp_fetch, "alice", low["id"])


async def test_cancelling_a_job_while_it_checkpoints_for_a_suspension_frees_its_gpus(
    jp_fetch, edt_app, tmp_path
):
    low = await api(
        jp_fetch,
        "alice",
        "jobs",
        method="POST",
        body={"code": program(epochs=1000, delay=0.004), "max_gpus": 4},
    )
    low_dir = JobDir(tmp_path / "jobs" / low["id"])
    await wait_for(jp_fetch, "alice", low["id"], elastic, "RUNNING")
    driver = low_dir.read_status()["pid"]
    whole = await api(
        jp_fetch,
        "bob",
        "jobs",
        method="POST",
        body={"code": program(epochs=1), "min_gpus": 4, "max_gpus": 4, "priority": 5},
    )
    assert whole["state"] == "QUEUED"
    cancelled = await cancel(jp_fetch, "alice", low["id"])
    assert cancelled["state"] == "CANCELLED" and cancelled["devices"] == []
    assert process_start_time(driver) is None
    done = await wait_for(jp_fetch, "bob", whole["id"], finished, "done")
    assert done["state"] == "SUCCEEDED", done["reason"]
    store = edt_app.job_service.store
    states = [e["state"] for e in store.events(job_id=low["id"]) if e["kind"] == "state"]
    assert states[-2:] in (["SUSPENDED", "CANCELLED"], ["QUEUED", "CANCELLED"])
    assert states.count("STARTING") == 1  # it never started again
