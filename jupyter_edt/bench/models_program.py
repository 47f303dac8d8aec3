"""The programs `jupyter_edt.bench.models` measures, each side written as its user would.

``--side trainer``: a job's worker program (``LocalController`` runs it through
``jupyter_edt.runtime.worker``): the model, its datasets and ``Trainer.fit``.
``--side ddp``: the same model for torchrun (``python -m torch.distributed.run --standalone
--nproc_per_node W``): ``DistributedDataParallel``, a ``DataLoader`` over a
``DistributedSampler``, gradient accumulation under ``no_sync`` when there are fewer workers
than micro-batches in the global batch.

Models: ``resnet18``, the CIFAR ResNet-18 (BasicBlock, [2, 2, 2, 2], a 3x3 stem for 32x32
images) on made-up uint8 images, augmented in ``__getitem__`` (random crop with 4 pixels of
padding, random horizontal flip, from torch's global RNG, then normalised), cross entropy, SGD
with momentum; ``gpt``, a GPT-2 of two layers from ``transformers.GPT2Config`` (never
downloaded) on made-up tokens, batches ``{"input_ids", "labels"}``, the model's own loss, AdamW.
``--augment-rounds K`` (K > 1) makes the image side data-bound: each sample is the mean of K
augmented views.

Both sides note ``time.perf_counter()`` at the end of every optimizer step (the device
synchronised at the end of the warm-up and of the last step), and each process writes
``<report>/<side>-<rank>.json`` at the end: those times (and its CPU time at the same
points), its peak memory (CUDA:
``max_memory_allocated``; CPU: the process's ``ru_maxrss``), its thread count and the model's
size. Nothing imports transformers before a GPT is built. With ``BENCH_MODELS_PROFILE=DIR`` each
process also writes its cProfile statistics to ``DIR/<side>-<arch>[-data-bound]-<rank>.prof``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

ARCHS = ("resnet18", "gpt")
CLASSES = 10
PAD = 4
MEAN = torch.tensor([0.4914, 0.4822, 0.4465]).view(3, 1, 1)
STD = torch.tensor([0.2470, 0.2435, 0.2616]).view(3, 1, 1)
#: a folder: each process writes its cProfile statistics there (one file per run and rank)
PROFILE_ENV = "BENCH_MODELS_PROFILE"
GPT = {"n_layer": 2, "n_head": 2, "n_embd": 64, "n_positions": 64, "vocab_size": 512}


# -- models -------------------------------------------------------------------------------------
class BasicBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut = nn.Sequential()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNet18(nn.Module):
    """ResNet-18 for 32x32 images: a 3x3 stem, no max-pool, four stages of two blocks."""

    def __init__(self, classes: int = CLASSES) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64))
        layers, c_in = [], 64
        for c_out, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers += [BasicBlock(c_in, c_out, stride), BasicBlock(c_out, c_out, 1)]
            c_in = c_out
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(512, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.layers(F.relu(self.stem(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(out, 1), 1))


def build_model(arch: str) -> nn.Module:
    """The same initial weights on both sides and every worker."""
    torch.manual_seed(0)
    if arch == "resnet18":
        return ResNet18()
    from transformers import GPT2Config, GPT2LMHeadModel  # only here: see the docstring

    return GPT2LMHeadModel(GPT2Config(**GPT, bos_token_id=0, eos_token_id=0))


def optimizer_factory(arch: str) -> Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]:
    if arch == "resnet18":
        return lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=5e-4)
    return lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=0.01)


# -- data ---------------------------------------------------------------------------------------
def augment(img: torch.Tensor) -> torch.Tensor:
    """A random crop of the image padded by `PAD` pixels, flipped half the time (uint8)."""
    size = img.shape[-1]
    padded = F.pad(img, (PAD, PAD, PAD, PAD))
    dy, dx = torch.randint(0, 2 * PAD + 1, (2,)).tolist()
    out = padded[:, dy : dy + size, dx : dx + size]
    return out.flip(-1) if float(torch.rand(())) < 0.5 else out


class Images(Dataset):
    """Made-up 3 x size x size uint8 images and labels from `seed`; each item augmented with
    torch's global RNG (so a step's samples depend only on how it is seeded), normalised."""

    def __init__(self, n: int, size: int, seed: int, rounds: int = 1) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randint(0, 256, (n, 3, size, size), dtype=torch.uint8, generator=g)
        self.y = torch.randint(0, CLASSES, (n,), generator=g)
        self.rounds = rounds

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        img = self.x[i]
        if self.rounds == 1:
            view = augment(img).float()
        else:  # data-bound: the mean of `rounds` augmented views
            view = torch.zeros(img.shape)
            for _ in range(self.rounds):
                view += augment(img)
            view /= self.rounds
        return (view / 255.0 - MEAN) / STD, self.y[i]


class Tokens(Dataset):
    """Made-up token sequences from `seed`; a sample is ``{"input_ids", "labels"}``."""

    def __init__(self, n: int, seq: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, GPT["vocab_size"], (n, seq), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def datasets(cfg: argparse.Namespace) -> tuple[Dataset, Dataset]:
    """(train, test): one epoch of exactly ``warmup + steps`` global batches."""
    n = (cfg.warmup + cfg.steps) * cfg.global_batch
    if cfg.arch == "resnet18":
        return Images(n, cfg.image_size, 1, cfg.augment_rounds), Images(
            cfg.micro, cfg.image_size, 2
        )
    return Tokens(n, cfg.seq_len, 1), Tokens(cfg.micro, cfg.seq_len, 2)


# -- measuring ----------------------------------------------------------------------------------
class Clock:
    """`perf_counter` at the end of each optimizer step; the device synchronised at the end of
    the warm-up and of the last step, so the measured interval holds all of its work."""

    def __init__(self, cfg: argparse.Namespace, device: torch.device) -> None:
        self.cfg, self.device = cfg, device
        self.times: list[float] = []
        self.cpu_times: list[float] = []  # the process's CPU time (all its threads) alike

    def tick(self) -> None:
        if self.device.type == "cuda" and len(self.times) + 1 in (
            self.cfg.warmup,
            self.cfg.warmup + self.cfg.steps,
        ):
            torch.cuda.synchronize(self.device)
        self.times.append(time.perf_counter())
        self.cpu_times.append(time.process_time())


def report(cfg: argparse.Namespace, clock: Clock, model: nn.Module, **extra: Any) -> None:
    """This process's figures, in ``<report>/<side>-<rank>.json``."""
    if clock.device.type == "cuda":
        peak, kind = torch.cuda.max_memory_allocated(clock.device), "cuda_max_memory_allocated"
    else:  # kilobytes on Linux
        peak, kind = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "ru_maxrss"
    rank = int(os.environ.get("RANK", "0"))
    out = {
        "side": cfg.side,
        "rank": rank,
        "pid": os.getpid(),
        "device": str(clock.device),
        "threads": torch.get_num_threads(),
        "params": sum(p.numel() for p in model.parameters()),
        "times": clock.times,
        "cpu_times": clock.cpu_times,
        "peak_mem_mb": peak / 2**20,
        "peak_mem_kind": kind,
        **extra,
    }
    path = Path(cfg.report)
    path.mkdir(parents=True, exist_ok=True)
    (path / f"{cfg.side}-{rank}.json").write_text(json.dumps(out))


