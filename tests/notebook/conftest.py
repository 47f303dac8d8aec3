"""Fixtures of the notebook modules: the client, magics, widgets and CLI."""

from __future__ import annotations

import pytest
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config


@pytest.fixture
def edt_config() -> dict:
    """No devices: every job stays QUEUED, which is all the REST contract needs."""
    return {"devices": "virtual", "virtual_gpus": 0}


@pytest.fixture
def shell():
    """A real IPython shell, with no history file, cleared after the test."""
    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    ip = InteractiveShell.instance(config=config)
    yield ip
    InteractiveShell.clear_instance()
