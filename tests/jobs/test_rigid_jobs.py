"""Rigid jobs, through a real server with real drivers and workers on virtual GPUs: a program
that does not use the elastic runtime (here a loop that waits for a file) is RUNNING once its
processes are up, says `elastic: false`, keeps the GPUs it started with, is never resized, and
under priority is stopped at once rather than asked for a checkpoint it cannot write."""

from __future__ import annotations

import json

import pytest
from jobprograms import program
from multiuser import api, finished, wait_for
from realjobs import alive, wait_status
from tornado.httpclient import HTTPClientError

from jupyter_edt.runtime.jobdir import JobDir

pytestmark = pytest.mark.multi_user


def rigid_program(marker) -> str:
    """Runs on every worker until `marker` exists: no Trainer, so no elastic runtime."""
    return f"import os, time\nwhile not os.path.exists({str(marker)!r}):\n    time.sleep(0.05)\n"


def stored_events(app, job_id: str) -> list[dict]:
    return app.job_service.store.events(job_id=job_id)


async def start_rigid(jp_fetch, tmp_path, marker, **spec) -> tuple[dict, JobDir, dict]:
    body = {"name": "rigid", "code": rigid_program(marker), "max_gpus": 4, **spec}
    job = await api(jp_fetch, "alice", "jobs", method="POST", body=body)
    running = await wait_for(
        jp_fetch, "alice", job["id"], lambda j: j["state"] == "RUNNING", "RUNNING"
    )
    d = JobDir(tmp_path / "jobs" / job["id"])
    status = await wait_status(d, lambda s: len(s["pids"]) == len(running["devices"]), "ran")
    return running, d, status


async def test_a_rigid_job_runs_keeps_its_gpus_and_says_it_is_not_elastic(
    jp_fetch, edt_app, tmp_path
):
    marker = tmp_path / "done"
    rigid, d, status = await start_rigid(jp_fetch, tmp_path, marker)
    assert rigid["elastic"] is False and rigid["reason"] == "processes started"
    assert len(rigid["devices"]) == 4 and status["elastic"] is False

    # elastic, it would cede half of its GPUs to bob's job; rigid, it cannot: bob waits
    other = await api(
        jp_fetch,
        "bob",
        "jobs",
        method="POST",
        body={"name": "elastic", "code": program(epochs=1), "max_gpus": 2},
    )
    assert other["state"] == "QUEUED" and other["devices"] == []
    now = await api(jp_fetch, "alice", "jobs", rigid["id"])
    assert now["devices"] == rigid["devices"] and now["state"] == "RUNNING"
    assert d.read_orders()["seq"] == 1  # never an order to resize
    assert all(alive(pid) for pid in status["pids"].values())

    # a max_gpus it cannot shrink to is refused, naming the field; nothing changes
    with pytest.raises(HTTPClientError) as caught:
        await api(jp_fetch, "alice", "jobs", rigid["id"], method="PATCH", body={"max_gpus": 2})
    answer = json.loads(caught.value.response.body)
    assert caught.value.code == 409 and answer["field"] == "max_gpus"  # the job refuses it
    assert "rigid" in answer["message"]
    assert (await api(jp_fetch, "alice", "jobs", rigid["id"]))["max_gpus"] == 4

    marker.touch()  # its program ends: it succeeds, and bob's job gets the GPUs
    done = await wait_for(jp_fetch, "alice", rigid["id"], finished, "finished")
    assert done["state"] == "SUCCEEDED" and done["elastic"] is False, done["reason"]
    ran = await wait_for(jp_fetch, "bob", other["id"], finished, "finished")
    assert ran["state"] == "SUCCEEDED" and ran["elastic"] is True, ran["reason"]
    announced = [e for e in stored_events(edt_app, other["id"]) if e["kind"] == "elastic"]
    assert [e["elastic"] for e in announced] == [True]


@pytest.mark.parametrize("edt_config", [{"virtual_gpus": 4, "policy": "priority"}])
async def test_priority_stops_a_rigid_job_at_once_and_it_starts_over_later(
    jp_fetch, edt_app, tmp_path
):
    marker = tmp_path / "done"
    low, d, status = await start_rigid(jp_fetch, tmp_path, marker)
    high = await api(
        jp_fetch,
        "bob",
        "jobs",
        method="POST",
        body={"code": program(epochs=1), "min_gpus": 4, "max_gpus": 4, "priority": 5},
    )
    stopped = await api(jp_fetch, "alice", "jobs", low["id"])
    assert stopped["state"] == "SUSPENDED"
    assert (
        "rigid (its program does not use the elastic runtime) and cannot checkpoint: stopping it"
        in stopped["reason"]
    )
    queued = await wait_for(jp_fetch, "alice", low["id"], lambda j: j["state"] == "QUEUED", "Q")
    assert queued["devices"] == []
    final = d.read_status()
    assert final["state"] == "suspended" and final["checkpointed"] is False
    assert not any(alive(pid) for pid in status["pids"].values())
    events = stored_events(edt_app, low["id"])
    released = [e for e in events if e["kind"] == "allocation" and not e["devices"]]
    assert "stopped (a rigid job cannot checkpoint)" in released[-1]["reason"]

    done = await wait_for(jp_fetch, "bob", high["id"], finished, "finished")
    assert done["state"] == "SUCCEEDED", done["reason"]
    again = await wait_for(jp_fetch, "alice", low["id"], lambda j: j["state"] == "RUNNING", "R")
    assert len(again["devices"]) == 4  # started over, on the GPUs it asks for
    marker.touch()
    assert (await wait_for(jp_fetch, "alice", low["id"], finished, "done"))["state"] == "SUCCEEDED"
