"""Fixtures shared by the test packages: a real Jupyter server (pytest-jupyter) running the
jupyter_edt extension, single-user or, under `pytest.mark.multi_user`, multi-user.

Each package's conftest.py holds what only its modules use; helpers that modules of several
packages import live beside this file (jobprograms, waiting, multiuser, apidoc, archive_files,
fakes), which pytest's `pythonpath` puts on the path."""

from __future__ import annotations

from pathlib import Path

import pytest
from multiuser import ADMINS, TokenPerUser

pytest_plugins = ["pytest_jupyter.jupyter_server"]


def multi_user(node: pytest.Item) -> bool:
    """Whether `node` (a test) runs against the multi-user server: its closest mark says."""
    mark = node.get_closest_marker("multi_user")
    return mark is not None and bool(mark.args[0] if mark.args else True)


@pytest.fixture
def edt_config() -> dict:
    """EDTApp settings for a test; parametrize it to change them. Warm processes only where
    a test asks for them: a fork server preloads torch, seconds of CPU per server."""
    return {"virtual_gpus": 4, "warm_workers": False}


@pytest.fixture
def jobs_dir(tmp_path) -> Path:
    """The server's EDTApp.jobs_dir."""
    return tmp_path / "jobs"


@pytest.fixture
def jp_server_config(request, edt_config: dict, jobs_dir: Path, tmp_path) -> dict:
    """The server of a test: jupyter_edt with `edt_config`, on Jupyter's own token login, or,
    under `pytest.mark.multi_user`, with users named by their tokens (alice, bob; root an
    admin), as JupyterHub names them."""
    server: dict = {"jpserver_extensions": {"jupyter_edt": True}}
    edt: dict = {
        "database_url": f"sqlite:///{tmp_path / 'edt.sqlite'}",
        "jobs_dir": str(jobs_dir),
    }
    if multi_user(request.node):
        server["identity_provider_class"] = TokenPerUser
        edt["admin_users"] = list(ADMINS)
    return {"ServerApp": server, "EDTApp": {**edt, **edt_config}}


@pytest.fixture
def server_url(http_server, jp_http_port, jp_base_url) -> str:
    """The live server's base URL (`http_server` makes the app serve on `jp_http_port`)."""
    return f"http://127.0.0.1:{jp_http_port}{jp_base_url}"


@pytest.fixture
def alice(server_url: str):
    """A real client of the live server, as the user alice (see `multiuser.TokenPerUser`)."""
    from jupyter_edt.notebook import EDTClient

    return EDTClient(server_url, "alice")
