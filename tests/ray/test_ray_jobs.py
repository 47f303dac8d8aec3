"""Jobs on a Ray cluster through a real `jupyter edt serve` with the Ray launcher: the
devices are the nodes' GPUs, and each worker runs on the node of its GPU, kept by its actor."""

from __future__ import annotations

import io
import json
import secrets
import tempfile
import time
import zipfile
from pathlib import Path

import pytest
import ray
import torch
from edtservice import call, token_file_service
from jobprograms import (
    DEADLINE_S,
    FINAL_MODEL,
    ddp_program,
    elastic,
    exact_program,
    program,
    reference_model,
)
from waiting import eventually_sync

from jupyter_edt.jobs.store import JobStore

NAMESPACE = "edt-ray-jobs"
TOKEN = secrets.token_hex(16)


@pytest.fixture(scope="module")
def service(cluster, tmp_path_factory):
    process = token_file_service(
        tmp_path_factory.mktemp("ray-serve"),
        {"alice": {"tokens": [TOKEN]}},
        {
            "launcher_class": "ray",
            "ray_address": cluster.address,
            "ray_namespace": NAMESPACE,
            "min_rescale_interval": 0.0,
            "refresh_interval": 0.5,
            "admin_users": ["alice"],  # drains nodes
        },
    )
    yield process
    process.stop()


def api(service, method: str, path: str, body=None):
    status, answer, _ = call(service.url, method, f"edt/api/v1/{path}", TOKEN, body)
    assert status < 300, (status, answer, service.log())
    return answer


def job_state(service, job_id: str) -> dict:
    return api(service, "GET", f"jobs/{job_id}")


def kept(job_id: str, process: str) -> dict | None:
    """What the keeper of a job's process says of it: pid, start time, node (None: no such
    keeper, or it has not started its process yet)."""
    try:
        actor = ray.get_actor(f"{job_id}/{process}", namespace=NAMESPACE)
        return ray.get(actor.identity.remote(), timeout=30)
    except (ValueError, ray.exceptions.RayActorError):  # none, or it just ended
        return None


def wait_job(service, job_id: str, what: str, until) -> dict:
    """The job's record once `until` holds for it."""
    return eventually_sync(
        lambda: job_state(service, job_id), what, until=until, timeout=DEADLINE_S
    )


def finished(service, job_id: str) -> dict:
    ended = ("SUCCEEDED", "FAILED", "CANCELLED")
    return wait_job(service, job_id, "the job finished", lambda j: j["state"] in ended)


def said(service, job_id: str) -> str:
    """What a test failure shows of a job: its reasons and its driver's log's end."""
    events = api(service, "GET", f"jobs/{job_id}")
    logs = service.root / "jobs" / job_id / "logs"
    tails = [p.read_text(errors="replace")[-3000:] for p in sorted(logs.glob("driver.std*"))]
    return f"{events.get('reason')}\n" + "\n".join(tails)


def keeper_node(job_id: str, worker: str) -> str | None:
    process = kept(job_id, worker)
    return None if process is None else process["node"]


def test_the_clusters_gpus_are_the_devices(cluster, service):
    answer = api(service, "GET", "cluster")
    assert answer["source"] == "ray"
    nodes = {n.node_id for n in cluster.nodes}
    assert {d["node"] for d in answer["devices"]} == nodes
    assert len(answer["devices"]) == 4


#: What every job process gets (the README's list, WMLA's names, the runtime's wiring), and
#: what this job was submitted with: a variable of its own and `--epochs`'s override.
ENV_NAMES = [
    "EDT_JOB_ID", "DATA_DIR", "RESULT_DIR", "LOG_DIR", "CUDA_VISIBLE_DEVICES", "EDT_DEVICE_ID",
    "FABRIC_HOME", "DLI_EXECID", "DLI_IS_ELASTIC", "DLI_WORK_DIR", "SAVED_MODEL_DIR",
    "RESUME_WEIGHT_PATH", "EDT_STORE", "EDT_WORKER_ID", "EDT_MAX_GPUS", "MY_SETTING",
    "EDT_EPOCHS",
]  # fmt: skip

