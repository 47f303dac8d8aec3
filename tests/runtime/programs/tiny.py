"""A tiny float64 job for the runtime tests: BatchNorm, Dropout, Adam, a metric, a scheduler.

Run as a worker program (``python -m jupyter_edt.runtime.worker tiny.py --epochs 3 ...``) or
imported (``build(...)``) for a plain-process run. ``--record DIR`` makes the training set append
every index it serves to ``DIR/served-<pid>.txt``.
"""

from __future__ import annotations

import argparse
import os

import torch
from torch import nn
from torch.utils.data import Dataset

N_TRAIN, N_TEST, N_IN = 56, 20, 6


class Synthetic(Dataset):
    """A fixed classification set; optionally logs each index it serves."""

    def __init__(self, n: int, seed: int, record: str | None = None) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, N_IN, generator=gen, dtype=torch.float64)
        self.y = (self.x[:, 0] + 0.5 * self.x[:, 1] > 0).long()
        self.record = record

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.record:
            with open(os.path.join(self.record, f"served-{os.getpid()}.txt"), "a") as f:
                f.write(f"{i}\n")
        return self.x[i], self.y[i]


def accuracy(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (out.argmax(1) == y).double().mean()


def build(record: str | None = None, lr: float = 0.01):  # type: ignore[no-untyped-def]
    from jupyter_edt.runtime import Trainer

    torch.manual_seed(1234)
    model = nn.Sequential(
        nn.Linear(N_IN, 16),
        nn.BatchNorm1d(16),
        nn.ReLU(),
        nn.Dropout(0.3),
        nn.Linear(16, 2),
    ).double()
    return Trainer(
        model,
        lambda: (Synthetic(N_TRAIN, 1, record), Synthetic(N_TEST, 2)),
        nn.functional.cross_entropy,
        lambda params: torch.optim.Adam(params, lr=lr),
        metrics={"acc": accuracy},
        lr_scheduler=lambda opt: torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.9),
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--micro", type=int, default=3)
    ap.add_argument("--max-gpus", type=int, default=4)
    ap.add_argument("--checkpoint-every", type=int, default=1)
    ap.add_argument("--record", default=None)
    args = ap.parse_args()
    trainer = build(args.record)
    trainer.fit(
        args.epochs,
        args.batch,
        args.max_gpus,
        checkpoint_every=args.checkpoint_every,
        micro_batch_size=args.micro,
    )


if __name__ == "__main__":
    main()
