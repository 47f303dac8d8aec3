"""Shared fixtures: a real Jupyter server (pytest-jupyter) running the jupyter_edt extension."""

from __future__ import annotations

import pytest
from jupyter_server.auth.identity import IdentityProvider, User

pytest_plugins = ["pytest_jupyter.jupyter_server"]


class TokenPerUser(IdentityProvider):
    """Names users by their token (`token alice` is alice), as JupyterHub's provider does."""

    def get_user(self, handler):
        auth = handler.request.headers.get("Authorization", "")
        token = handler.get_argument("token", "") or auth.removeprefix("token ").strip()
        if token in {"alice", "bob", "root"}:
            return User(username=token)
        return None

    def is_token_authenticated(self, handler) -> bool:
        # a token in a header is not a cookie, so no XSRF check applies (as with Jupyter's own)
        return self.get_user(handler) is not None


@pytest.fixture
def edt_config() -> dict:
    """EDTApp settings for a test; parametrize it to change them."""
    return {"virtual_gpus": 4}


@pytest.fixture
def jp_server_config(edt_config: dict, tmp_path) -> dict:
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_edt": True}},
        "EDTApp": {
            "database_url": f"sqlite:///{tmp_path / 'edt.sqlite'}",
            "jobs_dir": str(tmp_path / "jobs"),
            **edt_config,
        },
    }


@pytest.fixture
def multi_user_config(edt_config: dict, tmp_path) -> dict:
    return {
        "ServerApp": {
            "jpserver_extensions": {"jupyter_edt": True},
            "identity_provider_class": TokenPerUser,
        },
        "EDTApp": {
            "database_url": f"sqlite:///{tmp_path / 'edt.sqlite'}",
            "jobs_dir": str(tmp_path / "jobs"),
            "admin_users": ["root"],
            **edt_config,
        },
    }


@pytest.fixture
def server_url(http_server, jp_http_port, jp_base_url) -> str:
    """The live server's base URL (`http_server` makes the app serve on `jp_http_port`)."""
    return f"http://127.0.0.1:{jp_http_port}{jp_base_url}"


@pytest.fixture
def alice(server_url: str):
    """A real client of the live server, as the user alice (see `TokenPerUser`)."""
    from jupyter_edt.notebook import EDTClient

    return EDTClient(server_url, "alice")
