"""Scheduler simulator: ``python -m jupyter_edt.bench.simulate --policy P --workload W.csv --json``.

A discrete-event simulation of a GPU cluster (default 16 nodes x 4 GPUs) running one of the
Pollux (OSDI'21) workloads, to compare scheduling policies on job completion time (JCT). Speeds
come from measured curves (`pollux_data`), and time advances as in the published simulations,
so that the published baselines come out as published (``--all`` checks `tiresias` against the
paper on every workload) and our policies are compared on the same footing:

- The scheduler runs every 60 s. A job is first seen at the first tick at or after its
  submission; a finished job's devices are freed at the next tick.
- Between ticks a job advances epoch by epoch at its current placement; the time to reach each
  epoch boundary is rounded to a whole second, and the job completes at the rounded time of
  its last boundary.
- Each job keeps its workload batch size (the effective batch is constant, as in jupyter-edt),
  with gradient accumulation where a GPU cannot hold its share.
- A (re)start or placement change costs a job time without progress. Published baselines
  (`tiresias`, `static`) pay 30 s each time (checkpoint-restart). Our elastic policies pay
  ``--start-cost`` (default 30 s) to start or resume a job, and ``--rescale-cost`` (default
  0.5 s) for every change of a running job's devices: jupyter-edt rescales in place, and
  ``python -m jupyter_edt.bench.runtime --json`` measured ``grow_pause_s`` ~0.12 s and
  ``shrink_pause_s`` ~0.04 s on a CPU with gloo; 0.5 s leaves room for NCCL communicators and
  larger models' state transfer.

Kinds of job (``--mix elastic=0.5,restart=0.3,rigid=0.2``; default: every job elastic). Each
job of the workload gets a kind, the shares exact up to one job, which jobs get which drawn by
``--seed``. As in the job service:
- ``elastic`` jobs are resized in place, at ``--rescale-cost`` per change, as above.
- ``restart`` jobs (torchrun programs) are resized by restarting all their workers: every
  change of a running job's devices costs ``--restart-cost`` (default 10 s) without progress.
  They run only at GPU counts that divide their batch (each worker an equal share; the
  service's `JobDemand.sizes`), and the policy is told the cost (`JobDemand.restart_cost_s`)
  and the ``--restart-interval`` (default 60 s, the service's). 10 s: the issue's target for a
  restart from the decision to the first step at the new size is 3 s with warm processes on a
  2-core machine, this repository's cold in-place grow measured 4 to 9 s (README), and a cold
  torchrun restart with CUDA and NCCL set-up and a checkpoint round trip takes about a minute;
  10 s is a warm restart of a real model on GPUs, state saved and loaded included. Run with
  ``--restart-cost 60`` for torchrun's.
- ``rigid`` jobs run at exactly their ``num_replicas``, never resized.
Starting or resuming a job of any kind costs ``--start-cost``. The baselines restart every job
alike, whatever its kind. ``--json`` reports job completion times per kind (``by_kind``) beside
the overall ones; the same seed gives the same jobs each kind under every policy.

Policies:
- ``tiresias``: the published baseline (two-queue discretised LAS, 16 GPU-hour threshold,
  each job exactly its ``num_replicas`` or nothing). Calibration only.
- ``static``: each job exactly ``num_replicas``, first come first served, never preempted.
- ``fair-share``, ``priority``, ``goodput``: jupyter-edt's policies, through the same
  `jupyter_edt.scheduling.policy.allocate` the job service calls, on `DeviceSlot`s for the
  cluster. Each job is its own user (the workloads name none), has priority 0 (so `priority`
  equals `fair-share` here), min 1 GPU and max ``--max-gpus``: ``scalable`` is as many GPUs as
  the fixed batch splits over with each GPU at least the smallest measured micro-batch (what a
  user who leaves the max to the scheduler gets), ``requested`` is the workload's
  ``num_replicas`` (the count the user tuned the job for and would ask a static scheduler
  for). ``auto`` (default) is what a user of each policy would set: ``requested`` under
  `fair-share` and `priority`, which hand out devices up to the max whether they speed a job
  up or not (work-conserving), ``scalable`` under `goodput`, which stops each job where it
  stops getting faster by itself. Like the job service, the policies are told each job's
  remaining steps and the steps/s it ran at on each GPU count so far, nothing else
  (`fair-share` and `priority` use them only to order ties).

``--all`` runs every policy on every workload and prints the table (or JSON with ``--json``).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import random
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from jupyter_edt.scheduling.policy import (
    POLICY_NAMES,
    DeviceSlot,
    JobDemand,
    PolicyName,
    allocate,
)

from .pollux_data import Application, default_data_dir, load_applications

TICK_S = 60
#: What the published simulations charged for every (re)start or placement change.
PUBLISHED_RESTART_S = 30.0
#: Default pause of an in-place rescale; see the module docstring for the measurement.
DEFAULT_RESCALE_S = 0.5
DEFAULT_START_S = 30.0
#: Default cost of a restart job's resize; see the module docstring for the reasoning.
DEFAULT_RESTART_KIND_S = 10.0
#: The job service's default `restart_interval` (seconds between a restart job's resizes).
DEFAULT_RESTART_INTERVAL_S = 60.0
KINDS = ("elastic", "restart", "rigid")
TIRESIAS_THRESHOLD_GPU_S = 16 * 3600
LAST_TICK_S = 90 * 24 * 3600  # a policy that starves a job forever fails instead of spinning
SIM_POLICIES = ("static", "tiresias", *POLICY_NAMES)
#: Policies that checkpoint-restart every job (calibration against the published figures).
BASELINES = ("static", "tiresias")
#: Published average JCT (s) per workload at 1.0x load (Pollux paper; data README).
PUBLISHED = {
    "tiresias": [2473.7, 5145.0, 3876.3, 3280.3, 3501.0, 3469.7, 5479.9, 5079.7],
    "pollux": [2088.8, 3322.9, 2188.5, 2721.0, 2673.7, 2446.1, 3616.1, 2951.9],
    "optimus": [4087.1, 6913.9, 3944.0, 5967.8, 5656.2, 5301.9, 7290.9, 6293.8],
}


@dataclass
class SimJob:
    """One workload job and its simulated state."""

    name: str
    app: Application
    submitted: float
    replicas: int
    batch: int
    max_gpus: int
    kind: str = "elastic"  # one of KINDS
    progress: float = 0.0
    epoch: int = 0  # completed epochs
    alloc: tuple = ()  # device ids (our policies) or node per GPU (tiresias)
    placement: tuple[int, ...] = ()  # per-node counts, in allocation order
    pause: float = 0.0  # seconds of the current (re)start or rescale still to pay
    completed: float | None = None
    last_change: float | None = None
    measured: dict[int, float] = field(default_factory=dict)  # GPU count -> steps/s
    starts: int = 0
    rescales: int = 0
    busy_gpu_s: float = 0.0  # GPU-seconds spent training (not paused, not finished)
    held_gpu_s: float = 0.0  # GPU-seconds holding devices

    def remaining_steps(self) -> float:
        """Optimizer steps left at the job's batch: what the job knows (epochs x dataset /
        batch, less the steps done) since a constant batch makes it independent of GPUs."""
        app = self.app
        now = (app.progress(self.epoch + 1) - self.progress) / app.gain(self.batch, self.epoch)
        return now + _steps_after(app, self.batch)[self.epoch]

    def advance(self, start: float, seconds: float) -> None:
        """Run from ``start`` for ``seconds`` on the current placement."""
        if not self.placement or self.completed is not None:
            return
        gpus = sum(self.placement)
        self.held_gpu_s += gpus * seconds
        delay = min(self.pause, seconds)
        self.pause -= delay
        elapsed = delay
        seconds -= delay
        app = self.app
        while seconds > 0 and self.completed is None:
            step_s, actual = app.iteration_time(self.placement, self.batch)
            self.measured[gpus] = 1.0 / step_s
            rate = app.gain(actual, self.epoch) / step_s  # progress per second
            target = app.progress(self.epoch + 1)
            if self.progress + rate * seconds < target:
                self.progress += rate * seconds
                self.busy_gpu_s += gpus * seconds
                elapsed += seconds
                seconds = 0
            else:
                delta = min(float(round((target - self.progress) / rate)), seconds)
                self.progress = target
                self.epoch += 1
                self.busy_gpu_s += gpus * delta
                elapsed += delta
                seconds -= delta
                if self.epoch == app.epochs:
                    self.completed = start + elapsed
                    self.held_gpu_s -= gpus * seconds  # held until the tick, but not used

    def assign(self, alloc: tuple, placement: tuple[int, ...], now: float, cost: float) -> None:
        """Take allocation ``alloc`` (per-node counts ``placement``); pay ``cost`` on a change."""
        if alloc == self.alloc:
            return
        if alloc and self.alloc:
            self.rescales += 1
        elif alloc:
            self.starts += 1
        self.alloc = alloc
        self.placement = placement
        if alloc:
            self.pause = cost
            self.last_change = now


@cache
def _steps_after(app: Application, batch: int) -> list[float]:
    """Steps at ``batch`` in the epochs after each 0-based epoch: suffix sums, cached."""
    per_epoch = [
        (app.progress(e + 1) - app.progress(e)) / app.gain(batch, e) for e in range(app.epochs)
    ]
    after = [0.0] * app.epochs
    for e in range(app.epochs - 2, -1, -1):
        after[e] = after[e + 1] + per_epoch[e + 1]
    return after


def read_workload(path: str | Path, apps: dict[str, Application], max_gpus: str) -> list[SimJob]:
    """Jobs of a workload CSV (name,time,application,num_replicas,batch_size), in file order.

    ``max_gpus`` is the elastic policies' cap: ``requested`` (num_replicas, what the user asked
    for) or ``scalable`` (as many as the batch can be split over, at most the cluster); see
    `max_gpus_rule` for ``auto``.
    """
    if max_gpus not in ("requested", "scalable"):
        raise ValueError(f"max_gpus must be 'requested' or 'scalable', got {max_gpus!r}.")
    jobs = []
    with Path(path).open(newline="") as f:
        for row in csv.DictReader(f):
            app = apps[row["application"]]
            batch, replicas = int(row["batch_size"]), int(row["num_replicas"])
            cap = replicas if max_gpus == "requested" else app.max_replicas(batch)
            jobs.append(
                SimJob(
                    name=row["name"],
                    app=app,
                    submitted=float(row["time"]),
                    replicas=replicas,
                    batch=batch,
                    max_gpus=max(1, cap),
                )
            )
    return jobs


class Tiresias:
    """Tiresias (+tuned jobs) exactly as the published simulations ran it."""

    def __init__(self) -> None:
        self.queues: tuple[list[str], list[str]] = ([], [])
        self.running: dict[str, bool] = {}
        self.last_check: dict[str, int] = {}
        self.executed: dict[str, int] = {}

    def allocate(
        self, active: Sequence[SimJob], nodes: int, per_node: int, now: float
    ) -> dict[str, list[int]]:
        """Node index per GPU of each running job, in allocation order (empty: pending)."""
        by_name = {j.name: j for j in active}
        q0, q1 = self.queues
        q0[:] = [n for n in q0 if n in by_name]
        q1[:] = [n for n in q1 if n in by_name]
        for job in active:
            if job.name not in self.running:
                self.running[job.name] = False
                self.last_check[job.name] = 0
                self.executed[job.name] = 0
                q0.append(job.name)
        t = int(now)
        for job in active:
            name = job.name
            if self.running[name]:
                self.executed[name] += t - self.last_check[name]
                if name in q0 and self.executed[name] * job.replicas >= TIRESIAS_THRESHOLD_GPU_S:
                    q0.remove(name)
                    q1.append(name)
            self.last_check[name] = t
        current = {j.name: list(j.alloc) for j in active}
        left = nodes * per_node
        for queue in (q0, q1):
            for name in queue:
                need = by_name[name].replicas
                self.running[name] = need <= left
                if need <= left:
                    left -= need
                else:
                    current[name] = []
        free = [per_node] * nodes
        for held in current.values():
            for n in held:
                free[n] -= 1
        for queue in (q0, q1):
            for name in queue:
                if self.running[name] and not current[name]:
                    need = by_name[name].replicas
                    got: list[int] = []
                    while len(got) < need:
                        node = max(range(nodes), key=lambda i: (free[i], -i))
                        take = min(free[node], need - len(got))
                        got += [node] * take
                        free[node] -= take
                    current[name] = got
        return current


@dataclass
class Options:
    policy: str
    nodes: int = 16
    gpus_per_node: int = 4
    rescale_cost: float = DEFAULT_RESCALE_S
    start_cost: float = DEFAULT_START_S
    #: Seconds lost per restart: every (re)start under `tiresias` and `static` (None: the
    #: published 30 s), every resize of a restart job under our policies (None: 10 s).
    restart_cost: float | None = None
    max_gpus: str = "auto"
    min_rescale_interval: float = 30.0
    data: str | None = None
    #: Share of each kind of job (`KINDS`); None: every job elastic.
    mix: dict[str, float] | None = None
    seed: int = 0
    restart_interval: float = DEFAULT_RESTART_INTERVAL_S

    def restart_s(self) -> float:
        """The restart cost in force for this policy (see `restart_cost`)."""
        if self.restart_cost is not None:
            return self.restart_cost
        return PUBLISHED_RESTART_S if self.policy in BASELINES else DEFAULT_RESTART_KIND_S


def simulate(workload: str | Path, opts: Options) -> dict[str, Any]:
    """Run one workload under one policy; JCT and cluster statistics."""
    apps = load_applications(opts.data)
    jobs = read_workload(workload, apps, max_gpus_rule(opts.policy, opts.max_gpus))
    size = opts.nodes * opts.gpus_per_node
    for job in jobs:  # on a smaller cluster than the workload's, a job asks for all of it
        job.replicas = min(job.replicas, size)
        job.max_gpus = min(job.max_gpus, size)
    for job, kind in zip(jobs, assign_kinds(len(jobs), opts.mix, opts.seed), strict=True):
        job.kind = kind
    slots = [
        DeviceSlot(f"n{n:02d}g{g}", f"n{n:02d}")
        for n in range(opts.nodes)
        for g in range(opts.gpus_per_node)
    ]
    node_of = {s.id: int(s.node[1:]) for s in slots}
    tiresias = Tiresias() if opts.policy == "tiresias" else None
    allocate_s = 0.0
    calls = 0
    now = 0.0
    while any(j.completed is None for j in jobs):
        if now > LAST_TICK_S:
            raise RuntimeError(f"{opts.policy}: jobs still running after {LAST_TICK_S} s.")
        for job in jobs:
            job.advance(now, TICK_S)
        now += TICK_S
        active = [j for j in jobs if j.submitted <= now and j.completed is None]
        if not active:
            continue
        started = time.perf_counter()
        if tiresias is not None:
            nodes = tiresias.allocate(active, opts.nodes, opts.gpus_per_node, now)
            allocate_s += time.perf_counter() - started
            calls += 1
            for job in active:
                alloc = tuple(nodes[job.name])
                job.assign(alloc, _runs(alloc), now, opts.restart_s())
            continue
        result = allocate(
            _demands(active, opts),
            slots,
            _policy(opts.policy),
            now=now,
            min_rescale_interval=opts.min_rescale_interval,
            restart_interval=opts.restart_interval,
        )
        allocate_s += time.perf_counter() - started
        calls += 1
        for job in active:
            alloc = tuple(result[job.name])
            cost = change_cost(job, opts)
            job.assign(alloc, _runs(tuple(node_of[d] for d in alloc)), now, cost)
    return _summary(jobs, opts, workload, allocate_s, calls)


def change_cost(job: SimJob, opts: Options) -> float:
    """Seconds without progress that a change of `job`'s devices costs it: a restart under the
    baselines; under our policies a start (or resume), else the resize of its kind."""
    if opts.policy in BASELINES:
        return opts.restart_s()
    if not job.alloc:
        return opts.start_cost
    return opts.restart_s() if job.kind == "restart" else opts.rescale_cost


def parse_mix(text: str) -> dict[str, float]:
    """``elastic=0.5,restart=0.3,rigid=0.2`` as shares of `KINDS` summing to 1."""
    mix: dict[str, float] = {}
    for part in text.split(","):
        kind, _, share = part.partition("=")
        kind = kind.strip()
        if kind not in KINDS:
            raise ValueError(f"--mix: kinds are {', '.join(KINDS)}, got {kind!r}.")
        try:
            mix[kind] = float(share)
        except ValueError:
            raise ValueError(
                f"--mix: the share of {kind} must be a number, got {share!r}."
            ) from None
        if not mix[kind] >= 0:
            raise ValueError(f"--mix: the share of {kind} must be 0 or more, got {share}.")
    total = sum(mix.values())
    if not total > 0:
        raise ValueError("--mix: the shares must not all be 0.")
    return {k: v / total for k, v in mix.items()}


def assign_kinds(count: int, mix: dict[str, float] | None, seed: int) -> list[str]:
    """A kind for each of `count` jobs: each kind's share of `mix` exact up to one job (largest
    remainders, ties in `KINDS` order), which job gets which shuffled by `seed`, so that every
    policy sees the same jobs of each kind."""
    if not mix:
        return ["elastic"] * count
    exact = {k: mix.get(k, 0.0) * count for k in KINDS}
    counts = {k: math.floor(v) for k, v in exact.items()}
    short = count - sum(counts.values())
    for k in sorted(KINDS, key=lambda k: counts[k] - exact[k])[:short]:
        counts[k] += 1
    kinds = [k for k in KINDS for _ in range(counts[k])]
    random.Random(seed).shuffle(kinds)
    return kinds


def max_gpus_rule(policy: str, max_gpus: str) -> str:
    """``auto``: ``scalable`` under `goodput` (it stops at each job's knee by itself), else
    ``requested`` (work-conserving policies give devices up to the max, useful or not)."""
    if max_gpus != "auto":
        return max_gpus
    return "scalable" if policy == "goodput" else "requested"


def _policy(name: str) -> PolicyName:
    """`static` is `fair-share` with every job's min = max = num_replicas: FCFS, no preemption."""
    return "fair-share" if name == "static" else name  # type: ignore[return-value]


def _demands(active: Sequence[SimJob], opts: Options) -> list[JobDemand]:
    if opts.policy == "static":
        return [
            JobDemand(
                id=j.name,
                user=j.name,
                min_gpus=j.replicas,
                max_gpus=j.replicas,
                submitted=j.submitted,
                current=j.alloc,
            )
            for j in active
        ]
    return [_demand(j, opts) for j in active]


def _demand(job: SimJob, opts: Options) -> JobDemand:
    """What the job service would tell the policy of `job`, by its kind."""
    low, high = 1, job.max_gpus
    sizes = None
    if job.kind == "rigid":
        low = high = job.replicas
    elif job.kind == "restart":
        sizes = tuple(n for n in range(1, high + 1) if job.batch % n == 0)
    return JobDemand(
        id=job.name,
        user=job.name,
        min_gpus=low,
        max_gpus=high,
        submitted=job.submitted,
        current=job.alloc,
        last_rescale=job.last_change,
        remaining_steps=job.remaining_steps(),
        throughput=dict(job.measured),
        rigid=job.kind == "rigid",
        restart_cost_s=opts.restart_s() if job.kind == "restart" else None,
        sizes=sizes,
    )


def _runs(nodes: Sequence[int]) -> tuple[int, ...]:
    """Per-node GPU counts of an allocation given as the node of each GPU, in that order."""
    counts: list[int] = []
    for i, n in enumerate(nodes):
        if i and n == nodes[i - 1]:
            counts[-1] += 1
        else:
            counts.append(1)
    return tuple(counts)


def _percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default), without numpy on the hot path."""
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _summary(
    jobs: Sequence[SimJob], opts: Options, workload: str | Path, allocate_s: float, calls: int
) -> dict[str, Any]:
    jcts = [j.completed - j.submitted for j in jobs if j.completed is not None]
    makespan = max(j.completed for j in jobs if j.completed is not None)
    by_kind = {}
    for kind in KINDS:
        mine = [j for j in jobs if j.kind == kind and j.completed is not None]
        if mine:
            times = [j.completed - j.submitted for j in mine]  # type: ignore[operator]
            by_kind[kind] = {
                "jobs": len(mine),
                "avg_jct_s": sum(times) / len(times),
                "p50_jct_s": _percentile(times, 50),
                "p99_jct_s": _percentile(times, 99),
                "max_jct_s": max(times),
                "starts": sum(j.starts for j in mine),
                "rescales": sum(j.rescales for j in mine),
            }
    capacity = opts.nodes * opts.gpus_per_node * makespan
    return {
        "policy": opts.policy,
        "workload": str(workload),
        "jobs": len(jobs),
        "nodes": opts.nodes,
        "gpus_per_node": opts.gpus_per_node,
        "avg_jct_s": sum(jcts) / len(jcts),
        "p50_jct_s": _percentile(jcts, 50),
        "p99_jct_s": _percentile(jcts, 99),
        "max_jct_s": max(jcts),
        "makespan_s": makespan,
        "gpu_utilization": sum(j.busy_gpu_s for j in jobs) / capacity,
        "gpu_allocated": sum(j.held_gpu_s for j in jobs) / capacity,
        "starts": sum(j.starts for j in jobs),
        "rescales": sum(j.rescales for j in jobs),
        "rescale_cost_s": opts.rescale_cost,
        "start_cost_s": opts.start_cost,
        "max_gpus": max_gpus_rule(opts.policy, opts.max_gpus),
        "allocate_calls": calls,
        "allocate_mean_ms": 1000 * allocate_s / max(calls, 1),
        "restart_cost_s": opts.restart_s(),
        "restart_interval_s": opts.restart_interval,
        "mix": {k: opts.mix.get(k, 0.0) for k in KINDS} if opts.mix else {"elastic": 1.0},
        "seed": opts.seed,
        "by_kind": by_kind,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", choices=SIM_POLICIES, default="fair-share")
    ap.add_argument("--workload", help="workload CSV (default: workload-1 of the data)")
    ap.add_argument("--all", action="store_true", help="every policy on all 8 workloads")
    ap.add_argument("--policies", help="with --all: comma-separated subset of policies")
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--gpus-per-node", type=int, default=4)
    ap.add_argument(
        "--rescale-cost",
        type=float,
        default=DEFAULT_RESCALE_S,
        help="seconds an elastic job loses per change of its devices (default %(default)s)",
    )
    ap.add_argument(
        "--start-cost",
        type=float,
        default=DEFAULT_START_S,
        help="seconds an elastic job loses to start or resume (default %(default)s)",
    )
    ap.add_argument(
        "--restart-cost",
        type=float,
        default=None,
        help=f"seconds lost per restart: tiresias and static per (re)start (default: the "
        f"published {PUBLISHED_RESTART_S:g}), restart jobs per resize (default "
        f"{DEFAULT_RESTART_KIND_S:g})",
    )
    ap.add_argument(
        "--mix",
        type=_mix_arg,
        default=None,
        help="shares of the kinds of job, e.g. elastic=0.5,restart=0.3,rigid=0.2 (default: "
        "every job elastic)",
    )
    ap.add_argument("--seed", type=int, default=0, help="which jobs get which kind (--mix)")
    ap.add_argument(
        "--restart-interval",
        type=float,
        default=DEFAULT_RESTART_INTERVAL_S,
        help="seconds a restart job is not grown after a resize (default %(default)s)",
    )
    ap.add_argument(
        "--max-gpus",
        choices=("auto", "scalable", "requested"),
        default="auto",
        help="elastic jobs' max: as many GPUs as the batch splits over, num_replicas, or "
        "auto: num_replicas under fair-share and priority, scalable under goodput",
    )
    ap.add_argument("--min-rescale-interval", type=float, default=30.0)
    ap.add_argument("--data", help="Pollux data folder (default: $EDT_POLLUX_DATA or shared/)")
    ap.add_argument("--jobs", type=int, default=None, help="with --all: worker processes")
    ap.add_argument("--json", action="store_true", help="print JSON")
    args = ap.parse_args(argv)

    def options(policy: str) -> Options:
        return Options(
            policy=policy,
            nodes=args.nodes,
            gpus_per_node=args.gpus_per_node,
            rescale_cost=args.rescale_cost,
            start_cost=args.start_cost,
            restart_cost=args.restart_cost,
            max_gpus=args.max_gpus,
            min_rescale_interval=args.min_rescale_interval,
            data=args.data,
            mix=args.mix,
            seed=args.seed,
            restart_interval=args.restart_interval,
        )

    data = Path(args.data) if args.data else default_data_dir()
    if not args.all:
        workload = args.workload or str(data / "workloads" / "workload-1.csv")
        out = simulate(workload, options(args.policy))
        if args.json:
            print(json.dumps(out, indent=2))
        else:
            print(_format_one(out))
        return 0
    policies = args.policies.split(",") if args.policies else list(SIM_POLICIES)
    workloads = [data / "workloads" / f"workload-{i}.csv" for i in range(1, 9)]
    runs = [(w, options(p)) for p in policies for w in workloads]
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(_run, runs))
    table = _table(policies, results)
    if args.json:
        print(json.dumps(table, indent=2))
    else:
        print(_markdown(table))
    return 0


def _mix_arg(text: str) -> dict[str, float]:
    try:
        return parse_mix(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _run(item: tuple[Path, Options]) -> dict[str, Any]:
    return simulate(*item)


def _format_one(out: dict[str, Any]) -> str:
    return "\n".join(f"{k}: {v}" for k, v in out.items())


def _table(policies: Sequence[str], results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Average JCT per policy and workload, with means and the calibration error of tiresias."""
    rows: dict[str, Any] = {}
    for i, policy in enumerate(policies):
        runs = results[8 * i : 8 * i + 8]
        avg = [r["avg_jct_s"] for r in runs]
        rows[policy] = {
            "avg_jct_s": avg,
            "mean_avg_jct_s": sum(avg) / len(avg),
            "mean_p99_jct_s": sum(r["p99_jct_s"] for r in runs) / len(runs),
            "mean_makespan_s": sum(r["makespan_s"] for r in runs) / len(runs),
            "mean_gpu_utilization": sum(r["gpu_utilization"] for r in runs) / len(runs),
            "allocate_mean_ms": sum(r["allocate_mean_ms"] for r in runs) / len(runs),
            "mean_avg_jct_s_by_kind": {
                kind: sum(r["by_kind"][kind]["avg_jct_s"] for r in runs) / len(runs)
                for kind in KINDS
                if all(kind in r["by_kind"] for r in runs)
            },
        }
        if policy == "tiresias":
            rows[policy]["error_vs_published"] = [
                a / p - 1 for a, p in zip(avg, PUBLISHED["tiresias"], strict=True)
            ]
    for name, avg in PUBLISHED.items():
        rows[f"published {name}"] = {"avg_jct_s": avg, "mean_avg_jct_s": sum(avg) / len(avg)}
    return {"workloads": [f"workload-{i}" for i in range(1, 9)], "policies": rows}


def _markdown(table: dict[str, Any]) -> str:
    head = "| policy | " + " | ".join(str(i) for i in range(1, 9)) + " | mean |"
    lines = [head, "|---" * 10 + "|"]
    for name, row in table["policies"].items():
        cells = " | ".join(f"{v:.1f}" for v in row["avg_jct_s"])
        lines.append(f"| {name} | {cells} | {row['mean_avg_jct_s']:.1f} |")
    err = table["policies"].get("tiresias", {}).get("error_vs_published")
    if err:
        cells = " | ".join(f"{100 * e:+.2f}%" for e in err)
        lines.append(f"| tiresias vs published | {cells} | |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
