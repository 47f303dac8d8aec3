"""Shared fixtures: a real Jupyter server (pytest-jupyter) running the jupyter_edt extension."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytest_jupyter.jupyter_server"]


@pytest.fixture
def edt_config() -> dict:
    """EDTApp settings for a test; override in a test module to change them."""
    return {"virtual_gpus": 4}


@pytest.fixture
def jp_server_config(edt_config: dict) -> dict:
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_edt": True}},
        "EDTApp": edt_config,
    }
