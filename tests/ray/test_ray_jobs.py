"""Jobs on a Ray cluster through a real `jupyter edt serve` with the Ray launcher: the
devices are the nodes' GPUs, and each worker runs on the node of its GPU, kept by its actor."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import ray
import torch
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
    """What the keeper of a job's process says of it: pid, start time, node (None: no such
    keeper, or it has not started its process yet)."""
    try:
        actor = ray.get_actor(f"{job_id}/{process}", namespace=NAMESPACE)
        return ray.get(actor.identity.remote(), timeout=30)
    except (ValueError, ray.exceptions.RayActorError):  # none, or it just ended
        return None


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
    assert done["state"] == "SUCCEEDED", said(service, done["id"])
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
    assert done["state"] == "SUCCEEDED", said(service, done["id"])
    assert done["restarts"] == 0, said(service, done["id"])  # shrunk in place, not restarted


# float64, momentum and a scheduler: a rescale that lost or changed any state would not match
ELASTIC = textwrap.dedent(
    """
    import os, time
    import torch
    from torch import nn
    from torch.utils.data import TensorDataset
    from jupyter_edt.runtime import Trainer

    torch.set_default_dtype(torch.float64)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(48, 4, generator=g)
    y = (x[:, 0] > 0).long()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    reference = os.environ.get("EDT_TEST_REFERENCE_DIR")

    def loss(out, target):
        if not reference:
            time.sleep(0.3)  # work, so that the job is still running when others come and go
        return nn.functional.cross_entropy(out, target)

    trainer = Trainer(
        model,
        lambda: (TensorDataset(x, y), TensorDataset(x[:8], y[:8])),
        loss,
        lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9),
        lr_scheduler=lambda opt: torch.optim.lr_scheduler.StepLR(opt, 3, gamma=0.5),
    )
    trainer.fit(12, 8, 4, checkpoint_every=0, micro_batch_size=2, result_dir=reference)
    """
)
MODEL = Path("model") / "model_epoch_final.pth"


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
    eventually_sync(
        lambda: job_state(service, big["id"]),
        "the job elastic on 4 GPUs",
        until=lambda j: j["state"] == "RUNNING" and j["elastic"] and len(j["devices"]) == 4,
        timeout=DEADLINE_S,
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
    shrunk = eventually_sync(
        lambda: job_state(service, big["id"]),
        "the first job on 2 GPUs",
        until=lambda j: len(j["devices"]) == 2,
        timeout=DEADLINE_S,
    )
    devices = {d["id"]: d for d in api(service, "GET", "cluster")["devices"]}
    assert len({devices[d]["node"] for d in shrunk["devices"]}) == 1  # packed on one node
    after = eventually_sync(
        lambda: worker_pids(big["id"]), "2 workers left", until=lambda w: len(w) == 2
    )
    assert all(before[w] == after[w] for w in after)  # the survivors' very processes
    eventually_sync(
        lambda: job_state(service, small["id"]),
        "the newcomer finished",
        until=lambda j: j["state"] == "SUCCEEDED",
        timeout=DEADLINE_S,
    )
    eventually_sync(
        lambda: job_state(service, big["id"]),
        "the first job back on 4 GPUs",
        until=lambda j: len(j["devices"]) == 4 or j["state"] != "RUNNING",
        timeout=DEADLINE_S,
    )
    done = eventually_sync(
        lambda: job_state(service, big["id"]),
        "the first job finished",
        until=lambda j: j["state"] in ("SUCCEEDED", "FAILED"),
        timeout=DEADLINE_S,
    )
    assert done["state"] == "SUCCEEDED", said(service, done["id"])
    assert done["restarts"] == 0, said(service, done["id"])
    sizes = [
        e["world_size"]
        for e in api(service, "GET", f"jobs/{big['id']}/metrics")["metrics"]
        if "world_size" in e
    ]
    assert {4, 2} <= set(sizes) and sizes[-1] == 4, sizes

    reference = tmp_path / "reference"
    (tmp_path / "program.py").write_text(ELASTIC)
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDT_")}
    subprocess.run(
        [sys.executable, str(tmp_path / "program.py")],
        env={**env, "EDT_TEST_REFERENCE_DIR": str(reference)},
        check=True,
        timeout=DEADLINE_S,
    )
    ours = torch.load(service.root / "jobs" / big["id"] / "result" / MODEL)
    theirs = torch.load(reference / MODEL)
    assert ours.keys() == theirs.keys()
    for name in ours:
        assert ours[name].dtype == torch.float64
        assert torch.allclose(ours[name], theirs[name], rtol=0, atol=1e-9), name
