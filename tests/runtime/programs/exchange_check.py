"""One process of the exchange test: ``exchange_check.py PORT WORKER CONFIGS_JSON``.

For each configuration ``{"gen", "world", "micro_batches", "bucket_bytes", "skip", "tagged"}``
the first ``world`` workers form generation ``gen`` of a real gloo group (``ElasticGroup``) and
sum float64 per-micro-batch gradients with ``OrderedExchange`` as the trainer does: micro-batch
``j`` on rank ``j % W``, round by round (one rank alone accumulates in place from zero), and the
gradient hooks are stood in for by ``grad_ready`` calls in backward order (parameter ``skip``
never reports, like one without a gradient). ``tagged: false`` takes the path of NCCL groups
(every transfer posted in one order, no finishing thread). Prints one JSON line per
configuration: whether the total and the folded per-micro-batch values equal a one-device sum
bit for bit, and whether each rank's control values came back as their maximum over every rank
(ranks without a micro-batch included).
"""

from __future__ import annotations

import json
import sys

import torch

from jupyter_edt.runtime import partition as part
from jupyter_edt.runtime.exchange import OrderedExchange
from jupyter_edt.runtime.group import ElasticGroup, JobContext

SIZES = [7, 300, 1, 64, 129, 5]  # parameter sizes; the flat buffer holds them in this order
AUX, N_SUM = 4, 3


def gradient(j: int) -> torch.Tensor:
    """Micro-batch ``j``'s gradient: magnitudes spread so that the addition order shows."""
    gen = torch.Generator().manual_seed(1000 + j)
    g = torch.randn(sum(SIZES), generator=gen, dtype=torch.float64)
    return g * torch.pow(10.0, torch.randint(-8, 9, g.shape, generator=gen)).double()


def aux(j: int) -> torch.Tensor:
    return gradient(j)[:N_SUM] / 7


def control(rank: int) -> list[float]:
    """The highest value comes from the last rank, which may have no micro-batch."""
    return [float(rank)]


def run(group: ElasticGroup, cfg: dict[str, int]) -> dict[str, object]:
    spans, off = [], 0
    for n in SIZES:
        spans.append((off, off + n))
        off += n
    flat = torch.zeros(off, dtype=torch.float64)
    group.tagged = bool(cfg["tagged"])
    ex = OrderedExchange(group, flat, spans, cfg["bucket_bytes"])
    m = cfg["micro_batches"]
    mine = part.deal(m, group.world_size)[group.rank]
    ex.start(m)
    for q, j in enumerate(mine):
        ex.begin_round(q)  # waits until the previous round's sums have read flat
        if q and ex.collective:  # each round's gradient on its own, as the trainer's new_part
            flat.zero_()
        flat += gradient(j)  # what autograd's accumulation does
        for i in reversed(range(len(SIZES))):
            if i != cfg["skip"]:
                ex.grad_ready(i)
        ex.end_round()
    parts = [torch.cat([aux(j), torch.zeros(AUX - N_SUM).double()]) for j in mine]
    parts = parts or [torch.zeros(AUX).double()]  # a rank without a micro-batch
    parts[0][N_SUM:] = torch.tensor(control(group.rank))
    folded = group.reduce(m, ex, parts, AUX, N_SUM)
    want = torch.zeros(off, dtype=torch.float64)
    want_aux = torch.cat([aux(0), torch.tensor(control(group.world_size - 1)).double()])
    for j in range(m):
        want += gradient(j)
        if j:
            want_aux[:N_SUM] += aux(j)
    return {
        **cfg,
        "rank": group.rank,
        "buckets": len(ex.buckets),
        "exact": torch.equal(flat, want),
        "max_abs_diff": float((flat - want).abs().max()),
        "aux_exact": torch.equal(folded, want_aux),
    }


def main() -> None:
    port, worker, configs = int(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
    group = ElasticGroup(JobContext("127.0.0.1", port, worker, None, None, timeout_s=60))
    index = int(worker[1:])
    for cfg in configs:
        if index >= cfg["world"]:
            continue
        group.form(cfg["gen"], tuple(f"w{i}" for i in range(cfg["world"])))
        print(json.dumps(run(group, cfg)), flush=True)
    group.close()


if __name__ == "__main__":
    main()
