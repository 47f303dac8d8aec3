"""Elastic training runtime: runs in job processes; imports torch and the standard library only.

``Trainer`` is the user API; ``LocalController`` drives a job's workers on one machine.
"""

from .control import LocalController
from .trainer import Callback, Trainer, check_fit_args

__all__ = ["Callback", "LocalController", "Trainer", "check_fit_args"]
