"""The notebook side of jupyter-edt: the Python client, the IPython magics and the widgets.

Nothing here imports torch or the server: a kernel that only submits jobs stays light. The
widgets (``JobWidget``, ``LossChart``) import ipywidgets, only when first used.
"""

from __future__ import annotations

from typing import Any

from .client import EDTClient, Job, training_env
from .discovery import ServerInfo, find_server
from .errors import (
    BadRequest,
    ConfigurationError,
    Conflict,
    EDTError,
    Forbidden,
    JobFailed,
    NoSuchJob,
    ServerUnreachable,
    WaitTimeout,
)

__all__ = [
    "BadRequest",
    "ConfigurationError",
    "Conflict",
    "EDTClient",
    "EDTError",
    "Forbidden",
    "Job",
    "JobFailed",
    "JobWidget",
    "LossChart",
    "NoSuchJob",
    "ServerInfo",
    "ServerUnreachable",
    "WaitTimeout",
    "find_server",
    "training_env",
]


def __getattr__(name: str) -> Any:
    if name in ("JobWidget", "LossChart"):
        from . import widgets

        return getattr(widgets, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
