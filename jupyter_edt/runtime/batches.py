"""What one micro-batch is to the model, and where the loss comes from: three conventions.

Why one module: the training step and validation call the model the same way, and a bad
combination should fail once, at construction, with a ValueError naming the argument.

- **A sequence batch and a ``loss_fn``** (the default collate of ``(input, target)`` samples):
  the last item is the target, the others go to the model as positional arguments;
  ``loss = loss_fn(output, target)``; metrics get ``(output, target)``.
- **A dict batch** (samples that are dicts, as Hugging Face datasets give): the model gets it as
  keyword arguments, ``model(**batch)``. With ``loss_fn=None`` the loss is the output's own
  (``output.loss`` or ``output["loss"]``, as a Hugging Face model returns when the batch has
  ``labels``); with a ``loss_fn`` it is ``loss_fn(output, batch)``. A sequence batch with
  ``loss_fn=None`` goes to the model whole, ``model(*batch)``. Metrics get ``(output, batch)``.
- **A ``step_fn(model, batch)``** for everything else: it returns the loss, or ``(loss, output)``
  for the metrics, which get ``(output, batch)``.

Whatever the convention, the loss must be the mean over the micro-batch's samples: the trainer
weights micro-batch ``j`` by ``len_j / len(batch)`` (``partition.py``). A language model averages
over the micro-batch's tokens instead. Weighted by samples, these means give the per-token mean of
the global batch when every sample has the same number of tokens (fixed-length or packed
sequences); with padding, a micro-batch counts by its samples, not its tokens. Either way the
weights are fixed by the micro-batches, which never depend on the allocation, so results stay
independent of the GPUs a job gets.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

__all__ = ["Compute", "StepFn", "to_device"]

StepFn = Callable[[nn.Module, Any], Any]


def to_device(batch: Any, device: torch.device) -> Any:
    """``batch`` with its tensors on ``device`` (dicts, lists and tuples walked)."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, Mapping):
        return type(batch)({k: to_device(v, device) for k, v in batch.items()})  # type: ignore[call-arg]
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a namedtuple
        return type(batch)(*(to_device(v, device) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(v, device) for v in batch)
    return batch


def loss_of(output: Any) -> torch.Tensor:
    """The loss a model returned with its output (Hugging Face's ``ModelOutput.loss``)."""
    loss = getattr(output, "loss", None)
    if loss is None and isinstance(output, Mapping):
        loss = output.get("loss")
    if not isinstance(loss, torch.Tensor):
        raise ValueError(
            "loss_fn=None needs a model whose output has .loss or ['loss'] (a Hugging Face model "
            f"given labels), but it returned {type(output).__name__} without one: pass loss_fn "
            "or step_fn"
        )
    return _scalar(loss, "the model's loss")


def _scalar(loss: Any, what: str) -> torch.Tensor:
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        shape = tuple(loss.shape) if isinstance(loss, torch.Tensor) else type(loss).__name__
        raise ValueError(f"{what} must be a scalar tensor (the micro-batch's mean), got {shape}")
    return loss.reshape(())


class Compute:
    """One micro-batch through the model: ``(output, loss, metric arguments)``."""

    def __init__(self, loss_fn: Callable[..., Any] | None, step_fn: StepFn | None) -> None:
        if loss_fn is not None and not callable(loss_fn):
            raise ValueError("loss_fn must be callable as loss_fn(output, target), or None")
        if step_fn is not None and not callable(step_fn):
            raise ValueError("step_fn must be callable as step_fn(model, batch)")
        if step_fn is not None and loss_fn is not None:
            raise ValueError("give loss_fn or step_fn, not both: step_fn computes the loss")
        self.loss_fn, self.step_fn = loss_fn, step_fn

    def __call__(self, model: nn.Module, batch: Any) -> tuple[Any, torch.Tensor, tuple[Any, Any]]:
        if self.step_fn is not None:
            got = self.step_fn(model, batch)
            loss, output = got if isinstance(got, tuple) else (got, None)
            return output, _scalar(loss, "step_fn's loss"), (output, batch)
        if isinstance(batch, Mapping):
            output = model(**batch)
            if self.loss_fn is None:
                return output, loss_of(output), (output, batch)
            return output, _scalar(self.loss_fn(output, batch), "loss_fn"), (output, batch)
        if self.loss_fn is None:
            output = model(*batch) if isinstance(batch, (list, tuple)) else model(batch)
            return output, loss_of(output), (output, batch)
        if not isinstance(batch, Sequence) or len(batch) < 2:
            raise ValueError(
                "loss_fn(output, target) needs batches that are (inputs..., target) sequences; "
                f"got {type(batch).__name__}: pass loss_fn=None for a model that returns its "
                "loss, or step_fn"
            )
        *inputs, target = batch
        output = model(*inputs)
        return output, _scalar(self.loss_fn(output, target), "loss_fn"), (output, target)
