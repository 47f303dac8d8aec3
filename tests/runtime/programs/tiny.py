"""A tiny float64 job for the runtime tests: BatchNorm, Dropout, Adam, a metric, a scheduler.

Run as a worker program (``python -m jupyter_edt.runtime.worker tiny.py --epochs 3 ...``) or
imported (``build(...)``) for a plain-process run. ``--record DIR`` makes the training set append
every index it serves to ``DIR/served-<pid>.txt``. ``--tweak`` changes hyperparameters on some
workers only (``Tweak``), ``--conflict`` changes ``lr`` differently on every worker,
``--begin-lr`` sets the starting ``lr`` in ``on_train_begin``, which a joiner runs too.
``--linger DIR``: after training, the worker says so (``DIR/trained-<worker>``) and waits for
``DIR/go`` before it exits, as a program that goes on after ``fit`` does.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

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


def callbacks(  # type: ignore[type-arg]
    tweak: bool = False, conflict: bool = False, begin_lr: bool = False
) -> list:
    from jupyter_edt.runtime import Callback

    class Tweak(Callback):
        """Rank 0 halves ``lr`` at each epoch's end; the last rank changes Adam's ``betas`` and
        ``weight_decay`` after an epoch's second-to-last step, so that the next, partial step
        (3 micro-batches) leaves that rank without a micro-batch on 4 workers. On one worker,
        both are the same rank."""

        def on_step_end(self, step: int, logs: dict) -> None:  # type: ignore[type-arg]
            t = self.trainer
            if t.rank == t.world_size - 1 and step == 3:
                group = t.optimizer.param_groups[0]
                group["betas"] = (0.85 - 0.1 * logs["epoch"], 0.99)
                group["weight_decay"] = 0.01 * (1 + logs["epoch"])

        def on_epoch_end(self, epoch: int, logs: dict) -> None:  # type: ignore[type-arg]
            if self.trainer.rank == 0:
                self.trainer.optimizer.param_groups[0]["lr"] *= 0.5

    class Conflict(Callback):
        def on_epoch_end(self, epoch: int, logs: dict) -> None:  # type: ignore[type-arg]
            self.trainer.optimizer.param_groups[0]["lr"] = 0.001 * (1 + self.trainer.rank)

    class Begin(Callback):
        """Sets the starting lr, on every worker: a joiner runs it too, when it joins."""

        def on_train_begin(self) -> None:
            self.trainer.optimizer.param_groups[0]["lr"] = 0.02

    chosen = [(begin_lr, Begin), (tweak, Tweak), (conflict, Conflict)]
    return [cls() for on, cls in chosen if on]


def build(  # type: ignore[no-untyped-def]
    record: str | None = None,
    lr: float = 0.01,
    tweak: bool = False,
    conflict: bool = False,
    device: str = "auto",
    begin_lr: bool = False,
):
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
        callbacks=callbacks(tweak, conflict, begin_lr),
        device=device,
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--micro", type=int, default=3)
    ap.add_argument("--max-gpus", type=int, default=4)
    ap.add_argument("--checkpoint-every", type=int, default=1)
    ap.add_argument("--record", default=None)
    ap.add_argument("--tweak", action="store_true")
    ap.add_argument("--conflict", action="store_true")
    ap.add_argument("--begin-lr", action="store_true")
    ap.add_argument("--linger", default=None)
    args = ap.parse_args()
    trainer = build(args.record, tweak=args.tweak, conflict=args.conflict, begin_lr=args.begin_lr)
    trainer.fit(
        args.epochs,
        args.batch,
        args.max_gpus,
        checkpoint_every=args.checkpoint_every,
        micro_batch_size=args.micro,
    )
    if args.linger:
        linger = Path(args.linger)
        (linger / f"trained-{os.environ['EDT_WORKER_ID']}").touch()
        deadline = time.monotonic() + 60
        while not (linger / "go").exists() and time.monotonic() < deadline:
            time.sleep(0.05)


if __name__ == "__main__":
    main()
