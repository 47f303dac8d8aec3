"""What a user waits for, end to end: `python -m jupyter_edt.bench.latency --json`.

Starts a real `jupyter edt serve` on 4 virtual GPUs, once with warm processes (the fork server,
`warm_workers`) and once without, and in each, `--reps` times: submits a small MLP job (up to 4
GPUs) and a second 2-GPU job at the same moment, cancels the second (the first grows 2 -> 4),
submits a third (it shrinks 4 -> 2), SIGKILLs one of its workers (a replacement joins), and
cancels everything. Per figure, the median and each value, warm beside cold:

- `submit_to_first_step_s`: the POST that submitted the job to its first step
- `grow_to_first_step_s`: the allocation that grew it to its first step on 4 workers
- `shrink_to_first_step_s`: the allocation that shrank it to its first step on 2
- `replace_to_first_step_s`: the SIGKILL of a worker to the first step with its replacement

A step's time is when its worker wrote it (its event); an allocation's, when the service
recorded it. `--quick`: one repetition, warm only (a smoke test's). `--launcher ray`: the same
on a local Ray cluster's 2 nodes x 2 logical GPUs, cold only (processes on Ray nodes start cold:
`warm_workers` is the local launcher's), and then, per repetition, a job on both nodes through
the two ways a node leaves:

- `drain_to_off_node_s`: an administrator's drain of one of its nodes with a deadline (a spot
  instance's notice; the service tells Ray too) to its first step without that node's workers
- `node_loss_to_first_step_s`: a crash of one of its nodes (its raylet and every process below
  it SIGKILLed at once) to the survivors' first step at the smaller size

Each node that left is replaced by a fresh one before the next change.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import statistics
import sys
import tempfile
import textwrap
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from . import events

if TYPE_CHECKING:
    from .raycluster import RayCluster

T = TypeVar("T")
DEADLINE_S = 180.0
FIGURES = (
    "submit_to_first_step_s",
    "grow_to_first_step_s",
    "shrink_to_first_step_s",
    "replace_to_first_step_s",
)

# A small MLP that trains long enough for every change (a step takes ~20 ms of "work").
PROGRAM = textwrap.dedent(
    """
    import time
    import torch
    from torch import nn
    from torch.utils.data import Dataset
    from jupyter_edt.runtime import Trainer

    class Data(Dataset):
        def __init__(self, n, seed):
            g = torch.Generator().manual_seed(seed)
            self.x = torch.randn(n, 32, generator=g)
            self.y = (self.x[:, 0] > 0).long()
        def __len__(self):
            return len(self.x)
        def __getitem__(self, i):
            time.sleep(0.005)
            return self.x[i], self.y[i]

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 2))
    trainer = Trainer(
        model,
        lambda: (Data(4096, 1), Data(64, 2)),
        nn.functional.cross_entropy,
        lambda params: torch.optim.SGD(params, lr=0.05),
    )
    trainer.fit(1000, 16, 4, checkpoint_every=0, micro_batch_size=4)
    """
)


class Service:
    """A `jupyter edt serve` of its own (`events.Service`) on 4 virtual GPUs, with the real
    driver, rescaling at once."""

    def __init__(
        self,
        root: Path,
        warm: bool,
        ray_address: str | None = None,
        settings: dict[str, Any] | None = None,
    ) -> None:
        """`settings`: more of the service's, or others (bench.restart's)."""
        self.root = root
        on_ray = (
            {}
            if ray_address is None
            else {
                "EDTService.launcher_class": "ray",
                "EDTService.ray_address": ray_address,
                "EDTService.ray_namespace": "edt-bench-latency",
                "EDTService.devices": "ray",
                "EDTService.admin_users": [events.BENCH_USER],  # drains nodes
            }
        )
        self.service = events.Service(
            root,
            4,
            {
                "EDTService.driver_module": "jupyter_edt.runtime.driver",
                "EDTService.min_rescale_interval": 0.0,
                "EDTService.refresh_interval": 0.5,
                "EDTService.warm_workers": warm,
                "EDTService.log_level": "INFO",
                **on_ray,
                **(settings or {}),
            },
        )
        self.proc = self.service.proc
        self.url = f"{self.service.url}edt/api/v1/"
        self.token = self.service.token
        until(lambda: self._answers(), "the service answering", 60)
        if warm:  # measured on a service that is up, not one still preloading
            log = root / "service.log"
            until(lambda: b"warm processes ready" in log.read_bytes(), "warm processes", 120)

    def _answers(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"the service exited; see {self.root / 'service.log'}")
        try:
            self.call("GET", "jobs")
            return True
        except OSError:
            return False

    def call(self, method: str, path: str, body: Any = None) -> Any:
        request = urllib.request.Request(
            self.url + path,
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as answer:
            data = answer.read()
        return json.loads(data) if data else None

    def submit(self, name: str, max_gpus: int) -> str:
        return self.call("POST", "jobs", {"code": PROGRAM, "max_gpus": max_gpus, "name": name})[
            "id"
        ]

    def steps(self, job_id: str) -> list[dict[str, Any]]:
        metrics = self.call("GET", f"jobs/{job_id}/metrics")["metrics"]
        return [m for m in metrics if m.get("type") == "step"]

    def first_step(self, job_id: str, after: float, ok: Callable[[dict], bool], what: str) -> dict:
        return until(
            lambda: next((s for s in self.steps(job_id) if s["time"] >= after and ok(s)), None),
            what,
        )

    def allocation(self, job_id: str, size: int, after: float) -> float:
        """When the service recorded the job's allocation of `size` devices (after `after`)."""

        def found() -> float | None:
            with sqlite3.connect(self.root / "edt.sqlite", timeout=10) as db:
                rows = db.execute(
                    "SELECT time, data FROM edt_events WHERE job_id = ? AND kind = 'allocation' "
                    "AND time >= ? ORDER BY id",
                    (job_id, after),
                ).fetchall()
            return next((t for t, d in rows if len(json.loads(d)["devices"]) == size), None)

        return until(found, f"{job_id}'s allocation of {size}")

    def worker_pids(self, job_id: str) -> dict[str, int]:
        status = json.loads((self.root / "jobs" / job_id / "status.json").read_text())
        return dict(status.get("pids", {}))

    def ended(self, job_id: str) -> bool:
        return self.call("GET", f"jobs/{job_id}")["state"] in ("SUCCEEDED", "FAILED", "CANCELLED")

    def stop(self) -> None:
        self.service.stop()


