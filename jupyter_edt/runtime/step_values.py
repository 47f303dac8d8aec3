"""The values a training step folds over its workers besides the gradients, and where each sits.

Each micro-batch a worker computes gives one float64 vector (``StepLayout``): its weighted
loss, metrics and model buffers, which the group's ``reduce`` sums in micro-batch order, then
room for the worker's control values (``StepControl``), of which ``reduce`` keeps the maximum
over the workers. One vector per micro-batch and one collective per step carry them all: the
control values cost no message of their own. Their order is written here once; the trainer
packs and unpacks them through this module only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import astuple, dataclass, fields

import torch

__all__ = ["StepControl", "StepLayout"]


@dataclass(frozen=True)
class StepControl:
    """A worker's control values in a step's reduction; after it, their maximum over the workers.

    Every value is a whole number below 2**53, so float64 carries it exactly.
    """

    generation: int  # the newest generation this worker has seen ordered
    checkpoint_requests: int  # checkpoint requests this worker has seen ordered
    hp_fingerprint: int  # fingerprint of its optimizer hyperparameters (see hyper.py)
    minus_hp_fingerprint: int  # its negation: the maximum of it is minus the lowest fingerprint

    @classmethod
    def of(cls, generation: int, checkpoint_requests: int, hp_fingerprint: int) -> StepControl:
        return cls(generation, checkpoint_requests, hp_fingerprint, -hp_fingerprint)

    @classmethod
    def count(cls) -> int:
        return len(fields(cls))

    def pack(self, out: torch.Tensor) -> None:
        """Write the values into ``out``, a host float64 tensor of :meth:`count` entries."""
        out.numpy()[:] = astuple(self)

    @classmethod
    def unpack(cls, values: Sequence[float]) -> StepControl:
        """The values :meth:`pack` wrote (or their maximum over the workers)."""
        return cls(*(int(v) for v in values))

    @property
    def hyperparameters_agree(self) -> bool:
        """Whether every worker had the same hyperparameters (highest fingerprint == lowest)."""
        return self.hp_fingerprint == -self.minus_hp_fingerprint


class StepLayout:
    """Where each value sits in a step's per-micro-batch vector: the loss, then the metrics,
    then the model's buffers flattened (these ``n_sum`` entries are summed), then the control
    values (their maximum)."""

    LOSS = 0

    def __init__(self, n_metrics: int, n_buffers: int) -> None:
        self.n_metrics = n_metrics
        self.metrics = slice(1, 1 + n_metrics)
        self.n_sum = 1 + n_metrics + n_buffers
        self.buffers = slice(1 + n_metrics, self.n_sum)
        self.size = self.n_sum + StepControl.count()
        self.control = slice(self.n_sum, self.size)

    def metric(self, i: int) -> int:
        """The index of metric ``i``."""
        return 1 + i
