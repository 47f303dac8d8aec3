"""A Lightning program as a `restart` job of a real server, on 4 virtual GPUs: it shrinks
4 -> 2 by a restart when another job arrives and grows back to 4 when that job ends,
checkpointing at the step its workers agree on each time, so it SUCCEEDS with exactly the
optimizer steps of an uninterrupted run, its global batch the same at every size, its loss curve
in the job's metrics. (A Hugging Face program goes through the same on a real service in
bench.restart, whose one run in the suite is the GPU check's dry run:
tests/bench/test_gpu_check_script.py.)"""

from __future__ import annotations

import pytest
from multiuser import api, finished, wait_for
from restartjobs import PROGRAMS, QUIET
from waiting import eventually

pytestmark = pytest.mark.multi_user

#: The global batch every start keeps: 4 per device at 4 workers, twice 4 at 2.
BATCH = 16
#: Eight epochs of 64 samples at a global batch of 16: 32 optimizer steps, enough left when the
#: other job ends for growing back to pay for a restart (the allocator grows a restart job only
#: when the time it saves is more than twice what its restarts cost it, as measured).
EPOCHS, STEPS = 8, 32
#: Seconds to read a sample: reading dominates a step (0.8 s at 4 workers, 1.6 s at 2), so 4
#: workers step faster than 2 on this machine's cores too, however busy they are.
SAMPLE_S = 0.2


def config(framework: str) -> dict:
    """A restart job may be resized at once; its framework is imported by the fork server,
    so its restarted workers start warm."""
    return {
        "devices": "virtual",
        "virtual_gpus": 4,
        "min_rescale_interval": 0.0,
        "restart_interval": 0.0,
        "warm_imports": [framework],
    }


async def steps(jp_fetch, job_id: str) -> list[dict]:
    """The job's step records, as the API gives them."""
    records = (await api(jp_fetch, "alice", "jobs", job_id, "metrics"))["metrics"]
    return [r for r in records if r["type"] == "step"]


def restarts(app, job_id: str) -> list[dict]:
    return [e for e in app.job_service.store.events(job_id=job_id) if e["kind"] == "restart"]


@pytest.fixture
def edt_config() -> dict:
    return config("lightning.pytorch")


async def test_a_restart_job_shrinks_and_grows_back_without_losing_a_step(
    jp_fetch, edt_app, tmp_path
):
    program = "lightning_regression.py"
    env = {
        **{k: v for k, v in QUIET.items() if k != "CUDA_VISIBLE_DEVICES"},  # the service's
        "EDT_EFFECTIVE_BATCH_SIZE": str(BATCH),
        "TEST_SAMPLE_S": str(SAMPLE_S),
        "TEST_EPOCHS": str(EPOCHS),
    }
    body = {
        "name": program,
        "code": (PROGRAMS / program).read_text(),
        "kind": "restart",
        "max_gpus": 4,
        "env": env,
    }
    job = await api(jp_fetch, "alice", "jobs", method="POST", body=body)
    await eventually(lambda: steps(jp_fetch, job["id"]), "a step at 4", timeout=240)

    # bob's job arrives: alice's shrinks to 2, by a restart at the step its workers agree on
    marker = tmp_path / "bob-done"
    code = f"import os, time\nwhile not os.path.exists({str(marker)!r}):\n    time.sleep(0.05)\n"
    other = await api(jp_fetch, "bob", "jobs", method="POST", body={"code": code, "max_gpus": 2})
    await eventually(
        lambda: steps(jp_fetch, job["id"]),
        "a step at 2",
        until=lambda s: any(r["world_size"] == 2 for r in s),
        timeout=240,
    )
    # what the restart cost this job, measured from the decision to its first step at 2
    assert edt_app.job_service.progress.get(job["id"]).restart_cost_s > 0

    # bob's job ends: alice's grows back to 4
    marker.touch()
    await wait_for(jp_fetch, "bob", other["id"], finished, "bob's job finished")
    await wait_for(jp_fetch, "alice", job["id"], lambda j: len(j["devices"]) == 4, "grown")
    done = await wait_for(jp_fetch, "alice", job["id"], finished, "finished")
    assert done["state"] == "SUCCEEDED", done["reason"]

    said = restarts(edt_app, job["id"])
    assert [(e["cause"], e["world_size"], e["killed"]) for e in said] == [
        ("resize", 2, []),
        ("resize", 4, []),
    ]
    assert all("no step lost" in e["reason"] for e in said), said
    records = (await api(jp_fetch, "alice", "jobs", job["id"], "metrics"))["metrics"]
    done_steps = sorted((r for r in records if r["type"] == "step"), key=lambda r: r["global_step"])
    # exactly the optimizer steps of an uninterrupted run: none repeated, none lost
    assert [r["global_step"] for r in done_steps] == list(range(STEPS))
    sizes = [r["world_size"] for r in done_steps]
    assert [size for i, size in enumerate(sizes) if i == 0 or sizes[i - 1] != size] == [4, 2, 4]
    assert all(isinstance(r["loss"], float) for r in done_steps)  # the loss curve
    begins = [r for r in records if r["type"] == "train_begin"]
    assert [(b["world_size"], b["gradient_accumulation_steps"]) for b in begins] == [
        (4, 1),
        (2, 2),
        (4, 1),
    ]
    assert {b["effective_batch_size"] for b in begins} == {BATCH}