def until(probe: Callable[[], T | None], what: str, timeout: float = DEADLINE_S) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)


def one_round(service: Service) -> dict[str, float]:
    """One of each change, to one job; the seconds each took to its first step."""
    t0 = time.time()
    measured = service.submit("measured", 4)
    other = service.submit("other", 2)
    first = service.first_step(measured, 0, lambda s: True, "the first step")
    out = {"submit_to_first_step_s": first["time"] - t0}
    service.first_step(other, 0, lambda s: True, "the other job's first step")

    t1 = time.time()
    service.call("POST", f"jobs/{other}/cancel", {})
    grown = service.allocation(measured, 4, t1)
    step = service.first_step(measured, grown, lambda s: s["world_size"] == 4, "a step on 4")
    out["grow_to_first_step_s"] = step["time"] - grown

    t2 = time.time()
    third = service.submit("third", 2)
    shrunk = service.allocation(measured, 2, t2)
    step = service.first_step(measured, shrunk, lambda s: s["world_size"] == 2, "a step on 2")
    out["shrink_to_first_step_s"] = step["time"] - shrunk

    pids = until(lambda: service.worker_pids(measured), "the job's workers")
    before = service.steps(measured)[-1]["generation"]
    killed = time.time()
    os.kill(sorted(pids.values())[-1], signal.SIGKILL)
    step = service.first_step(
        measured,
        killed,
        lambda s: s["world_size"] == 2 and s["generation"] > before,
        "a step with the replacement",
    )
    out["replace_to_first_step_s"] = step["time"] - killed

    for job in (measured, third):
        service.call("POST", f"jobs/{job}/cancel", {})
    for job in (measured, other, third):
        until(lambda job=job: service.ended(job), f"{job} ended", 60)
    return out


