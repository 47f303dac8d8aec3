"""Runtime benchmark: ``python -m jupyter_edt.bench.runtime --json [--quick] [--workers N]``.

Measures, on CPU with gloo, for a ~10M-parameter MLP trained with Adam (state to move ~120 MB):

- ``overhead_ratio``: samples/s of the elastic runtime at world size ``--workers`` (2 by default)
  divided by samples/s of plain ``DistributedDataParallel`` on the same model, samples per step
  (``--batch``, 32 per worker by default) and threads, A/B in one run.
  Both are measured the same way: the median time between the ends of consecutive steps of rank
  0, warm-up steps excluded, in ``--rounds`` alternating rounds (DDP, ours, DDP, ours, ...); the
  ratio is the median of the rounds' ratios, so that a burst of load from other processes on a
  shared machine skews neither side;
- ``grow_pause_s`` (N -> N+1) and ``shrink_pause_s`` (N+1 -> N), N the world size: time between
  the last step of the old generation and the new one being formed with its state synced
  (joiners are already started);
- ``recovery_s``: SIGKILL of one worker to the next step completed by the survivors;
- ``equivalence_max_abs_diff``: final parameters of the elastic run (N -> N+1 -> N -> kill ->
  N-1) versus a fixed N-worker run.

With ``--launcher ray`` it starts a local Ray cluster (2 nodes x 2 logical GPUs; or uses the
running one at ``--ray-address``, whose first two nodes with 2 GPUs free it takes) and measures the
grow, shrink and recovery figures with the workers placed across its two nodes by the Ray
launcher (``ray_*``), beside the same figures with local processes (``local_*``), in one run;
the DDP A/B is left out, and the world size is 2. It also times starting an idle process on
each node one after the other and together (``ray_two_keepers_one_by_one_s``,
``ray_two_keepers_together_s``; each start makes a Ray actor, a Python process of its own).

The same file is the workers' program (``--program``).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import TensorDataset

from jupyter_edt.bench import print_result

WARMUP = 3


def _model(n_in: int, hidden: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(n_in, hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, 10),
    )


def _data(n: int, n_in: int) -> TensorDataset:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, n_in, generator=g)
    return TensorDataset(x, torch.randint(0, 10, (n,), generator=g))


def _program(cfg: argparse.Namespace) -> None:
    """The job's worker program: one epoch of ``steps`` global steps."""
    from jupyter_edt.runtime import Trainer

    model = _model(cfg.n_in, cfg.hidden)
    trainer = Trainer(
        model,
        lambda: (_data(cfg.steps * cfg.batch, cfg.n_in), _data(cfg.micro, cfg.n_in)),
        nn.functional.cross_entropy,
        lambda p: torch.optim.Adam(p, lr=1e-4),
    )
    trainer.fit(1, cfg.batch, 4, checkpoint_every=0, micro_batch_size=cfg.micro, validate_every=0)


def _ddp_worker(
    rank: int, world: int, rendezvous: dict[str, str], cfg: argparse.Namespace, q: Any
) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    os.environ.update(rendezvous)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = DistributedDataParallel(_model(cfg.n_in, cfg.hidden))
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    data = _data(cfg.steps * cfg.batch, cfg.n_in)
    per = cfg.batch // world
    ends = []
    for step in range(cfg.steps):
        lo = step * cfg.batch + rank * per
        x, y = data[lo : lo + per]
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        ends.append(time.perf_counter())
    dist.barrier()
    if rank == 0:
        q.put(cfg.batch / _median_interval(ends))
    dist.destroy_process_group()


def _median_interval(ends: list[float]) -> float:
    """Median time between the ends of consecutive steps after the warm-up."""
    timed = ends[WARMUP - 1 :]
    return statistics.median(b - a for a, b in itertools.pairwise(timed))


def _ddp_samples_per_s(cfg: argparse.Namespace) -> float:
    import torch.multiprocessing as mp

    from .rendezvous import agent_store

    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    with agent_store(cfg.workers) as rendezvous:
        mp.start_processes(
            _ddp_worker,
            args=(cfg.workers, rendezvous, cfg, q),
            nprocs=cfg.workers,
            start_method="spawn",
        )
    return float(q.get())


def _job_args(cfg: argparse.Namespace) -> list[str]:
    return [
        __file__,
        "--program",
        *("--steps", str(cfg.steps), "--batch", str(cfg.batch), "--micro", str(cfg.micro)),
        *("--hidden", str(cfg.hidden), "--n-in", str(cfg.n_in)),
    ]


@contextlib.contextmanager
def _local_launcher(cfg: argparse.Namespace) -> Iterator[Any]:
    """How the local runs' workers start: with ``--quick`` (the GPU check's dry run, in
    ``make test``) forked warm from a fork server, as the service starts them, so that a smoke
    run does not pay for importing torch in every worker; else as fresh interpreters. The
    figures measured exclude starts either way (a joiner is started before it is timed)."""
    if not cfg.quick:
        yield None
        return
    from jupyter_edt.launch.local import warm_launchers

    with warm_launchers(timeout=120) as launchers:
        yield launchers


