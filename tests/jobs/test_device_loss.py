"""A device that vanishes from the inventory is taken from its job like a failed worker: the
job runs on in place on its other devices, nobody is given the missing one, and it is dealt out
again when it comes back. Real server, driver and gloo workers on virtual GPUs; the device
vanishes through the supported route, `EDTApp.virtual_gpus` changed on the live server, which
the monitor's next reading picks up."""

from __future__ import annotations

import pytest
from jobprograms import program
from multiuser import api, cancel, wait_for
from realjobs import alive, wait_status

from jupyter_edt.runtime.jobdir import JobDir

pytestmark = pytest.mark.multi_user


@pytest.fixture
def edt_config(edt_config):
    # a long rescale interval: losing a device is acted on at once all the same
    return {**edt_config, "min_rescale_interval": 30.0, "refresh_interval": 0.2}


async def started_edt_app(serverapp, app):
    """The extension `app`, started as a running server starts it once its event loop runs
    (its `_post_start`, which pytest-jupyter leaves out): recovery, then the periodic device
    readings."""
    await serverapp.extension_manager.start_all_extensions()
    return app


async def test_a_vanished_device_is_taken_from_its_job_which_runs_on_and_gets_it_back(
    jp_fetch, jp_serverapp, edt_app, tmp_path
):
    app = await started_edt_app(jp_serverapp, edt_app)
    a = await api(
        jp_fetch,
        "alice",
        "jobs",
        method="POST",
        body={"name": "A", "code": program(epochs=1000, delay=0.004), "max_gpus": 4},
    )
    a_dir = JobDir(tmp_path / "jobs" / a["id"])
    first = await wait_status(a_dir, lambda s: s["elastic"] and len(s["workers"]) == 4, "ran on 4")
    # the service's view follows the driver's status file by a poll
    await wait_for(jp_fetch, "alice", a["id"], lambda j: j["state"] == "RUNNING", "RUNNING")

    app.virtual_gpus = 3  # vgpu3 falls off
    shrunk = await wait_for(
        jp_fetch, "alice", a["id"], lambda j: "vgpu3" not in j["devices"], "rid of vgpu3"
    )
    assert shrunk["state"] == "RUNNING"
    assert sorted(shrunk["devices"]) == ["vgpu0", "vgpu1", "vgpu2"]
    change = [e for e in app.job_service.store.events(job_id=a["id"]) if e["kind"] == "allocation"]
    assert change[-1]["devices"] == shrunk["devices"]
    assert change[-1]["reason"] == "vgpu3 gone: shrunk to 3 GPU(s)"

    # in place, as when a worker dies: the workers on the other devices carry on
    left = await wait_status(a_dir, lambda s: len(s["workers"]) == 3, "left vgpu3")
    assert sorted(left["workers"].values()) == ["vgpu0", "vgpu1", "vgpu2"]
    for w in left["workers"]:
        assert left["pids"][w] == first["pids"][w] and alive(left["pids"][w])
    cluster = await api(jp_fetch, "alice", "cluster")
    assert [d["id"] for d in cluster["devices"]] == ["vgpu0", "vgpu1", "vgpu2"]

    # nobody is given the missing device: a newcomer shares the three that are left
    b = await api(
        jp_fetch,
        "bob",
        "jobs",
        method="POST",
        body={"name": "B", "code": program(epochs=1000, delay=0.004), "max_gpus": 1},
    )
    a_now = await api(jp_fetch, "alice", "jobs", a["id"])
    assert len(b["devices"]) == 1 and len(a_now["devices"]) == 2
    held = set(a_now["devices"]) | set(b["devices"])
    assert len(held) == 3 and "vgpu3" not in held

    app.virtual_gpus = 4  # vgpu3 is back, and dealt out again
    back = await wait_for(
        jp_fetch, "alice", a["id"], lambda j: "vgpu3" in j["devices"], "given vgpu3 again"
    )
    assert len(back["devices"]) == 3 and back["state"] == "RUNNING"
    change = [e for e in app.job_service.store.events(job_id=a["id"]) if e["kind"] == "allocation"]
    assert change[-1]["reason"] == "grown to 3 GPU(s)"
    grown = await wait_status(
        a_dir,
        lambda s: sorted(s["workers"].values()) == sorted(back["devices"]),
        "grew onto vgpu3",
    )
    kept = [w for w in grown["workers"] if w in first["workers"]]
    assert len(kept) == 2  # the two survivors of B's arrival, same processes
    assert all(grown["pids"][w] == first["pids"][w] for w in kept)

    for user, job in (("alice", a), ("bob", b)):
        assert (await cancel(jp_fetch, user, job["id"]))["state"] == ("CANCELLED")
