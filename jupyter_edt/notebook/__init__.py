"""The notebook side of jupyter-edt: the Python client and the IPython magics.

Nothing here imports torch or the server: a kernel that only submits jobs stays light.
"""

from __future__ import annotations

from .client import EDTClient, Job, training_env
from .discovery import ServerInfo, find_server
from .errors import (
    BadRequest,
    ConfigurationError,
    Conflict,
    EDTError,
    Forbidden,
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
    "NoSuchJob",
    "ServerInfo",
    "ServerUnreachable",
    "WaitTimeout",
    "find_server",
    "training_env",
]
