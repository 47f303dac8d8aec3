"""A job for the Trainer's features (issue 26), run as a worker program or built in-process.

``--model mlp`` (float32, Dropout, a (x, y) dataset with random augmentation: noise from torch's
RNG, a sign flip from Python's) or ``--model gpt`` (a tiny GPT-2 from its config, dict batches,
the model's own loss: ``loss_fn=None``). ``--precision``, ``--clip-norm``, ``--clip-value``,
``--num-workers`` are the Trainer's and fit's; ``--compile BACKEND`` compiles the model.
``--overflow`` makes one sample of the training set overflow fp16 (its inputs times 1e6): the
step that holds it must be skipped on every worker.
"""

from __future__ import annotations

import argparse
import random
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

N_TRAIN, N_TEST, N_IN, SEQ, VOCAB = 40, 12, 8, 8, 64
OVERFLOWING = 5  # the sample that overflows fp16 with --overflow


class Augmented(Dataset):
    """(x, y) with randomness in every read: noise and a random sign, as augmentation has."""

    def __init__(self, n: int, seed: int, overflow: bool = False) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, N_IN, generator=gen)
        self.y = (self.x[:, 0] > 0).long()
        self.overflow = overflow

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.x[i] + 0.1 * torch.randn(N_IN)
        if random.random() < 0.5:
            x = -x
        if self.overflow and i == OVERFLOWING:
            x = x * 1e6
        return x, self.y[i]


class Tokens(Dataset):
    """Token sequences as dicts, labels included: a Hugging Face model returns its loss."""

    def __init__(self, n: int, seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, VOCAB, (n, SEQ), generator=gen)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def accuracy(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (out.argmax(1) == y).float().mean()


def mlp() -> nn.Module:
    torch.manual_seed(7)
    return nn.Sequential(nn.Linear(N_IN, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 2))


def gpt() -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(7)
    config = GPT2Config(
        vocab_size=VOCAB, n_positions=SEQ, n_embd=16, n_layer=1, n_head=2, resid_pdrop=0.1
    )
    return GPT2LMHeadModel(config)


def build(args: argparse.Namespace) -> Any:
    from jupyter_edt.runtime import Trainer

    if args.model == "gpt":
        model = gpt()
        datasets = lambda: (Tokens(N_TRAIN, 1), Tokens(N_TEST, 2))  # noqa: E731
        loss_fn, metrics = None, {"tokens": lambda out, batch: float(batch["input_ids"].numel())}
    else:
        model = mlp()
        datasets = lambda: (  # noqa: E731
            Augmented(N_TRAIN, 1, args.overflow),
            Augmented(N_TEST, 2),
        )
        loss_fn, metrics = nn.functional.cross_entropy, {"acc": accuracy}
    if args.compile:
        model = torch.compile(model, backend=args.compile)
    return Trainer(
        model,
        datasets,
        loss_fn,
        lambda params: torch.optim.AdamW(params, lr=0.01),
        metrics=metrics,
        precision=args.precision,
        clip_grad_norm=args.clip_norm,
        clip_grad_value=args.clip_value,
    )


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=("mlp", "gpt"), default="mlp")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--micro", type=int, default=2)
    ap.add_argument("--precision", default="32")
    ap.add_argument("--clip-norm", type=float, default=None)
    ap.add_argument("--clip-value", type=float, default=None)
    ap.add_argument("--num-workers", type=int, default=0)
    ap.add_argument("--compile", default=None, help="torch.compile's backend")
    ap.add_argument("--overflow", action="store_true")
    return ap


def main() -> None:
    args = parser().parse_args()
    build(args).fit(
        args.epochs,
        args.batch,
        4,
        checkpoint_every=0,
        micro_batch_size=args.micro,
        num_workers=args.num_workers,
    )


if __name__ == "__main__":
    main()
