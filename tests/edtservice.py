"""A real `jupyter edt serve` process for tests: configured through a config file, started,
stopped (SIGTERM, as systemd or the Hub stops it) and started again on the same store."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from email.message import Message
from pathlib import Path
from typing import Any

from waiting import eventually_sync

#: How long the service may take to answer after its start (imports on 2 busy cores).
START_S = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServiceProcess:
    """`jupyter edt serve` with `settings` (EDTService traits) in `root`: its store, jobs and
    log live there. `env` is added to the service's environment."""

    def __init__(self, root: Path, settings: dict[str, Any], env: dict[str, str] | None = None):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = settings.pop("port", None) or free_port()
        self.settings = {
            "database_url": f"sqlite:///{self.root / 'edt.sqlite'}",
            "jobs_dir": str(self.root / "jobs"),
            "ip": "127.0.0.1",
            "port": self.port,
            **settings,
        }
        self.env = env or {}
        self.base_url = settings.get("base_url", "/").rstrip("/")
        self.url = f"http://127.0.0.1:{self.port}{self.base_url}/"
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = self.root / "service.log"

    def write_config(self) -> Path:
        path = self.root / "edt_config.py"
        lines = [f"c.EDTService.{k} = {v!r}" for k, v in self.settings.items()]
        path.write_text("\n".join(lines) + "\n")
        return path

    def start(self) -> None:
        config = self.write_config()
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "jupyter_edt.cli", "serve", f"--config={config}"],
                env={**os.environ, **self.env},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        eventually_sync(
            self._answers, f"jupyter edt serve answering ({self.log()})", timeout=START_S
        )

    def _answers(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"jupyter edt serve exited:\n{self.log()}")
        try:
            with urllib.request.urlopen(f"{self.url}edt/api/health", timeout=5) as r:
                return r.status == 200
        except (urllib.error.URLError, ConnectionError):
            return False

    def reload(self) -> None:
        """Write the config file from `settings` again and send SIGHUP, as `systemctl reload`
        does: the service applies the settings that change live."""
        assert self.process is not None
        self.write_config()
        self.process.send_signal(signal.SIGHUP)

    def stop(self) -> int:
        """SIGTERM, as a service manager stops it; its jobs keep running."""
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else 0
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait(timeout=10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""


def call(
    url: str, method: str, path: str, token: str | None, body: Any = None
) -> tuple[int, Any, Message]:
    """One API call: the status, the JSON answer (or the raw bytes) and the headers (their
    names in any case)."""
    headers = {"Authorization": f"token {token}"} if token else {}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(url + path.lstrip("/"), data, headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            status, raw, answer_headers = r.status, r.read(), r.headers
    except urllib.error.HTTPError as err:
        status, raw, answer_headers = err.code, err.read(), err.headers
    try:
        return status, json.loads(raw), answer_headers
    except ValueError:
        return status, raw, answer_headers


def token_file_service(
    root: Path, users: dict[str, dict[str, Any]], settings: dict[str, Any]
) -> ServiceProcess:
    """A started `jupyter edt serve` in `root` whose callers a token file names (`users`: the
    file's entries), running every job under the service's own account, with `settings`."""
    tokens = root / "tokens.json"
    tokens.write_text(json.dumps(users))
    tokens.chmod(0o600)
    process = ServiceProcess(
        root,
        {
            "authenticator_class": "jupyter_edt.serve.auth.TokenFileAuthenticator",
            "run_as_users": False,
            "allow_shared_account": True,
            **settings,
        },
    )
    process.settings["TokenFileAuthenticator.tokens_file"] = str(tokens)
    process.start()
    return process