NODE_FIGURES = ("drain_to_off_node_s", "node_loss_to_first_step_s")


def node_round(service: Service, cluster: RayCluster) -> dict[str, float]:
    """A job on both nodes; one node drained, then (a fresh node in its place, the job grown
    back) one crashed; the seconds each took to the job's first step without the node."""
    job = service.submit("nodes", 4)
    service.first_step(job, 0, lambda s: s["world_size"] == 4, "a step on 4")
    out = {}
    for figure in NODE_FIGURES:
        node = cluster.nodes[0]
        before = service.steps(job)[-1]["generation"]
        t0 = time.time()
        if figure == "drain_to_off_node_s":  # an administrator's drain, which tells Ray too
            service.call("POST", f"cluster/nodes/{node.node_id}/drain", {"deadline_s": 60})
        else:
            cluster.crash(node)
        step = service.first_step(
            job,
            t0,
            lambda s, b=before: s["world_size"] == 2 and s["generation"] > b,
            f"{figure}: a step on 2",
        )
        out[figure] = step["time"] - t0
        if figure == "drain_to_off_node_s":  # Ray lets it go once nothing runs there
            until(
                lambda n=node.node_id: all(
                    d["node"] != n for d in service.call("GET", "cluster")["devices"]
                ),
                "the drained node gone",
            )
            cluster.remove_node(node, allow_graceful=False)
        cluster.add_node(gpus=2)
        service.first_step(job, step["time"], lambda s: s["world_size"] == 4, "on 4 again")
    service.call("POST", f"jobs/{job}/cancel", {})
    until(lambda: service.ended(job), f"{job} ended", 60)
    return out


def measure(
    reps: int, modes: tuple[bool, ...], keep: str | None = None, launcher: str = "local"
) -> dict[str, Any]:
    if launcher == "ray":
        from .raycluster import ray_cluster

        with ray_cluster(nodes=2, gpus_per_node=2) as cluster:
            return {"launcher": "ray", **_measure(reps, modes, keep, cluster)}
    return {"launcher": "local", **_measure(reps, modes, keep)}


def _measure(
    reps: int, modes: tuple[bool, ...], keep: str | None, cluster: RayCluster | None = None
) -> dict[str, Any]:
    values: dict[str, dict[str, list[float]]] = {}
    ray_address = None if cluster is None else cluster.address
    with tempfile.TemporaryDirectory(prefix="edt-bench-latency-") as scratch:
        tmp = keep or scratch
        for warm in modes:
            kind = "warm" if warm else "cold"
            service = Service(Path(tmp) / kind, warm, ray_address)
            try:
                rounds = [one_round(service) for _ in range(reps)]
                if cluster is not None:
                    nodes = [node_round(service, cluster) for _ in range(reps)]
                    rounds = [{**r, **n} for r, n in zip(rounds, nodes, strict=True)]
            finally:
                service.stop()
            figures = FIGURES + (NODE_FIGURES if cluster is not None else ())
            values[kind] = {f: [round(r[f], 3) for r in rounds] for f in figures}
    result: dict[str, Any] = {"reps": reps}
    for kind, figures in values.items():
        for figure, xs in figures.items():
            result[f"{kind}_{figure}"] = round(statistics.median(xs), 3)
            result[f"{kind}_{figure}_values"] = xs
    if len(values) == 2:
        for figure in FIGURES:
            cold, warm = result[f"cold_{figure}"], result[f"warm_{figure}"]
            result[f"speedup_{figure.removesuffix('_s')}"] = round(cold / warm, 2) if warm else None
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="one repetition, warm only")
    parser.add_argument("--keep", help="run the services in this directory and keep it")
    parser.add_argument(
        "--launcher",
        choices=("local", "ray"),
        default="local",
        help="ray: on a local Ray cluster of 2 nodes x 2 logical GPUs",
    )
    args = parser.parse_args(argv)
    if args.reps < 1:
        parser.error("--reps must be 1 or more")
    if args.launcher == "ray":
        modes: tuple[bool, ...] = (False,)
    else:
        modes = (True,) if args.quick else (False, True)
    result = measure(1 if args.quick else args.reps, modes, args.keep, args.launcher)
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>40}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
