"""Jobs on a Ray cluster through a real `jupyter edt serve` with the Ray launcher: the
devices are the nodes' GPUs, and each worker runs on the node of its GPU, kept by its actor."""

from __future__ import annotations

import json
import secrets

import pytest
import ray
from edtservice import ServiceProcess, call
from jobprograms import DEADLINE_S, program
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
    """What the keeper of a job's process says of it: pid, start time, node."""
    try:
        actor = ray.get_actor(f"{job_id}/{process}", namespace=NAMESPACE)
    except ValueError:
        return None
    return ray.get(actor.identity.remote(), timeout=30)


def keeper_node(job_id: str, worker: str) -> str | None:
    process = kept(job_id, worker)
    return None if process is None else process["node"]


def test_the_clusters_gpus_are_the_devices(cluster, service):
    answer = api(service, "GET", "cluster")
    assert answer["source"] == "ray"
    nodes = {n.node_id for n in cluster.nodes}
    assert {d["node"] for d in answer["devices"]} == nodes
    assert len(answer["devices"]) == 4


def test_a_job_over_both_nodes_runs_each_worker_on_its_gpus_node_across_a_restart(cluster, service):
    job = api(
        service,
        "POST",
        "jobs",
        {"code": program(3, samples=48, delay=0.02), "max_gpus": 4, "name": "two-nodes"},
    )
    running = eventually_sync(
        lambda: job_state(service, job["id"]),
        "the job running on 4 GPUs",
        until=lambda j: j["state"] == "RUNNING" and len(j["devices"]) == 4,
        timeout=DEADLINE_S,
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
    assert job_state(service, job["id"])["state"] == "RUNNING"
    assert kept(job["id"], "driver") == driver
    done = eventually_sync(
        lambda: job_state(service, job["id"]),
        "the job finished",
        until=lambda j: j["state"] in ("SUCCEEDED", "FAILED"),
        timeout=DEADLINE_S,
    )
    assert done["state"] == "SUCCEEDED", (done, service.log())
    assert done["restarts"] == 0  # re-attached, never resumed
    logs = call(service.url, "GET", f"edt/api/v1/jobs/{job['id']}/logs", TOKEN)[1]
    assert logs
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
    eventually_sync(
        lambda: job_state(service, job["id"]),
        "the job elastic on 4 GPUs",
        until=lambda j: j["state"] == "RUNNING" and j["elastic"] and len(j["devices"]) == 4,
        timeout=DEADLINE_S,
    )
    lost = cluster.nodes[1]
    cluster.remove_node(lost, allow_graceful=False)  # a crash
    survivors = eventually_sync(
        lambda: job_state(service, job["id"]),
        "the job on the remaining node's 2 GPUs",
        until=lambda j: j["state"] == "RUNNING" and len(j["devices"]) == 2,
        timeout=DEADLINE_S,
    )
    devices = {d["id"]: d for d in api(service, "GET", "cluster")["devices"]}
    assert {devices[d]["node"] for d in survivors["devices"]} == {cluster.nodes[0].node_id}
    done = eventually_sync(
        lambda: job_state(service, job["id"]),
        "the job finished",
        until=lambda j: j["state"] in ("SUCCEEDED", "FAILED"),
        timeout=DEADLINE_S,
    )
    assert done["state"] == "SUCCEEDED", (done, service.log())
    assert done["restarts"] == 0  # shrunk in place, never restarted
