"""torchrun's contract and the three kinds of job, through a real server with real drivers and
gloo workers on virtual GPUs: an unmodified DDP program forms its group and reads distinct
shards; a restart job is restarted at its new size (SIGTERM, the grace, SIGKILL) with its
restart count raised, its events saying what it lost; a program that fails at every start
fails the job with its own error after the bounded restarts; bad kinds are 400s."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jobprograms import ddp_program, program
from multiuser import api, finished, wait_for
from realjobs import wait_status
from tornado.httpclient import HTTPClientError
from waiting import eventually

from jupyter_edt.runtime.jobdir import JobDir

pytestmark = pytest.mark.multi_user


@pytest.fixture
def edt_config() -> dict:
    """4 virtual GPUs; a restart job may be resized at once, whatever a restart costs, and
    its workers have 2 s to exit after SIGTERM."""
    return {
        "devices": "virtual",
        "virtual_gpus": 4,
        "min_rescale_interval": 0.0,
        "restart_interval": 0.0,
        "restart_cost": 0.0,
        "restart_grace": 2.0,
    }


def starts(result: Path, count: int) -> list[dict]:
    """What each rank of the job's `count`-th start recorded, by rank."""
    records = [json.loads(p.read_text()) for p in result.glob(f"start{count}-rank*.json")]
    return sorted(records, key=lambda r: r["rank"])


def events(app, job_id: str, kind: str) -> list[dict]:
    return [e for e in app.job_service.store.events(job_id=job_id) if e["kind"] == kind]


async def submit(jp_fetch, user: str, **body) -> dict:
    return await api(jp_fetch, user, "jobs", method="POST", body={"name": "ddp", **body})


@pytest.mark.parametrize("gpus", [2, 4])
async def test_an_unmodified_ddp_program_forms_its_group_and_reads_distinct_shards(
    jp_fetch, tmp_path, gpus
):
    job = await submit(jp_fetch, "alice", code=ddp_program(), max_gpus=gpus, kind="rigid")
    assert job["spec"]["kind"] == "rigid"
    done = await wait_for(jp_fetch, "alice", job["id"], finished, "finished")
    assert done["state"] == "SUCCEEDED", done["reason"]
    result = tmp_path / "jobs" / job["id"] / "result"
    ranks = starts(result, 0)
    assert [r["rank"] for r in ranks] == list(range(gpus))
    assert all(r["world"] == gpus and r["done"] for r in ranks)
    env = [r["env"] for r in ranks]
    assert [e["LOCAL_RANK"] for e in env] == [str(r) for r in range(gpus)]  # one node
    assert {e["WORLD_SIZE"] for e in env} == {e["LOCAL_WORLD_SIZE"] for e in env} == {str(gpus)}
    assert {(e["GROUP_RANK"], e["GROUP_WORLD_SIZE"], e["ROLE_NAME"]) for e in env} == {
        ("0", "1", "default")
    }
    assert [e["ROLE_RANK"] for e in env] == [e["RANK"] for e in env]
    assert {e["TORCHELASTIC_RUN_ID"] for e in env} == {job["id"]}
    assert {e["TORCHELASTIC_RESTART_COUNT"] for e in env} == {"0"}
    assert {e["OMP_NUM_THREADS"] for e in env} == {"1"}  # torchrun's, several on a node
    assert {e["CUDA_VISIBLE_DEVICES"] for e in env} == {""}  # virtual GPUs: the CPU
    # every rank read its own shard, and together the whole dataset once
    shards = [set(r["seen"]) for r in ranks]
    assert all(shards) and sum(len(s) for s in shards) == 64
    assert set().union(*shards) == set(range(64))
    assert (result / "ddp.pt").is_file()  # rank 0's checkpoint


async def test_a_restart_job_is_restarted_at_its_new_size_and_says_what_it_lost(
    jp_fetch, edt_app, tmp_path
):
    hold = tmp_path / "stop"
    job = await submit(jp_fetch, "alice", code=ddp_program(hold=hold), max_gpus=4, kind="restart")
    result = tmp_path / "jobs" / job["id"] / "result"
    await eventually(lambda: starts(result, 0), "the first start", until=lambda r: len(r) == 4)

    # bob's job arrives: alice's shrinks to 2 by a restart of every worker
    other = await submit(
        jp_fetch, "bob", name="other", code=program(epochs=1, hold=hold), max_gpus=2
    )
    await wait_for(jp_fetch, "bob", other["id"], lambda j: len(j["devices"]) == 2, "given 2")
    second = await eventually(
        lambda: starts(result, 1), "the restart at 2", until=lambda r: len(r) == 2
    )
    assert {r["world"] for r in second} == {2}
    assert {r["env"]["TORCHELASTIC_RESTART_COUNT"] for r in second} == {"1"}
    first_port = starts(result, 0)[0]["env"]["MASTER_PORT"]
    assert second[0]["env"]["MASTER_PORT"] != first_port  # a fresh store for the new start
    (restart,) = await eventually(
        lambda: events(edt_app, job["id"], "restart"), "the restart event", until=lambda e: e
    )
    assert restart["cause"] == "resize" and restart["world_size"] == 2
    # a plain program ends at SIGTERM without a checkpoint of its own making: said so
    assert "restarted at 2 GPU(s)" in restart["reason"]

    hold.touch()  # both finish; alice's job is grown back if it still runs, then ends
    done = await wait_for(jp_fetch, "alice", job["id"], finished, "finished")
    assert done["state"] == "SUCCEEDED", done["reason"]
    status = JobDir(tmp_path / "jobs" / job["id"]).read_status()
    assert status["restarts"] >= 1


