"""What a training program gives ``Trainer`` and ``fit``, checked once at the door.

Kept apart from the training loop so that a bad argument fails before any worker joins, with a
ValueError naming it, and so that the submission-time overrides (``EDT_EPOCHS``, ...) have one
reader.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sized
from typing import Any, cast

import torch
from torch.utils.data import Dataset, IterableDataset

from . import partition as part
from .group import select_device
from .submission import FIT_OPTION_ENV

__all__ = [
    "ENV_OPTIONS",
    "LR_SCHEDULER_INTERVALS",
    "check_clipping",
    "check_dataset",
    "check_fit_args",
    "check_lr_scheduler",
    "check_num_workers",
    "env_overrides",
    "resolve_device",
]

# when Trainer(lr_scheduler=...) steps: after each epoch, or after each optimizer step
LR_SCHEDULER_INTERVALS = ("epoch", "step")

# fit() argument -> (environment variable, lowest allowed value)
ENV_OPTIONS = FIT_OPTION_ENV


def check_fit_args(
    epochs: int,
    effective_batch_size: int,
    max_gpus: int,
    checkpoint_every: int,
    micro_batch_size: int | None,
    validate_every: int,
) -> int:
    """Validate ``fit``'s numbers (ValueError naming the argument); returns the micro-batch size."""

    def whole(name: str, value: object, low: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        return value

    whole("epochs", epochs, 1)
    whole("effective_batch_size", effective_batch_size, 1)
    whole("max_gpus", max_gpus, 1)
    whole("checkpoint_every", checkpoint_every, 0)
    whole("validate_every", validate_every, 0)
    if micro_batch_size is None:
        return part.default_micro_batch_size(effective_batch_size, max_gpus)
    whole("micro_batch_size", micro_batch_size, 1)
    if micro_batch_size > effective_batch_size:
        raise ValueError(
            f"micro_batch_size ({micro_batch_size}) must not exceed effective_batch_size "
            f"({effective_batch_size})"
        )
    return micro_batch_size


def env_overrides(env: Mapping[str, str], **given: int) -> tuple[dict[str, int], list[str]]:
    """``fit``'s options after the submission-time overrides in ``env``, and one log line per
    override. Precedence: option given at submission > value in the code > default.

    Raises ValueError naming the variable when a value is not a whole number within range.
    """
    values, notes = dict(given), []
    for name, (var, low) in ENV_OPTIONS.items():
        raw = env.get(var)
        if raw is None or name not in given:
            continue
        try:
            value = int(raw.strip())
        except ValueError:
            value = None
        if value is None or value < low:
            rule = "a positive integer" if low == 1 else f"an integer >= {low}"
            raise ValueError(f"{var} must be {rule}, got {raw!r}")
        values[name] = value
        if value != given[name]:
            notes.append(f"{name}={value} from {var} overrides fit({name}={given[name]!r})")
    return values, notes


def check_lr_scheduler(lr_scheduler: Any, optimizer: torch.optim.Optimizer, interval: str) -> Any:
    """The scheduler of ``optimizer`` that ``lr_scheduler`` stands for (an instance, or a
    factory called with the optimizer), or None; ValueError naming the argument on bad input."""
    if interval not in LR_SCHEDULER_INTERVALS:
        raise ValueError(f"lr_scheduler_interval must be 'epoch' or 'step', got {interval!r}")
    if lr_scheduler is None:
        return None
    is_factory = isinstance(lr_scheduler, type) or not hasattr(lr_scheduler, "state_dict")
    if is_factory:
        if not callable(lr_scheduler):
            raise ValueError(
                "lr_scheduler must be a torch.optim.lr_scheduler scheduler or a function of "
                f"the optimizer returning one, got {type(lr_scheduler).__name__}"
            )
        lr_scheduler = lr_scheduler(optimizer)
    for name in ("step", "state_dict", "load_state_dict"):
        if not callable(getattr(lr_scheduler, name, None)):
            raise ValueError(
                f"lr_scheduler must have {name}() (a torch.optim.lr_scheduler scheduler), "
                f"got {type(lr_scheduler).__name__}"
            )
    if getattr(lr_scheduler, "optimizer", optimizer) is not optimizer:
        raise ValueError("lr_scheduler schedules another optimizer than the one given")
    if isinstance(lr_scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
        raise ValueError(
            "lr_scheduler: ReduceLROnPlateau needs a metric at each step; call its "
            "step(logs['val_loss']) from a callback's on_epoch_end instead"
        )
    return lr_scheduler


def resolve_device(requested: str | torch.device = "auto") -> torch.device:
    """The device this process trains on (see ``group.select_device``)."""
    name = select_device(
        requested,
        in_job="EDT_STORE" in os.environ,
        visible=os.environ.get("CUDA_VISIBLE_DEVICES"),
        cuda_available=torch.cuda.is_available(),
        local_rank=int(os.environ.get("LOCAL_RANK", "0")),
    )
    device = torch.device(name)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def check_dataset(name: str, ds: object) -> int:
    """The number of samples of ``ds``, which must be a non-empty map-style dataset (the
    partition rule indexes samples by position)."""
    if not isinstance(ds, Dataset) or isinstance(ds, IterableDataset):
        raise ValueError(
            f"datasets must return map-style torch.utils.data.Dataset objects; "
            f"{name} is {type(ds).__name__}"
        )
    try:
        n = len(cast(Sized, ds))
    except TypeError as e:
        raise ValueError(f"datasets: {name} must define __len__") from e
    if n < 1:
        raise ValueError(f"datasets: {name} must not be empty")
    return n


def check_clipping(clip_grad_norm: object, clip_grad_value: object) -> tuple[float | None, ...]:
    """``Trainer``'s clipping: each None or a positive number, and not both (they are two ways
    of bounding the same gradient; Lightning's ``gradient_clip_algorithm`` picks one too)."""

    def positive(name: str, value: object) -> float | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"{name} must be a positive number or None, got {value!r}")
        return float(value)

    norm = positive("clip_grad_norm", clip_grad_norm)
    value = positive("clip_grad_value", clip_grad_value)
    if norm is not None and value is not None:
        raise ValueError("give clip_grad_norm or clip_grad_value, not both")
    return norm, value


def check_num_workers(num_workers: object) -> int:
    """``fit(num_workers=...)``: data-loading processes per training worker, 0 or more."""
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
        raise ValueError(f"num_workers must be an integer >= 0, got {num_workers!r}")
    return num_workers
