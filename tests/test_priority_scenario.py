"""Priority policy on 4 virtual GPUs, with real jobs: a high-priority job takes GPUs from a
low-priority one, which keeps its min; one that needs every GPU suspends it, and it resumes
from its checkpoint once the GPUs are free again."""

from __future__ import annotations

import json

import pytest
from jobprograms import program
from test_job_lifecycle import api, finished, wait_for, wait_status

from jupyter_edt.runtime.jobdir import JobDir


@pytest.fixture
def edt_config():
    return {
        "devices": "virtual",
        "virtual_gpus": 4,
        "min_rescale_interval": 0.0,
        "policy": "priority",
    }


@pytest.fixture
def jp_server_config(multi_user_config):
    return multi_user_config


async def test_high_priority_takes_gpus_low_keeps_its_min_or_is_suspended_then_resumes(
    jp_fetch, tmp_path
):
    low = await api(
        jp_fetch,
        "alice",
        "jobs",
        method="POST",
        body={"name": "low", "code": program(epochs=1000, delay=0.004), "max_gpus": 4},
    )
    low_dir = JobDir(tmp_path / "jobs" / low["id"])
    await wait_for(jp_fetch, "alice", low["id"], lambda j: j["state"] == "RUNNING", "RUNNING")

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
    assert len(whole["devices"]) == 4
    suspended = await api(jp_fetch, "alice", "jobs", low["id"])
    assert suspended["state"] == "QUEUED" and suspended["devices"] == []
    checkpoints = sorted((low_dir.result / "checkpoint").glob("*.pt"))
    assert checkpoints, "suspending checkpoints the job first"
    assert (await wait_for(jp_fetch, "bob", whole["id"], finished, "done"))["state"] == "SUCCEEDED"

    resumed = await wait_for(
        jp_fetch, "alice", low["id"], lambda j: j["state"] == "RUNNING", "running again"
    )
    assert len(resumed["devices"]) == 4
    await wait_status(low_dir, lambda s: s["state"] == "running", "resumed")
    resumes = [
        json.loads(line)
        for path in low_dir.logs.glob("events-*.jsonl")
        for line in path.read_text().splitlines()
        if '"resumed"' in line
    ]
    assert resumes and min(e["global_step"] for e in resumes) > 0  # from the checkpoint
    await api(jp_fetch, "alice", "jobs", low["id"], method="DELETE")