ENV_PROGRAM = f"""
import json, os
names = {ENV_NAMES!r}
seen = {{name: os.environ.get(name) for name in names}}
seen["program_in_data_dir"] = os.path.basename(__file__) in os.listdir(os.environ["DATA_DIR"])
out = os.path.join(os.environ["RESULT_DIR"], "env-" + os.environ["EDT_WORKER_ID"] + ".json")
with open(out, "w") as f:
    json.dump(seen, f)
"""


def test_a_worker_on_a_ray_node_sees_the_jobs_whole_environment(cluster, service):
    """One environment rule for every launcher: a worker on another node than its driver's
    (no shared file system: it runs in a copy of the job directory) sees the submitted env,
    the overrides, every documented name and the plugins' (WMLA's), its paths pointing into
    its copy."""
    env = {"MY_SETTING": "from the submission", "EDT_EPOCHS": "3"}
    job = api(
        service, "POST", "jobs", {"code": ENV_PROGRAM, "max_gpus": 4, "name": "env", "env": env}
    )
    done = finished(service, job["id"])
    assert done["state"] == "SUCCEEDED", said(service, done["id"])
    result = service.root / "jobs" / job["id"] / "result"
    seen = {p.stem: json.loads(p.read_text()) for p in result.glob("env-w*.json")}
    assert len(seen) == 4, sorted(seen)
    devices = {d["id"]: d for d in api(service, "GET", "cluster")["devices"]}
    assert {devices[s["EDT_DEVICE_ID"]]["node"] for s in seen.values()} == {
        n.node_id for n in cluster.nodes
    }
    for worker, s in seen.items():
        assert all(s[name] is not None for name in ENV_NAMES), (worker, s)
        assert s["MY_SETTING"] == "from the submission" and s["EDT_EPOCHS"] == "3"
        assert s["EDT_JOB_ID"] == s["DLI_EXECID"] == job["id"]
        assert s["DLI_IS_ELASTIC"] == "true" and s["EDT_MAX_GPUS"] == "4"
        assert s["CUDA_VISIBLE_DEVICES"] == ""  # a logical GPU: a CPU slot
        assert s["EDT_WORKER_ID"] == worker.removeprefix("env-")
        assert s["program_in_data_dir"], s  # DATA_DIR: the code, in its node's copy
        copy = s["RESULT_DIR"].removesuffix("/result")
        assert copy != str(service.root / "jobs" / job["id"])  # ran in a copy...
        for name in ("DATA_DIR", "LOG_DIR", "DLI_WORK_DIR", "SAVED_MODEL_DIR"):
            assert s[name].startswith(copy + "/"), (name, s[name], copy)  # ...every path in it


