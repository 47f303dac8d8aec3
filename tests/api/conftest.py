"""Fixtures of the api modules: the REST API's contract on a live server."""

from __future__ import annotations

import pytest


@pytest.fixture
def edt_config() -> dict:
    """No devices: every job stays QUEUED, so the API is checked without any job process."""
    return {"devices": "virtual", "virtual_gpus": 0}
