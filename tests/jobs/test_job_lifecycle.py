"""Jobs that really run: a real Jupyter server, its job service, driver processes and gloo
workers on virtual GPUs. Waits poll the REST API or the driver's status for a condition, each
bounded by a deadline (`eventually`)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from jobprograms import elastic, program
from multiuser import api, cancel, finished, wait_for
from realjobs import alive, wait_status
from waiting import eventually

from jupyter_edt.jobs.store import JobStore
from jupyter_edt.runtime.jobdir import JobDir, process_start_time

pytestmark = pytest.mark.multi_user


async def test_a_job_trains_to_success_with_metrics_logs_and_model(jp_fetch, tmp_path):
    job = await api(
        jp_fetch,
        "alice",
        "jobs",
        method="POST",
        body={"name": "tiny", "code": program(epochs=2), "max_gpus": 2},
    )
    assert job["state"] == "STARTING" and len(job["devices"]) == 2
    done = await wait_for(jp_fetch, "alice", job["id"], finished, "finished")
    assert done["state"] == "SUCCEEDED", done["reason"]
    assert done["devices"] == []

    metrics = (await api(jp_fetch, "alice", "jobs", job["id"], "metrics"))["metrics"]
    steps = [m for m in metrics if m["type"] == "step"]
    epochs = [m for m in metrics if m["type"] == "epoch"]
    assert [m["global_step"] for m in steps] == list(range(12))  # 2 epochs of 6 steps, each once
    assert all(m["world_size"] == 2 and m["loss"] > 0 for m in steps)
    assert [m["epoch"] for m in epochs] == [0, 1]

    logs = (await api(jp_fetch, "alice", "jobs", job["id"], "logs"))["logs"]
    assert logs[:2] == ["driver.stderr", "driver.stdout"] and "w0.out" in logs
    result = JobDir(tmp_path / "jobs" / job["id"]).result
    assert (result / "model" / "model_epoch_final.pth").is_file()

    events = await api(jp_fetch, "alice", "jobs", params={"state": "SUCCEEDED"})
    assert [j["id"] for j in events["jobs"]] == [job["id"]]


async def test_a_program_that_fails_at_start_fails_with_its_error(jp_fetch):
    job = await api(
        jp_fetch,
        "alice",
        "jobs",
        method="POST",
        body={"code": program(1, fail=True), "max_gpus": 1},
    )
    done = await wait_for(jp_fetch, "alice", job["id"], finished, "finished")
    assert done["state"] == "FAILED"
    assert "the data directory is empty" in done["reason"]


async def test_cancel_stops_the_driver_and_every_worker(jp_fetch, tmp_path):
    job = await api(
        jp_fetch,
        "alice",
        "jobs",
        method="POST",
        body={"code": program(epochs=1000, delay=0.01), "max_gpus": 2},
    )
    await wait_for(jp_fetch, "alice", job["id"], elastic, "RUNNING")
    status = JobDir(tmp_path / "jobs" / job["id"]).read_status()
    assert status is not None and len(status["workers"]) == 2
    cancelled = await cancel(jp_fetch, "alice", job["id"])
    assert cancelled["state"] == "CANCELLED" and cancelled["devices"] == []
    assert process_start_time(status["pid"]) is None  # the driver is gone
    pids = worker_pids(tmp_path / "jobs" / job["id"])
    assert pids and all(process_start_time(pid) is None for pid in pids)
    cluster = await api(jp_fetch, "alice", "cluster")
    assert not any(d["held"] for d in cluster["devices"])


def worker_pids(job_root: Path) -> set[int]:
    """Every worker process that ever ran, from the pids its events carry."""
    pids = set()
    for path in (job_root / "logs").glob("events-*.jsonl"):
        for line in path.read_text().splitlines():
            try:
                pids.add(json.loads(line)["pid"])
            except (json.JSONDecodeError, KeyError):
                continue
    return pids


async def test_a_second_user_makes_the_first_job_cede_gpus_in_place_and_get_them_back(
    jp_fetch, tmp_path
):
    """4 virtual GPUs. A alone holds 4; B arrives: A shrinks to 2 without restarting its
    surviving workers and B gets 2; B finishes: A grows back to 4."""
    a = await api(
        jp_fetch,
        "alice",
        "jobs",
        method="POST",
        body={"name": "A", "code": program(epochs=1000, delay=0.005), "max_gpus": 4},
    )
    assert len(a["devices"]) == 4
    a_dir = JobDir(tmp_path / "jobs" / a["id"])
    await wait_for(jp_fetch, "alice", a["id"], elastic, "RUNNING")
    first = a_dir.read_status()
    assert first is not None and len(first["workers"]) == 4

    b = await api(
        jp_fetch,
        "bob",
        "jobs",
        method="POST",
        body={"name": "B", "code": program(epochs=2), "max_gpus": 4},
    )
    assert len(b["devices"]) == 2
    a_now = await api(jp_fetch, "alice", "jobs", a["id"])
    assert len(a_now["devices"]) == 2 and not set(a_now["devices"]) & set(b["devices"])
    shrunk = await wait_status(a_dir, lambda s: len(s["workers"]) == 2, "shrunk to 2 workers")
    survivors = shrunk["workers"]
    assert set(survivors) <= set(first["workers"])  # no new process on the devices A kept
    assert {shrunk["pids"][w] for w in survivors} <= set(first["pids"].values())

    done = await wait_for(jp_fetch, "bob", b["id"], finished, "finished")
    assert done["state"] == "SUCCEEDED", done["reason"]
    regrown = await wait_for(
        jp_fetch, "alice", a["id"], lambda j: len(j["devices"]) == 4, "given 4 GPUs again"
    )
    assert regrown["state"] == "RUNNING"
    grown = await wait_status(a_dir, lambda s: len(s["workers"]) == 4, "grown to 4 workers")
    for w in survivors:  # the same processes carried the job through both rescales
        assert grown["pids"][w] == shrunk["pids"][w] and alive(grown["pids"][w])
    # each allocation is followed by the group that formed on it: how long its devices
    # waited, and the survivors' pause
    changes = await eventually(
        lambda: allocations_and_groups(tmp_path, a["id"]),
        "the group formed on 4 again",
        until=lambda c: c[-1][0] == "formed" and c[-1][1]["world_size"] == 4,
    )
    sizes = [(kind, data["world_size"]) for kind, data in changes]
    assert sizes[:2] == [("allocation", 4), ("formed", 4)]  # the start, then...
    assert ("allocation", 2) in sizes and sizes[-2:] == [("allocation", 4), ("formed", 4)]
    shrink = sizes.index(("allocation", 2))
    assert sizes[shrink + 1] == ("formed", 2)
    for kind, data in changes:
        if kind == "formed":
            assert 0 <= data["pause_s"] < 30 and 0 < data["waited_s"] < 60, data

    cancelled = await cancel(jp_fetch, "alice", a["id"])
    assert cancelled["state"] == "CANCELLED"


async def test_a_plain_program_sees_the_job_environment(jp_fetch, tmp_path):
    code = textwrap.dedent(
        """
        import json, os
        names = ["EDT_JOB_ID", "DATA_DIR", "RESULT_DIR", "LOG_DIR", "CUDA_VISIBLE_DEVICES"]
        seen = {n: os.environ.get(n) for n in names}
        seen["cwd"] = os.getcwd()
        with open(os.path.join(os.environ["RESULT_DIR"], "env.json"), "w") as f:
            json.dump(seen, f)
        """
    )
    data = tmp_path / "data"
    job = await api(
        jp_fetch,
        "alice",
        "jobs",
        method="POST",
        body={"code": code, "max_gpus": 1, "env": {"EDT_DATA_DIR": str(data)}},
    )
    done = await wait_for(jp_fetch, "alice", job["id"], finished, "finished")
    assert done["state"] == "SUCCEEDED", done["reason"]
    d = JobDir(tmp_path / "jobs" / job["id"])
    seen = json.loads((d.result / "env.json").read_text())
    assert seen == {
        "EDT_JOB_ID": job["id"],
        "DATA_DIR": str(data),
        "RESULT_DIR": str(d.result),
        "LOG_DIR": str(d.logs),
        "CUDA_VISIBLE_DEVICES": "",  # a virtual GPU is a CPU slot
        "cwd": str(d.code),
    }


def allocations_and_groups(tmp_path: Path, job_id: str) -> list[tuple[str, dict]]:
    """The job's allocation and formed events, oldest first, as (kind, data with world_size)."""
    store = JobStore(f"sqlite:///{tmp_path / 'edt.sqlite'}")
    try:
        events = store.events(job_id=job_id)
    finally:
        store.close()
    out = []
    for e in events:
        if e["kind"] == "allocation" and e["devices"]:
            out.append(("allocation", {**e, "world_size": len(e["devices"])}))
        elif e["kind"] == "formed":
            out.append(("formed", e))
    return out