def _runtime_fixed(cfg: argparse.Namespace, out: Path, launcher: Any = None) -> float:
    from jupyter_edt.runtime import LocalController

    with LocalController(_job_args(cfg), out, timeout_s=30, launcher=launcher) as ctl:
        ctl.start(cfg.workers)
        codes = ctl.wait(600)
        if set(codes.values()) != {0}:
            raise RuntimeError(f"fixed run failed: {codes}, see {out}")
        steps = [e for e in ctl.events() if e["type"] == "step" and e["worker"] == "w0"]
    return cfg.batch / _median_interval([e["time"] for e in steps])


def _runtime_elastic(
    cfg: argparse.Namespace, out: Path, launcher: Any = None, nodes: tuple[str, str] | None = None
) -> dict[str, float]:
    """N workers (``--workers``), grow to N+1, shrink to N, SIGKILL one. With `nodes` (N is 2),
    the first worker and the joiner run on the first node, the second worker (the one killed)
    on the other."""
    from jupyter_edt.runtime import LocalController
    from jupyter_edt.runtime.control import Placement

    def on(i: int) -> Placement:
        return Placement() if nodes is None else Placement(node=nodes[i], gpus=1)

    h1, h2, h3 = cfg.steps // 4, cfg.steps // 2, 3 * cfg.steps // 4
    where: dict[str, Any] = {"launcher": launcher}
    if nodes is not None:
        where["store_host"] = launcher.reachable_host()
    with LocalController(_job_args(cfg), out, timeout_s=30, **where) as ctl:
        ctl.hold(h1)
        ctl.start(cfg.workers, placements=[on(i) for i in range(cfg.workers)])
        ctl.wait_held(h1)
        # the joiner imports and builds its model first
        gen, _ = ctl.resize(ctl.members, [{}], wait=False, placements=[on(0)])
        ctl.hold(h2)
        ctl.release(h1)
        grow = ctl.wait_formed(gen)
        ctl.wait_held(h2)
        gen = ctl.scale(cfg.workers, wait=False)
        ctl.hold(h3)
        ctl.release(h2)
        shrink = ctl.wait_formed(gen)
        ctl.wait_held(h3)
        ctl.release(h3)
        t_kill = time.time()
        ctl.kill(ctl.members[1])
        codes = ctl.wait(600)
        events = ctl.events()
    if codes.get("w0") != 0:
        raise RuntimeError(f"elastic run failed: {codes}, see {out}")
    after = [
        e for e in events if e["type"] == "step" and e["worker"] == "w0" and e["time"] > t_kill
    ]
    redo = [e for e in after if e["generation"] > gen]
    return {
        "grow_pause_s": grow["pause_s"],
        "grow_bytes": grow["bytes_sent"],
        "shrink_pause_s": shrink["pause_s"],
        "recovery_s": redo[0]["time"] - t_kill,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--quick", action="store_true", help="a small model, for smoke tests")
    ap.add_argument("--program", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument(
        "--workers", type=int, default=2, help="the world size of the A/B and the elastic run"
    )
    ap.add_argument("--batch", type=int, default=None, help="samples per step (32 per worker)")
    ap.add_argument("--micro", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=None)
    ap.add_argument("--n-in", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=None, help="A/B rounds (default 3, quick 1)")
    ap.add_argument(
        "--launcher",
        choices=["local", "ray"],
        default="local",
        help="ray: the rescale figures across two nodes of a local Ray cluster, beside local",
    )
    ap.add_argument(
        "--ray-address",
        default=None,
        help="with --launcher ray: a running cluster's address (default: start a local one)",
    )
    cfg = ap.parse_args(argv)
    if cfg.program:
        _program(cfg)
        return 0
    if cfg.workers < 2 or (cfg.launcher == "ray" and cfg.workers != 2):
        ap.error("--workers must be 2 or more (2 with --launcher ray)")
    cfg.batch = cfg.batch or 32 * cfg.workers
    if cfg.batch % cfg.workers:
        ap.error(f"--batch ({cfg.batch}) must divide among the {cfg.workers} DDP workers")
    cfg.hidden = cfg.hidden or (128 if cfg.quick else 2048)
    cfg.n_in = cfg.n_in or (64 if cfg.quick else 512)
    cfg.steps = cfg.steps or (16 if cfg.quick else 40)
    cfg.rounds = cfg.rounds or (1 if cfg.quick else 3)
    params = sum(p.numel() for p in _model(cfg.n_in, cfg.hidden).parameters())
    if cfg.launcher == "ray":
        result = {"params": params, **_across_ray_nodes(cfg)}
        print_result(result, cfg.json)
        return 0
    with tempfile.TemporaryDirectory(prefix="edt-bench-") as tmp, _local_launcher(cfg) as warm:
        base = Path(tmp)
        ddp, ours = [], []
        for i in range(cfg.rounds):
            ddp.append(_ddp_samples_per_s(cfg))
            ours.append(_runtime_fixed(cfg, base / f"fixed{i}", warm and warm()))
        elastic = _runtime_elastic(cfg, base / "elastic", warm and warm())
        a = torch.load(base / "fixed0" / "model" / "model_epoch_final.pth")
        b = torch.load(base / "elastic" / "model" / "model_epoch_final.pth")
        diff = max(float((a[k] - b[k]).abs().max()) for k in a)
    result = {
        "params": params,
        "world_size": cfg.workers,
        "samples_per_step": cfg.batch,
        "micro_batch_size": cfg.micro,
        "rounds": cfg.rounds,
        "ddp_samples_per_s": statistics.median(ddp),
        "runtime_samples_per_s": statistics.median(ours),
        "overhead_ratio": statistics.median(o / d for o, d in zip(ours, ddp, strict=True)),
        "overhead_ratios": [o / d for o, d in zip(ours, ddp, strict=True)],
        **elastic,
        "equivalence_max_abs_diff": diff,
    }
    print_result(result, cfg.json)
    return 0


def _across_ray_nodes(cfg: argparse.Namespace) -> dict[str, Any]:
    """The elastic run with local processes, then on two nodes of a local Ray cluster."""
    from jupyter_edt.bench.raycluster import ray_cluster
    from jupyter_edt.launch.ray import RayLauncher

    with tempfile.TemporaryDirectory(prefix="edt-bench-") as tmp:
        base = Path(tmp)
        with _local_launcher(cfg) as warm:
            local = _runtime_elastic(cfg, base / "local", warm and warm())
        with contextlib.ExitStack() as stack:
            if cfg.ray_address is None:
                address = stack.enter_context(ray_cluster(nodes=2, gpus_per_node=2)).address
            else:
                address = cfg.ray_address
            launcher = RayLauncher(address, namespace="edt-bench")
            launcher.connect()
            a, b = _two_gpu_nodes()
            ray = _runtime_elastic(cfg, base / "ray", launcher, (a, b))
            starts = _keeper_starts(launcher, (a, b), base / "starts", cfg.rounds)
        x = torch.load(base / "local" / "model" / "model_epoch_final.pth")
        y = torch.load(base / "ray" / "model" / "model_epoch_final.pth")
        diff = max(float((x[k] - y[k]).abs().max()) for k in x)
    return {
        **{f"local_{k}": v for k, v in local.items()},
        **{f"ray_{k}": v for k, v in ray.items()},
        "ray_vs_local_max_abs_diff": diff,
        **starts,
    }


def _two_gpu_nodes() -> tuple[str, str]:
    """The first two live nodes with 2 GPUs each (the connected cluster's)."""
    import ray

    nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get("GPU", 0) >= 2]
    if len(nodes) < 2:
        raise RuntimeError(f"the Ray cluster has {len(nodes)} live node(s) with 2 GPUs, not 2")
    return nodes[0], nodes[1]


def _keeper_starts(
    launcher: Any, nodes: tuple[str, str], where: Path, rounds: int
) -> dict[str, Any]:
    """Starting one idle process on each node, one start after the other (`start_sync` each)
    and together (`start_all_sync`), in alternating rounds: what a job that grows by two waits
    for before its joiners even run, on a machine with cores to spare."""
    import ray

    from jupyter_edt.launch.base import ProcessSpec

    from .latency import until

    times: dict[str, list[float]] = {"one_by_one": [], "together": []}
    for i in range(rounds):
        for mode, took in times.items():
            specs = [
                ProcessSpec(
                    job_id=f"starts-{mode}-{i}",
                    name=f"w{n}",
                    argv=[sys.executable, "-c", "import time; time.sleep(600)"],
                    cwd=where,
                    log_dir=where / "logs",
                    devices=[str(n)],
                    node=node,
                )
                for n, node in enumerate(nodes)
            ]
            where.mkdir(parents=True, exist_ok=True)
            # the last round's keepers gone: none waits for a GPU
            until(lambda: ray.available_resources().get("GPU", 0.0) >= 4, "Ray's GPUs free", 60)
            t0 = time.monotonic()
            if mode == "together":
                handles = launcher.start_all_sync(specs)
            else:
                handles = [launcher.start_sync(spec) for spec in specs]
            took.append(round(time.monotonic() - t0, 3))
            for handle in handles:
                launcher.stop_sync(handle, grace=0)
    return {
        **{f"ray_two_keepers_{m}_s": statistics.median(t) for m, t in times.items()},
        **{f"ray_two_keepers_{m}_s_values": t for m, t in times.items()},
    }


if __name__ == "__main__":
    sys.exit(main())
