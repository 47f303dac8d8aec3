"""Elastic training runtime: runs in job processes; imports torch and the standard library only.

``Trainer`` is the user API; ``LocalController`` drives a job's workers on one machine. They are
imported on first use, so that the server can read job directories (``jobdir``) without
importing torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .control import LocalController
    from .trainer import Callback, Trainer, check_fit_args

__all__ = ["Callback", "LocalController", "Trainer", "check_fit_args"]

_HOMES = {
    "Callback": "trainer",
    "Trainer": "trainer",
    "check_fit_args": "trainer",
    "LocalController": "control",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f".{_HOMES[name]}", __name__), name)
