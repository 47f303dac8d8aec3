"""Global batches, micro-batches and their dealing to workers: pure functions.

The rule that makes training independent of the worker count (ARCHITECTURE.md invariant 1):

- Epoch ``e`` visits the training set in the order ``epoch_permutation(n, seed, e)``.
- Global step ``s`` of the epoch takes the next ``effective_batch_size`` indices; the last global
  batch of an epoch is smaller when ``n`` is not a multiple of it (no sample is dropped).
- A global batch is cut into micro-batches of ``micro_batch_size`` indices, in order; the last one
  is smaller when the global batch is not a multiple of it. The cut never depends on the worker
  count, so every micro-batch is a fixed set of samples.
- Micro-batch ``j`` of a global batch of ``G`` samples contributes its mean loss times
  ``len_j / G``; the sum over micro-batches is the mean loss over the global batch, exactly what
  one device would minimise.
- Micro-batches are dealt to the ``W`` workers in turn: micro-batch ``j`` runs on worker ``j % W``
  (the first ``M % W`` workers get one more); workers beyond ``M`` get none and only receive the
  result. In turn, not in blocks, so that the workers compute micro-batches ``qW .. qW+W-1`` at
  the same time and the order-fixed sum (``exchange.py``) folds them round by round.
- Micro-batch ``j`` runs under the RNG seed ``micro_batch_seed(seed, epoch, step, j)``.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

import torch

__all__ = [
    "deal",
    "default_micro_batch_size",
    "epoch_permutation",
    "global_batch",
    "micro_batch_seed",
    "micro_batches",
    "steps_per_epoch",
]


def _mix(*parts: int) -> int:
    """A 63-bit seed from integers, stable across processes and Python versions."""
    digest = hashlib.blake2b(",".join(str(p) for p in parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def epoch_permutation(n: int, seed: int, epoch: int) -> list[int]:
    """The order in which epoch ``epoch`` visits ``n`` samples."""
    gen = torch.Generator().manual_seed(_mix(seed, epoch, 0x5EED))
    return torch.randperm(n, generator=gen).tolist()


def steps_per_epoch(n: int, effective_batch_size: int) -> int:
    """Global steps in one epoch of ``n`` samples (the last may be a partial batch)."""
    return math.ceil(n / effective_batch_size)


def global_batch(perm: Sequence[int], step: int, effective_batch_size: int) -> list[int]:
    """Sample indices of global step ``step`` of an epoch whose order is ``perm``."""
    start = step * effective_batch_size
    if step < 0 or start >= len(perm):
        raise IndexError(f"step {step} is outside the epoch")
    return list(perm[start : start + effective_batch_size])


def micro_batches(batch: Sequence[int], micro_batch_size: int) -> list[list[int]]:
    """Cut a global batch into fixed micro-batches, in order."""
    m = micro_batch_size
    return [list(batch[i : i + m]) for i in range(0, len(batch), m)]


def deal(num_micro_batches: int, world_size: int) -> list[range]:
    """The micro-batch indices of each rank, in the order it computes them."""
    if world_size < 1:
        raise ValueError("world_size must be >= 1")
    return [range(r, num_micro_batches, world_size) for r in range(world_size)]


def micro_batch_seed(seed: int, epoch: int, step: int, index: int) -> int:
    """RNG seed of one micro-batch: Dropout and augmentation do not depend on placement."""
    return _mix(seed, epoch, step, index)


def default_micro_batch_size(effective_batch_size: int, max_gpus: int) -> int:
    """One micro-batch per worker at the job's largest allocation: fixed for the whole job."""
    return math.ceil(effective_batch_size / max_gpus)
