"""Fixtures of the jobs modules that run jobs on the live server."""

from __future__ import annotations

import pytest


@pytest.fixture
def edt_config() -> dict:
    """4 virtual GPUs, and a job may be rescaled at any moment."""
    return {"devices": "virtual", "virtual_gpus": 4, "min_rescale_interval": 0.0}