def test_an_unmodified_ddp_program_runs_rigid_across_both_nodes(cluster, service):
    """torchrun's contract across nodes: ranks node by node, each node's local ranks from 0,
    one master every node reaches; the group forms over the network and reads distinct
    shards."""
    job = api(
        service,
        "POST",
        "jobs",
        {"code": ddp_program(), "max_gpus": 4, "name": "ddp", "kind": "rigid"},
    )
    done = finished(service, job["id"])
    assert done["state"] == "SUCCEEDED", said(service, done["id"])
    d = service.root / "jobs" / job["id"]
    ranks = sorted(
        (json.loads(p.read_text()) for p in (d / "result").glob("start0-rank*.json")),
        key=lambda r: r["rank"],
    )
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3] and all(r["done"] for r in ranks)
    worker_device = json.loads((d / "status.json").read_text())["workers"]
    devices = {x["id"]: x for x in api(service, "GET", "cluster")["devices"]}
    nodes = [devices[worker_device[r["worker"]]]["node"] for r in ranks]
    assert nodes[0] == nodes[1] != nodes[2] == nodes[3]  # ranks ordered by node
    env = [r["env"] for r in ranks]
    assert [(e["GROUP_RANK"], e["LOCAL_RANK"]) for e in env] == [
        ("0", "0"), ("0", "1"), ("1", "0"), ("1", "1")
    ]  # fmt: skip
    assert {(e["WORLD_SIZE"], e["LOCAL_WORLD_SIZE"], e["GROUP_WORLD_SIZE"]) for e in env} == {
        ("4", "2", "2")
    }
    assert len({(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in env}) == 1
    shards = [set(r["seen"]) for r in ranks]
    assert sum(len(s) for s in shards) == 64 and set().union(*shards) == set(range(64))


def events_of(service, job_id: str, kinds: set[str]) -> list[dict]:
    """The job's events of these kinds in the service's store, oldest first."""
    store = JobStore(service.settings["database_url"])
    try:
        return [e for e in store.events(job_id=job_id) if e["kind"] in kinds]
    finally:
        store.close()


def test_a_job_over_both_nodes_runs_each_worker_on_its_gpus_node_across_a_restart(
    cluster, service, tmp_path
):
    release = tmp_path / "release"  # the job's processes wait for it after a step or two
    job = api(
        service,
        "POST",
        "jobs",
        {"code": program(3, samples=48, hold=release), "max_gpus": 4, "name": "two-nodes"},
    )
    running = wait_job(
        service,
        job["id"],
        "the job running on 4 GPUs",
        lambda j: j["state"] == "RUNNING" and len(j["devices"]) == 4,
    )
    devices = {d["id"]: d for d in api(service, "GET", "cluster")["devices"]}
    nodes_of_job = sorted(devices[d]["node"] for d in running["devices"])
    assert len(set(nodes_of_job)) == 2  # both nodes
    workers = [f"w{i}" for i in range(4)]
    placed = sorted(
        eventually_sync(lambda w=w: keeper_node(job["id"], w), f"worker {w}'s keeper")
        for w in workers
    )
    assert placed == nodes_of_job
    # The service restarts while the job runs: it finds the driver's keeper again, and the
    # same processes go on.
    driver = kept(job["id"], "driver")
    assert driver is not None and driver["node"] == ray.get_runtime_context().get_node_id()
    recorded = {"formed", "elastic", "allocation"}
    wait_job(service, job["id"], "the job elastic", lambda j: j["elastic"])
    eventually_sync(lambda: events_of(service, job["id"], {"formed"}), "the group's formed event")
    before = events_of(service, job["id"], recorded)
    assert service.stop() == 0
    service.start()
    assert job_state(service, job["id"])["state"] == "RUNNING", service.log()
    assert kept(job["id"], "driver") == driver
    release.touch()
    done = finished(service, job["id"])
    assert done["state"] == "SUCCEEDED", said(service, done["id"])
    assert done["restarts"] == 0  # re-attached, never resumed
    # The restarted service read the driver's status anew (at least once: before the job's
    # end is recorded) and recorded nothing twice; the job's end released its GPUs.
    after = events_of(service, job["id"], recorded)
    assert after[: len(before)] == before
    assert [(e["kind"], e["devices"]) for e in after[len(before) :]] == [("allocation", [])]
    # what the workers wrote on their nodes (no shared file system assumed) is the job's
    names = api(service, "GET", f"jobs/{job['id']}/logs")["logs"]
    assert {f"w{i}.out" for i in range(4)} <= set(names), names
    metrics = api(service, "GET", f"jobs/{job['id']}/metrics")["metrics"]
    assert [m["epoch"] for m in metrics if m.get("type") == "epoch"] == [0, 1, 2]
    status, body, _ = call(service.url, "GET", f"edt/api/v1/jobs/{job['id']}/result.zip", TOKEN)
    assert status == 200
    with zipfile.ZipFile(io.BytesIO(body)) as zf:
        assert str(FINAL_MODEL) in zf.namelist()
    # keepers end with their processes: their GPUs are free again
    eventually_sync(
        lambda: ray.available_resources().get("GPU", 0.0) == 4.0,
        "the job's GPUs given back to Ray",
    )


def test_a_node_that_dies_mid_run_leaves_the_job_on_the_other_node(cluster, service, restore):
    """A crash (the node's raylet and processes SIGKILLed): the survivors train on at the
    smaller size in place, once the group they formed without the lost workers; nothing is
    placed on the dead node again, the loss is charged to no device (the job's replacements
    are kept for its program's own failures), and no step is lost or taken twice."""
    job = api(
        service,
        "POST",
        "jobs",
        {"code": program(4, samples=48, delay=0.02), "max_gpus": 4, "name": "node-loss"},
    )
    wait_job(
        service,
        job["id"],
        "the job elastic on 4 GPUs",
        lambda j: j["state"] == "RUNNING" and j["elastic"] and len(j["devices"]) == 4,
    )
    lost = cluster.nodes[1]
    crashed = time.time()
    cluster.crash(lost)  # the raylet and every process below it SIGKILLed
    survivors = wait_job(
        service,
        job["id"],
        "the job on the remaining node's 2 GPUs",
        lambda j: j["state"] == "RUNNING" and len(j["devices"]) == 2,
    )
    devices = {d["id"]: d for d in api(service, "GET", "cluster")["devices"]}
    assert {devices[d]["node"] for d in survivors["devices"]} == {cluster.nodes[0].node_id}
    done = finished(service, job["id"])
    assert done["state"] == "SUCCEEDED", said(service, done["id"])
    assert done["restarts"] == 0, said(service, done["id"])  # shrunk in place, not restarted
    metrics = api(service, "GET", f"jobs/{job['id']}/metrics")["metrics"]
    epochs = {m["epoch"] for m in metrics if m.get("type") == "epoch"}
    assert epochs == {0, 1, 2, 3}  # nothing lost with the node
    steps = [m for m in metrics if m.get("type") == "step"]
    assert sorted(m["global_step"] for m in steps) == list(range(len(steps)))
    # The order: the crash, the group formed without the lost workers, its first step.
    formed = [e for e in events_of(service, job["id"], {"formed"}) if e["time"] > crashed]
    assert formed and formed[0]["world_size"] == 2, formed
    first = next(m for m in steps if m["time"] > crashed and m["world_size"] == 2)
    assert first["generation"] == formed[0]["generation"]  # the group formed after the crash
    print(f"node crash to the first step at 2 workers: {first['time'] - crashed:.2f} s")
    # No replacement was tried on the dead node, and the loss was charged to no device.
    jobdir = service.root / "jobs" / job["id"]
    status = json.loads((jobdir / "status.json").read_text())
    assert status["lost_with_node"] == 2 and status["replacements"] == 0, status
    assert status["device_failures"] == {}, status
    assert not (jobdir / "logs" / "w4.out").exists()
    driver_log = (jobdir / "logs" / "driver.stderr").read_text()
    assert "could not start" not in driver_log and "not started" not in driver_log, driver_log


def test_a_job_whose_only_node_dies_resumes_from_its_checkpoint_elsewhere(
    cluster, service, restore
):
    """A 2-GPU job packed on one node that crashes: no worker is left to carry its state, so
    the job is taken back as one whose driver died (not failed: its program did nothing
    wrong) and resumes from its newest checkpoint on the other node."""
    job = api(
        service,
        "POST",
        "jobs",
        {"code": program(3, samples=48, delay=0.05), "max_gpus": 2, "name": "whole-node"},
    )
    running = wait_job(
        service, job["id"], "the job elastic on 2 GPUs", lambda j: elastic(j) and j["devices"]
    )
    devices = {d["id"]: d for d in api(service, "GET", "cluster")["devices"]}
    (node_id,) = {devices[d]["node"] for d in running["devices"]}  # packed on one node
    eventually_sync(
        lambda: (
            (service.root / "jobs" / job["id"] / "result" / "checkpoint").is_dir()
            and any((service.root / "jobs" / job["id"] / "result" / "checkpoint").iterdir())
        ),
        "its first checkpoint",
    )
    lost = next(n for n in cluster.nodes if n.node_id == node_id)
    cluster.crash(lost)  # the raylet and every process below it SIGKILLed
    done = finished(service, job["id"])
    assert done["state"] == "SUCCEEDED", said(service, done["id"])
    assert done["restarts"] == 1, said(service, done["id"])
    states = [e for e in events_of(service, job["id"], {"state"}) if e["state"] == "QUEUED"]
    assert any("lost with their node" in e["reason"] for e in states), states
    epochs = {
        m["epoch"]
        for m in api(service, "GET", f"jobs/{job['id']}/metrics")["metrics"]
        if m.get("type") == "epoch"
    }
    assert epochs == {0, 1, 2}  # the resumed run's records came back after the first's


# still running while another job comes and goes and Ray starts its joiners when it grows back
# (96 steps: about 30 s on 4 workers, 60 s on 2), then quick once the test has seen it grow
HURRY = Path(tempfile.gettempdir()) / f"edt-ray-hurry-{secrets.token_hex(4)}"
ELASTIC = exact_program(16, 4, work_s=0.3, checkpoint_every=0, hurry=HURRY)


def worker_pids(job_id: str) -> dict[str, tuple[int, str]]:
    """The job's running workers: id -> (pid, node), as their keepers say."""
    out = {}
    for i in range(16):
        process = kept(job_id, f"w{i}")
        if process is not None and process["started"] is not None:
            out[f"w{i}"] = (process["pid"], process["node"])
    return out


def trained_at(service, job_id: str, world_size: int) -> None:
    """Once the job reported a step taken at `world_size` workers."""
    eventually_sync(
        lambda: api(service, "GET", f"jobs/{job_id}/metrics")["metrics"],
        f"a step at {world_size} workers",
        until=lambda ms: any(m.get("world_size") == world_size for m in ms),
        timeout=DEADLINE_S,
    )


def sizes_in_time(metrics: list[dict]) -> list[int]:
    """The world sizes of the job's step records, oldest first."""
    steps = [m for m in metrics if m.get("type") == "step" and "world_size" in m]
    return [m["world_size"] for m in sorted(steps, key=lambda m: m["time"])]


def trained_at_since(service, job_id: str, world_size: int, since: float) -> None:
    """Once the job reported a step at `world_size` workers taken after `since` (a time)."""
    eventually_sync(
        lambda: api(service, "GET", f"jobs/{job_id}/metrics")["metrics"],
        f"a step at {world_size} workers since {since}",
        until=lambda ms: any(
            m.get("type") == "step" and m.get("world_size") == world_size and m["time"] > since
            for m in ms
        ),
        timeout=DEADLINE_S,
    )


def on_4_workers(service, job_id: str) -> dict[str, tuple[int, str]]:
    """The job's 4 workers once it runs elastic on 4 GPUs, as `worker_pids` gives them."""
    wait_job(
        service,
        job_id,
        "the job elastic on 4 GPUs",
        lambda j: elastic(j) and len(j["devices"]) == 4,
    )
    return eventually_sync(
        lambda: worker_pids(job_id), "4 workers kept", until=lambda w: len(w) == 4
    )


# long enough for a drain after it runs on 4 (about 10 s there, 20 s on 2), then quick once
# the drained node is gone
DRAINED_HURRY = HURRY.with_name(HURRY.name + "-drained")
DRAINED = exact_program(6, 4, work_s=0.3, checkpoint_every=0, hurry=DRAINED_HURRY)


def assert_equals_reference(service, job_id: str, tmp_path, code: str = ELASTIC) -> None:
    """The job's final float64 parameters equal an uninterrupted 1-worker run of `code`."""
    theirs = reference_model(code, tmp_path)
    ours = torch.load(service.root / "jobs" / job_id / "result" / FINAL_MODEL)
    assert ours.keys() == theirs.keys()
    for name in ours:
        assert ours[name].dtype == torch.float64
        assert torch.allclose(ours[name], theirs[name], rtol=0, atol=1e-9), name


def test_a_job_shrinks_in_place_to_one_node_and_grows_back_exactly(cluster, service, tmp_path):
    """4 GPUs over both nodes; a second job arrives: the first keeps the 2 workers of one node
    (same processes) and the newcomer gets the other node; once it ends (cancelled: its own
    success is another test's), the first grows back to 4. The result equals
    an uninterrupted 1-worker run of the same program."""
    big = api(service, "POST", "jobs", {"code": ELASTIC, "max_gpus": 4, "name": "elastic"})
    before = on_4_workers(service, big["id"])
    assert len({node for _, node in before.values()}) == 2
    trained_at(service, big["id"], 4)
    small = api(
        service,
        "POST",
        "jobs",
        {"code": program(2, samples=48, delay=0.05), "max_gpus": 2, "name": "newcomer"},
    )
    shrunk = wait_job(
        service, big["id"], "the first job on 2 GPUs", lambda j: len(j["devices"]) == 2
    )
    devices = {d["id"]: d for d in api(service, "GET", "cluster")["devices"]}
    assert len({devices[d]["node"] for d in shrunk["devices"]}) == 1  # packed on one node
    after = eventually_sync(
        lambda: worker_pids(big["id"]), "2 workers left", until=lambda w: len(w) == 2
    )
    assert all(before[w] == after[w] for w in after)  # the survivors' very processes
    # the newcomer ends as soon as it holds its GPUs: the first job has most of its steps left
    # to take at 4, however long a newcomer takes to start on a busy machine
    shrunk_by = time.time()  # the survivors are 2: every step from now on is taken at 2 or 4
    assert api(service, "POST", f"jobs/{small['id']}/cancel", {})["state"] == "CANCELLED"
    wait_job(
        service,
        big["id"],
        "the first job back on 4 GPUs",
        lambda j: len(j["devices"]) == 4 or j["state"] != "RUNNING",
    )
    trained_at_since(service, big["id"], 4, shrunk_by)
    HURRY.touch()  # seen back at 4: the rest of its steps need not take long
    done = finished(service, big["id"])
    assert done["state"] == "SUCCEEDED", said(service, done["id"])
    assert done["restarts"] == 0, said(service, done["id"])
    sizes = sizes_in_time(api(service, "GET", f"jobs/{big['id']}/metrics")["metrics"])
    assert {4, 2} <= set(sizes) and sizes[-1] == 4, sizes

    assert_equals_reference(service, big["id"], tmp_path)


def test_a_drained_node_is_emptied_in_place_with_no_step_lost(cluster, service, restore, tmp_path):
    """An administrator drains a node with a deadline (a spot instance's notice): its GPUs
    show as draining and are offered to nobody; the job's workers there leave at a step
    boundary while the others train on (the very same processes); Ray lets the node go once
    nothing runs there. No step is lost: the result equals an uninterrupted 1-worker run."""
    big = api(service, "POST", "jobs", {"code": DRAINED, "max_gpus": 4, "name": "drained"})
    before = on_4_workers(service, big["id"])
    leaving, staying = cluster.nodes[1], cluster.nodes[0]
    asked = time.time()
    answer = api(service, "POST", f"cluster/nodes/{leaving.node_id[:8]}/drain", {"deadline_s": 120})
    assert answer["node"] == leaving.node_id and answer["draining"] is True
    assert answer["drain_deadline"] == pytest.approx(asked + 120, abs=5)
    shown = [d for d in api(service, "GET", "cluster")["devices"] if d["draining"]]
    assert {d["id"] for d in shown} == set(answer["devices"]) and len(shown) == 2
    shrunk = wait_job(
        service, big["id"], "the job off the drained node", lambda j: len(j["devices"]) == 2
    )
    devices = {d["id"]: d for d in api(service, "GET", "cluster")["devices"]}
    assert {devices[d]["node"] for d in shrunk["devices"]} == {staying.node_id}
    after = eventually_sync(
        lambda: worker_pids(big["id"]),
        "no worker of the job left on the drained node",
        until=lambda w: len(w) == 2,
    )
    print(f"drain to off the node: {time.time() - asked:.2f} s")
    assert all(before[w] == after[w] for w in after)  # the survivors' very processes
    assert {node for _, node in after.values()} == {staying.node_id}
    # Ray lets the emptied node go (it placed nothing new there meanwhile)
    eventually_sync(
        lambda: not any(n["Alive"] for n in ray.nodes() if n["NodeID"] == leaving.node_id),
        "the drained node gone from Ray",
    )
    cluster.remove_node(leaving, allow_graceful=False)  # what is left of it
    DRAINED_HURRY.touch()
    done = finished(service, big["id"])
    assert done["state"] == "SUCCEEDED", said(service, done["id"])
    assert done["restarts"] == 0, said(service, done["id"])
    steps = [
        m["global_step"]
        for m in api(service, "GET", f"jobs/{big['id']}/metrics")["metrics"]
        if m.get("type") == "step"
    ]
    assert sorted(steps) == list(range(len(steps)))  # every step once: none lost
    assert_equals_reference(service, big["id"], tmp_path, DRAINED)
