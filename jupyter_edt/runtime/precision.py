"""Mixed precision: autocast for the forward pass, and fp16's loss scaling on the summed gradient.

Why the scaler is ours and not ``torch.amp.GradScaler``: the gradient a step applies is the
order-fixed sum over workers (``exchange.py``), complete only after the step's reduction, in one
flat buffer that is bit-identical on every worker. Checking that buffer for inf/NaN therefore
gives the same answer everywhere with no extra message, so a step is skipped on every worker or
on none; ``GradScaler`` checks each process's local gradients, which differ between workers.
The scale follows ``GradScaler``'s rule (start at 2**16, halve on an overflow, double after 2000
clean steps), and is training state: it moves to joiners and into checkpoints, so a run skips the
same steps whatever its allocation history.

``bf16`` needs no scaler (its exponent range is float32's) and autocasts on CPU and CUDA alike.
``fp16`` is meant for CUDA; it runs on CPU too, where autocast supports it, which is how the tests
exercise the scaler's agreement without a GPU.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import torch

__all__ = ["PRECISIONS", "LossScaler", "Precision", "check_precision"]

#: ``Trainer(precision=...)``: the values, and the autocast dtype of each (None: no autocast)
PRECISIONS: dict[str, torch.dtype | None] = {
    "32": None,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}


def check_precision(precision: object) -> str:
    """The precision's name; a ValueError naming ``precision`` for anything else. Lightning's
    spellings (``"bf16-mixed"``, ``"16-mixed"``, ``32``) are taken too."""
    aliases = {"32-true": "32", "bf16-mixed": "bf16", "16-mixed": "fp16", "16": "fp16"}
    name = str(precision) if isinstance(precision, (str, int)) else None
    name = aliases.get(name, name) if name is not None else None
    if name not in PRECISIONS or isinstance(precision, bool):
        raise ValueError(
            f"precision must be one of {', '.join(repr(p) for p in PRECISIONS)}, got {precision!r}"
        )
    return name


class LossScaler:
    """fp16's loss scale: the loss is multiplied by ``scale`` before backward, the summed gradient
    divided by it after; an inf/NaN in the summed gradient skips the step and halves the scale."""

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
    ) -> None:
        self.scale = float(init_scale)
        self.growth_factor, self.backoff_factor = growth_factor, backoff_factor
        self.growth_interval = growth_interval
        self.growth_tracker = 0  # clean steps since the scale last changed

    def unscale(self, flat: torch.Tensor) -> bool:
        """Divide the summed gradient by the scale in place; whether it is finite (the same
        answer on every worker, whose ``flat`` is the same sum)."""
        finite = bool(torch.isfinite(flat).all())
        if finite:
            # a power of two: the product is exact, as GradScaler's multiply by the inverse is
            flat.mul_(1.0 / self.scale)
        return finite

    def update(self, finite: bool) -> None:
        """After a step: back off on an overflow, grow after ``growth_interval`` clean steps."""
        if not finite:
            self.scale *= self.backoff_factor
            self.growth_tracker = 0
            return
        self.growth_tracker += 1
        if self.growth_tracker == self.growth_interval:
            self.scale *= self.growth_factor
            self.growth_tracker = 0

    def state_dict(self) -> dict[str, Any]:
        return {"scale": self.scale, "growth_tracker": self.growth_tracker}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.scale = float(state["scale"])
        self.growth_tracker = int(state["growth_tracker"])


class Precision:
    """A trainer's precision: the autocast around forward and loss, and fp16's scaler."""

    def __init__(self, name: str, device: torch.device) -> None:
        self.name = check_precision(name)
        self.dtype = PRECISIONS[self.name]
        self.device_type = device.type
        self.scaler = LossScaler() if self.name == "fp16" else None

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)

    @property
    def loss_scale(self) -> float:
        """What a micro-batch's weighted loss is multiplied by before backward."""
        return self.scaler.scale if self.scaler is not None else 1.0

    @contextlib.contextmanager
    def unscaled(self, flat: torch.Tensor) -> Iterator[bool]:
        """Around the optimizer step: the summed gradient unscaled, and whether to step (False:
        an overflow, every worker skips); the scale is updated after."""
        if self.scaler is None:
            yield True
            return
        finite = self.scaler.unscale(flat)
        yield finite
        self.scaler.update(finite)