# -- the two sides ------------------------------------------------------------------------------
def trainer_side(cfg: argparse.Namespace) -> None:
    """A job's worker: ``Trainer.fit`` for one epoch, one micro-batch per worker per step at the
    largest worker count."""
    from jupyter_edt.runtime import Callback, Trainer

    class Ticks(Callback):
        def on_step_end(self, step: int, logs: dict[str, Any]) -> None:
            clock.tick()

    model = build_model(cfg.arch)
    train, test = datasets(cfg)
    trainer = Trainer(
        model,
        lambda: (train, test),
        nn.functional.cross_entropy if cfg.arch == "resnet18" else None,
        optimizer_factory(cfg.arch),
        callbacks=[Ticks()],
        precision=cfg.precision,
    )
    clock = Clock(cfg, trainer.device)
    trainer.fit(
        1,
        cfg.global_batch,
        cfg.max_workers,
        checkpoint_every=0,
        micro_batch_size=cfg.micro,
        validate_every=0,
        seed=0,
        num_workers=cfg.num_workers,
    )
    report(cfg, clock, model)


def ddp_side(cfg: argparse.Namespace) -> None:
    """As a user writes it for torchrun."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    torch.set_num_threads(cfg.threads)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ["LOCAL_RANK"])
    cuda = cfg.device == "cuda"  # not is_available(): a forked worker must not touch CUDA
    device = torch.device(f"cuda:{local}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo")
    model = build_model(cfg.arch).to(device)
    ddp = DistributedDataParallel(model, device_ids=[local] if cuda else None)
    opt = optimizer_factory(cfg.arch)(ddp.parameters())
    train, _ = datasets(cfg)
    sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(
        train,
        batch_size=cfg.micro,
        sampler=sampler,
        num_workers=cfg.num_workers,
        pin_memory=cuda,
        drop_last=True,
    )
    accumulation = cfg.global_batch // (cfg.micro * world)
    autocast = (
        torch.autocast(device.type, dtype=torch.bfloat16)
        if cfg.precision == "bf16"
        else contextlib.nullcontext()
    )
    clock = Clock(cfg, device)
    batches = iter(loader)
    for _ in range(cfg.warmup + cfg.steps):
        for j in range(accumulation):
            batch = next(batches)
            sync = j == accumulation - 1
            with contextlib.nullcontext() if sync else ddp.no_sync():
                with autocast:
                    if isinstance(batch, dict):
                        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
                        loss = ddp(**batch).loss
                    else:
                        x, y = (t.to(device, non_blocking=True) for t in batch)
                        loss = F.cross_entropy(ddp(x), y)
                (loss / accumulation).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        clock.tick()
    report(cfg, clock, model)
    dist.barrier()
    dist.destroy_process_group()


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--side", choices=["trainer", "ddp"], required=True)
    ap.add_argument("--arch", choices=ARCHS, required=True)
    ap.add_argument("--report", required=True, help="folder for each process's figures")
    ap.add_argument("--warmup", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True, help="measured steps")
    ap.add_argument("--global-batch", type=int, required=True)
    ap.add_argument("--micro", type=int, required=True)
    ap.add_argument("--max-workers", type=int, required=True)
    ap.add_argument("--num-workers", type=int, default=0, help="DataLoader worker processes")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the ddp side)")
    ap.add_argument("--image-size", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--augment-rounds", type=int, default=1)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="the ddp side's")
    ap.add_argument("--precision", choices=["32", "bf16"], default="32")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    cfg = parse(argv)
    side = trainer_side if cfg.side == "trainer" else ddp_side
    where = os.environ.get(PROFILE_ENV)
    if not where:
        side(cfg)
        return 0
    import cProfile

    profile = cProfile.Profile()
    profile.runcall(side, cfg)
    Path(where).mkdir(parents=True, exist_ok=True)
    run = f"{cfg.side}-{cfg.arch}{'-data-bound' if cfg.augment_rounds > 1 else ''}"
    profile.dump_stats(Path(where) / f"{run}-{os.environ.get('RANK', '0')}.prof")
    return 0


if __name__ == "__main__":
    sys.exit(main())
