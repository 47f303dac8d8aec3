"""Jobs on a Ray cluster through a real `jupyter edt serve` with the Ray launcher: the
devices are the nodes' GPUs, and each worker runs on the node of its GPU, kept by its actor."""

from __future__ import annotations

import io
import json
import secrets
import zipfile

import pytest
import ray
import torch
from edtservice import ServiceProcess, call
from jobprograms import DEADLINE_S, FINAL_MODEL, exact_program, program, reference_model
from waiting import eventually_sync

NAMESPACE = "edt-ray-jobs"
TOKEN = secrets.token_hex(16)


@pytest.fixture(scope="module")
def service(cluster, tmp_path_factory):
    root = tmp_path_factory.mktemp("ray-serve")
    tokens = root / "tokens.json"
    tokens.write_text(json.dumps({"alice": {"tokens": [TOKEN]}}))
    tokens.chmod(0o600)
    process = ServiceProcess(
        root,
        {
            "authenticator_class": "jupyter_edt.serve.auth.TokenFileAuthenticator",
            "launcher_class": "ray",
            "ray_address": cluster.address,
            "ray_namespace": NAMESPACE,
            "min_rescale_interval": 0.0,
            "refresh_interval": 0.5,
            "run_as_users": False,
            "allow_shared_account": True,
        },
    )
    process.settings["TokenFileAuthenticator.tokens_file"] = str(tokens)
    process.start()
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
    assert service.stop() == 0
    service.start()
    assert job_state(service, job["id"])["state"] == "RUNNING", service.log()
    assert kept(job["id"], "driver") == driver
    release.touch()
    done = finished(service, job["id"])
    assert done["state"] == "SUCCEEDED", said(service, done["id"])
    assert done["restarts"] == 0  # re-attached, never resumed
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
    cluster.remove_node(lost, allow_graceful=False)  # a crash
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


# still running while another job comes and goes (about 30 s)
ELASTIC = exact_program(12, 4, work_s=0.3, checkpoint_every=0)


def worker_pids(job_id: str) -> dict[str, tuple[int, str]]:
    """The job's running workers: id -> (pid, node), as their keepers say."""
    out = {}
    for i in range(16):
        process = kept(job_id, f"w{i}")
        if process is not None and process["started"] is not None:
            out[f"w{i}"] = (process["pid"], process["node"])
    return out


def test_a_job_shrinks_in_place_to_one_node_and_grows_back_exactly(cluster, service, tmp_path):
    """4 GPUs over both nodes; a second job arrives: the first keeps the 2 workers of one node
    (same processes) and the newcomer gets the other node; once it ends, the first grows back
    to 4. The result equals an uninterrupted 1-worker run of the same program."""
    big = api(service, "POST", "jobs", {"code": ELASTIC, "max_gpus": 4, "name": "elastic"})
    wait_job(
        service,
        big["id"],
        "the job elastic on 4 GPUs",
        lambda j: j["state"] == "RUNNING" and j["elastic"] and len(j["devices"]) == 4,
    )
    before = eventually_sync(
        lambda: worker_pids(big["id"]), "4 workers kept", until=lambda w: len(w) == 4
    )
    assert len({node for _, node in before.values()}) == 2
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
    wait_job(service, small["id"], "the newcomer finished", lambda j: j["state"] == "SUCCEEDED")
    wait_job(
        service,
        big["id"],
        "the first job back on 4 GPUs",
        lambda j: len(j["devices"]) == 4 or j["state"] != "RUNNING",
    )
    done = finished(service, big["id"])
    assert done["state"] == "SUCCEEDED", said(service, done["id"])
    assert done["restarts"] == 0, said(service, done["id"])
    sizes = [
        e["world_size"]
        for e in api(service, "GET", f"jobs/{big['id']}/metrics")["metrics"]
        if "world_size" in e
    ]
    assert {4, 2} <= set(sizes) and sizes[-1] == 4, sizes

    theirs = reference_model(ELASTIC, tmp_path)
    ours = torch.load(service.root / "jobs" / big["id"] / "result" / FINAL_MODEL)
    assert ours.keys() == theirs.keys()
    for name in ours:
        assert ours[name].dtype == torch.float64
        assert torch.allclose(ours[name], theirs[name], rtol=0, atol=1e-9), name
