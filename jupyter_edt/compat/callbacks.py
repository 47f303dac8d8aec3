"""WMLA's ``callbacks`` module: ``Callback`` and ``LoggerCallback``, with both method forms.

Programs subclass these and pass instances to ``FabricModel`` (``driver_logger=``,
``worker_logger=``, ``user_callback=``). ``FabricModel`` tells the two forms of
``LoggerCallback`` apart by the parameter names of the subclass's methods (:func:`uses_dict_form`):

- first form: ``log_train_metrics(loss, acc, completed_batch, worker=0)``,
  ``log_test_metrics(loss, acc, completed_batch, worker=0)``; ``acc`` is a percentage;
- later form: ``log_train_metrics(metrics: dict, iteration, epoch, workers)``,
  ``log_test_metrics(metrics, iteration, epoch)``.

No torch import: the module also travels in ``fabric.zip``.
"""

from __future__ import annotations

import inspect
from typing import Any

__all__ = ["Callback", "LoggerCallback", "uses_dict_form"]


class Callback:
    """Epoch hooks. ``params`` holds ``optimizer`` and ``epochs``; ``model`` is the model."""

    def __init__(self) -> None:
        self.params: dict[str, Any] = {}
        self.model: Any = None

    def set_params(self, params: dict[str, Any]) -> None:
        self.params = params

    def set_model(self, model: Any) -> None:
        self.model = model

    def on_train_begin(self) -> None: ...

    def on_epoch_begin(self, epoch: int) -> None: ...

    def on_epoch_end(self, epoch: int, save_model: bool = False) -> None: ...

    def on_train_end(self) -> None: ...


class LoggerCallback(Callback):
    """Receives training and validation metrics; override either form of the two methods."""

    def log_train_metrics(self, *args: Any, **kwargs: Any) -> None: ...

    def log_test_metrics(self, *args: Any, **kwargs: Any) -> None: ...


def uses_dict_form(method: Any) -> bool:
    """Whether a ``log_*_metrics`` override takes the later form (a dict of metrics first)."""
    try:
        params = [
            p
            for p in inspect.signature(method).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        return False
    if not params:
        return False
    names = [p.name for p in params]
    if names[0] in ("loss", "train_loss", "test_loss"):
        return False
    return names[0] in ("metrics", "metric", "logs") or "iteration" in names or "epoch" in names
