"""Allocation micro-benchmark: ``python -m jupyter_edt.bench.allocate --json``.

Times one `allocate` call per policy on 1,000 jobs and 512 devices (128 nodes x 4), the size
the issue sets a 50 ms budget for. The jobs are what a busy shared cluster looks like in
steady state: 50 users, minimums of 1 or 2, maximums of 1 to 16, three priorities, and the
devices held from the previous decision (taken from an allocation before a fifth of the jobs
were submitted and some finished), so that keeping, shrinking, growing and admitting all
happen. For `goodput` every running job reports remaining steps and throughput at 1 to 3
counts. Prints the median and the worst of ``--repeat`` calls, in milliseconds.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from dataclasses import replace

from jupyter_edt.scheduling.policy import POLICY_NAMES, DeviceSlot, JobDemand, allocate

BUDGET_MS = 50.0


def scenario(jobs: int = 1000, nodes: int = 128, per_node: int = 4, seed: int = 0):
    """(jobs, devices) of a cluster in steady state; deterministic for a seed."""
    rnd = random.Random(seed)
    devices = [DeviceSlot(f"n{n}g{g}", f"n{n}") for n in range(nodes) for g in range(per_node)]
    demands = []
    gone = jobs // 10  # submitted earlier and finished since: their devices are free again
    for k in range(jobs + gone):
        low = rnd.choice((1, 1, 1, 2))
        high = max(low, rnd.choice((1, 2, 4, 4, 8, 8, 16)))
        curve = {}
        for n in sorted(rnd.sample(range(1, high + 1), min(high, rnd.randint(1, 3)))):
            curve[n] = n ** rnd.uniform(0.5, 0.95) * 10.0
        demands.append(
            JobDemand(
                id=f"job{k:04d}",
                user=f"user{rnd.randrange(50):02d}",
                min_gpus=low,
                max_gpus=high,
                priority=rnd.choice((0, 0, 0, 1, 2)),
                submitted=float(k),
                remaining_steps=rnd.uniform(100, 100_000),
                throughput=curve,
            )
        )
    # Devices held now: what the policy gave the earlier 80% of the jobs, less some finished.
    earlier = demands[: int(0.8 * len(demands))]
    before = allocate(earlier, devices, "fair-share")
    finished = {j.id for j in rnd.sample(earlier, gone)}
    demands = [
        replace(j, current=tuple(before.get(j.id, ())), last_rescale=0.0)
        for j in demands
        if j.id not in finished
    ]
    return demands, devices


def measure(policy: str, repeat: int) -> dict[str, float]:
    jobs, devices = scenario()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        allocate(jobs, devices, policy, now=100.0, min_rescale_interval=30.0)  # type: ignore[arg-type]
        times.append(1000 * (time.perf_counter() - start))
    return {"median_ms": statistics.median(times), "max_ms": max(times), "jobs": len(jobs)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args(argv)
    out: dict[str, object] = {"devices": 512, "budget_ms": BUDGET_MS}
    for policy in POLICY_NAMES:
        out[policy] = measure(policy, args.repeat)
    out["within_budget"] = all(
        out[p]["median_ms"] <= BUDGET_MS  # type: ignore[index]
        for p in POLICY_NAMES
    )
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for policy in POLICY_NAMES:
            r = out[policy]
            print(f"{policy}: median {r['median_ms']:.1f} ms, max {r['max_ms']:.1f} ms")  # type: ignore[index]
    return 0


if __name__ == "__main__":
    sys.exit(main())
