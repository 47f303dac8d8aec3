"""A real JupyterHub for tests: its configurable-http-proxy, DummyAuthenticator, local spawner,
and `jupyter edt serve` registered as its external service ``edt``, all on loopback ports in a
temporary directory. One per test module: it takes ~10 s to start.

The service starts first (else the Hub waits ~30 s for it before adding its proxy routes). Users'
servers run jupyter_edt in the remote mode, forwarding to the service.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from edtservice import ServiceProcess, call, free_port
from waiting import eventually_sync

REPO = Path(__file__).resolve().parents[1]
PROXY = REPO / "node_modules" / ".bin" / "configurable-http-proxy"
#: The scope the Hub grants users to reach the service, and their servers' tokens to forward.
ACCESS = "access:services!service=edt"
START_S = 90.0


class Hub:
    def __init__(
        self,
        root: Path,
        users: list[str],
        *,
        admins_group: list[str] = (),  # type: ignore[assignment]
        service_settings: dict[str, Any] | None = None,
        service_env: dict[str, str] | None = None,
        port: int | None = None,
    ) -> None:
        self.root = Path(root)
        self.users = list(users)
        self.port = port or free_port()
        self.hub_port, self.proxy_api_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.api = f"{self.url}hub/api/"
        self.service_token = secrets.token_hex(32)
        self.admin_token = secrets.token_hex(32)  # the tests' own service, a Hub admin
        self.metrics_token = secrets.token_hex(32)  # Prometheus': read:metrics only
        self.admins_group = list(admins_group)
        service_port = free_port()
        self.service_url = f"http://127.0.0.1:{service_port}/services/edt/"
        self.service = ServiceProcess(
            self.root / "service",
            {
                "port": service_port,
                "base_url": "/services/edt/",
                "authenticator_class": "jupyter_edt.serve.auth.HubAuthenticator",
                "HubAuthenticator.admin_groups": ["edt-admins"],
                **(service_settings or {}),
            },
            env={
                "JUPYTERHUB_API_URL": f"http://127.0.0.1:{self.hub_port}/hub/api",
                "JUPYTERHUB_API_TOKEN": self.service_token,
                "JUPYTERHUB_SERVICE_NAME": "edt",
                "JUPYTERHUB_SERVICE_PREFIX": "/services/edt/",
                **(service_env or {}),
            },
        )
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = self.root / "hub.log"

    def config(self) -> str:
        d = self.root
        settings = {
            "JupyterHub.ip": "127.0.0.1",
            "JupyterHub.port": self.port,
            "JupyterHub.hub_ip": "127.0.0.1",
            "JupyterHub.hub_port": self.hub_port,
            "JupyterHub.db_url": f"sqlite:///{d / 'hub.sqlite'}",
            "JupyterHub.cookie_secret_file": str(d / "cookie_secret"),
            "JupyterHub.authenticator_class": "dummy",
            "JupyterHub.spawner_class": "simple",
            "JupyterHub.cleanup_servers": True,
            "ConfigurableHTTPProxy.command": [str(PROXY)],
            "ConfigurableHTTPProxy.api_url": f"http://127.0.0.1:{self.proxy_api_port}",
            "ConfigurableHTTPProxy.pid_file": str(d / "proxy.pid"),
            "Authenticator.allowed_users": set(self.users),
            "SimpleLocalProcessSpawner.home_dir_template": str(d / "homes" / "{username}"),
            "Spawner.cmd": [str(Path(sys.executable).with_name("jupyterhub-singleuser"))],
            "Spawner.args": ["--allow-root"] if os.geteuid() == 0 else [],
            "Spawner.default_url": "/lab",
            "Spawner.start_timeout": 120,
            "Spawner.http_timeout": 120,
            # the users' servers forward to the service, with a token that may
            "Spawner.environment": {"EDT_SERVICE_URL": self.service_url},
            "Spawner.server_token_scopes": ["users:activity!user", "access:servers!server", ACCESS],
            "JupyterHub.services": [
                {"name": "edt", "url": self.service_url[: -len("services/edt/")],
                 "api_token": self.service_token, "display": True},
                {"name": "tests", "api_token": self.admin_token},
                {"name": "prometheus", "api_token": self.metrics_token},
            ],
            "JupyterHub.load_roles": [
                {"name": "user", "scopes": ["self", ACCESS]},
                {"name": "tests", "services": ["tests"],
                 "scopes": ["admin:users", "admin:servers", "tokens", "access:servers"]},
                {"name": "metrics", "services": ["prometheus"], "scopes": ["read:metrics"]},
            ],
            "JupyterHub.load_groups": {"edt-admins": {"users": self.admins_group}},
        }  # fmt: skip
        return "\n".join(f"c.{k} = {v!r}" for k, v in settings.items()) + "\n"

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.service.start()  # before the Hub: it adds the service's route once it answers
        path = self.root / "jupyterhub_config.py"
        path.write_text(self.config())
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "jupyterhub", "-f", str(path)],
                cwd=self.root,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
            )
        eventually_sync(self._answers, "the Hub answering through its proxy", timeout=START_S)

    def _answers(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"jupyterhub exited:\n{self.log()}")
        status, _, _ = self.hub("GET", "")
        return status == 200

    def hub(self, method: str, path: str, body: Any = None) -> tuple[int, Any, dict[str, str]]:
        """A call of the Hub's API as the tests' admin service."""
        try:
            return call(self.api, method, path, self.admin_token, body)
        except (urllib.error.URLError, ConnectionError):
            return 0, None, {}

    def token(self, user: str, scopes: list[str] | None = None) -> str:
        """A new API token of `user` (with `scopes`, else all the user's own)."""
        body: dict[str, Any] = {"note": "test"}
        if scopes is not None:
            body["scopes"] = scopes
        status, answer, _ = self.hub("POST", f"users/{user}/tokens", body)
        assert status == 201, answer
        return answer["token"]

    def start_server(self, user: str) -> str:
        """Start `user`'s server; returns its URL once the Hub says it is ready."""
        status, answer, _ = self.hub("POST", f"users/{user}/server")
        assert status in (201, 202, 400), answer  # 400: already running

        def ready() -> bool:
            model = self.hub("GET", f"users/{user}")[1]
            return bool(model["servers"].get("", {}).get("ready"))

        eventually_sync(ready, f"{user}'s server ready ({self.log()[-2000:]})", timeout=START_S)
        return f"{self.url}user/{user}/"

    def stop_server(self, user: str) -> None:
        status, answer, _ = self.hub("DELETE", f"users/{user}/server")
        assert status in (202, 204), answer

        def stopped() -> bool:
            model = self.hub("GET", f"users/{user}")[1]
            return "" not in model["servers"]

        eventually_sync(stopped, f"{user}'s server stopped", timeout=60)

    def stop(self) -> None:
        """Stop the Hub (its proxy and the users' servers with it), then the service."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        pid = self.root / "proxy.pid"
        if pid.exists():
            with contextlib.suppress(ValueError, ProcessLookupError):
                os.kill(int(pid.read_text()), signal.SIGTERM)
        self.service.stop()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""


def have_proxy() -> bool:
    return PROXY.exists() and shutil.which("node") is not None


def loads(raw: Any) -> Any:
    return json.loads(raw) if isinstance(raw, bytes | str) else raw