async def test_a_restart_job_that_ignores_sigterm_is_killed_after_the_grace(
    jp_fetch, edt_app, tmp_path
):
    hold = tmp_path / "stop"
    code = ddp_program(hold=hold, ignore_sigterm=True)
    job = await submit(jp_fetch, "alice", code=code, max_gpus=4, kind="restart")
    result = tmp_path / "jobs" / job["id"] / "result"
    await eventually(lambda: starts(result, 0), "the first start", until=lambda r: len(r) == 4)
    # a smaller max is a resize as well
    await api(jp_fetch, "alice", "jobs", job["id"], method="PATCH", body={"max_gpus": 2})
    (restart,) = await eventually(
        lambda: events(edt_app, job["id"], "restart"), "the restart", until=lambda e: e
    )
    assert len(restart["killed"]) == 4
    assert "killed: the steps since its last checkpoint are lost" in restart["reason"]
    await eventually(lambda: starts(result, 1), "the restart at 2", until=lambda r: len(r) == 2)
    hold.touch()
    done = await wait_for(jp_fetch, "alice", job["id"], finished, "finished")
    assert done["state"] == "SUCCEEDED", done["reason"]


async def test_a_program_that_fails_at_every_start_fails_with_its_own_error(
    jp_fetch, edt_app, tmp_path
):
    job = await submit(jp_fetch, "alice", code=ddp_program(fail=True), max_gpus=2, kind="restart")
    done = await wait_for(jp_fetch, "alice", job["id"], finished, "finished")
    assert done["state"] == "FAILED"
    assert "the training data has no labels" in done["reason"]
    assert "at every start (3 restart(s) allowed)" in done["reason"]
    causes = [e["cause"] for e in events(edt_app, job["id"], "restart")]
    assert causes == ["failure"] * 3  # bounded: no restart loop
    status = JobDir(tmp_path / "jobs" / job["id"]).read_status()
    assert status["restarts"] == 3


async def test_a_rigid_job_is_never_resized(jp_fetch, tmp_path):
    hold = tmp_path / "stop"
    job = await submit(jp_fetch, "alice", code=ddp_program(hold=hold), max_gpus=4, kind="rigid")
    d = JobDir(tmp_path / "jobs" / job["id"])
    await wait_status(d, lambda s: len(s.get("pids", {})) == 4, "all four started")
    other = await submit(jp_fetch, "bob", name="other", code=program(epochs=1), max_gpus=2)
    assert other["state"] == "QUEUED"
    now = await api(jp_fetch, "alice", "jobs", job["id"])
    assert len(now["devices"]) == 4 and d.read_orders()["seq"] == 1
    hold.touch()
    done = await wait_for(jp_fetch, "alice", job["id"], finished, "finished")
    assert done["state"] == "SUCCEEDED", done["reason"]
    assert not (d.result / "start1-rank0.json").exists()


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"kind": "spot"}, "kind", "must be one of elastic, restart, rigid"),
        ({"kind": 3}, "kind", "must be a string"),
        ({"min_gpus": 3, "max_gpus": 2}, "min_gpus", "must not exceed max_gpus"),
        (
            {"kind": "restart", "max_gpus": 3, "env": {"EDT_EFFECTIVE_BATCH_SIZE": "64"}},
            "env",
            "EDT_EFFECTIVE_BATCH_SIZE=64 does not split evenly over 3 GPUs",
        ),
    ],
)
async def test_bad_kinds_and_sizes_are_400s_naming_the_field(jp_fetch, body, field, words):
    spec = {"code": "print(1)", "max_gpus": 2, **body}
    with pytest.raises(HTTPClientError) as caught:
        await api(jp_fetch, "alice", "jobs", method="POST", body=spec)
    assert caught.value.code == 400
    answer = json.loads(caught.value.response.body)
    assert answer["field"] == field and words in answer["message"], answer
    assert (await api(jp_fetch, "alice", "jobs"))["jobs"] == []  # nothing stored


async def test_an_elastic_job_keeps_any_global_batch(jp_fetch):
    """The runtime splits any global batch into micro-batches: no size rule for it."""
    env = {"EDT_EFFECTIVE_BATCH_SIZE": "64"}
    job = await submit(jp_fetch, "alice", code="print(1)", max_gpus=3, env=env)
    assert job["spec"]["kind"] == "elastic"
