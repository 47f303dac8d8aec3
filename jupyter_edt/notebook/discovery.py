"""Zero configuration: find the URL and token of the Jupyter server a kernel belongs to.

A kernel started by a Jupyter server has no address of that server in its environment, but the
server writes a runtime file ``jpserver-<pid>.json`` (url, token, pid, ...) into Jupyter's
runtime directory, and with the local kernel provisioner the kernel is a child process of the
server (``os.getppid()`` is the server's pid; a wrapper such as ``conda run`` makes it a
grandchild). So, in order:

1. ``EDT_URL`` (and ``EDT_TOKEN``) from the environment: explicit configuration always wins,
   and it is what a server extension, a CI job or a remote user sets.
2. The running server whose pid is this process or one of its ancestors: the server that
   started this kernel, even when several servers run.
3. JupyterHub: a single-user server passes ``JUPYTERHUB_SERVICE_URL`` and
   ``JUPYTERHUB_API_TOKEN`` down to its kernels, and that token may call the user's server.
4. The only running server, when exactly one runs (e.g. a terminal next to ``jupyter lab``).

Otherwise :class:`ConfigurationError` says what was found and how to configure. The selection
(:func:`select_server`) is a pure function of the environment, the runtime files and the
ancestor pids, so it is tested without any server; reading the files and the process tree is
kept apart. Only the standard library and ``jupyter_core`` (for the runtime directory) are
imported: ``jupyter_server.serverapp.list_running_servers`` does the same reading but imports
the whole server.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ConfigurationError

ENV_URL = "EDT_URL"
ENV_TOKEN = "EDT_TOKEN"
HOW_TO_CONFIGURE = (
    "Pass the server explicitly, EDTClient(url='http://host:8888/', token='...'), "
    f"or set the {ENV_URL} and {ENV_TOKEN} environment variables "
    "(in a notebook: %edt_connect URL --token TOKEN)."
)


@dataclass(frozen=True)
class ServerInfo:
    """Where a jupyter-edt server is, and how it was found (shown in errors and reprs)."""

    url: str
    token: str
    source: str


def select_server(
    env: Mapping[str, str],
    servers: Sequence[Mapping[str, Any]],
    ancestors: Sequence[int],
) -> ServerInfo:
    """Choose the server by the rules in the module docstring.

    `servers` are the decoded runtime files of running servers; `ancestors` this process's pid
    and its ancestors' pids, nearest first.
    """
    url = env.get(ENV_URL, "").strip()
    if url:
        return ServerInfo(normalize_url(url), env.get(ENV_TOKEN, ""), f"${ENV_URL}")

    usable = [s for s in servers if _server_url(s)]
    by_pid = {s.get("pid"): s for s in usable}
    hub_token = env.get("JUPYTERHUB_API_TOKEN", "")
    for pid in ancestors:
        server = by_pid.get(pid)
        if server is not None:
            # JupyterHub's single-user servers have no token of their own; the hub's API token
            # the server passes to its kernels authenticates instead.
            token = env.get(ENV_TOKEN) or server.get("token") or hub_token
            return ServerInfo(_server_url(server), token, f"the Jupyter server (pid {pid})")

    hub_url = env.get("JUPYTERHUB_SERVICE_URL", "").strip()
    if hub_url and hub_token:
        return ServerInfo(normalize_url(hub_url), hub_token, "$JUPYTERHUB_SERVICE_URL")

    if len(usable) == 1:
        server = usable[0]
        token = env.get(ENV_TOKEN) or server.get("token") or ""
        pid = server.get("pid")
        return ServerInfo(
            _server_url(server), token, f"the only running Jupyter server (pid {pid})"
        )

    if not usable:
        raise ConfigurationError(
            "No Jupyter server to send jobs to: none is running on this machine for this user, "
            f"and {ENV_URL} is not set. {HOW_TO_CONFIGURE}"
        )
    urls = ", ".join(_server_url(s) for s in usable)
    raise ConfigurationError(
        f"Several Jupyter servers are running ({urls}) and none of them started this process, "
        f"so which one to use is ambiguous. {HOW_TO_CONFIGURE}"
    )


def find_server(
    env: Mapping[str, str] | None = None,
    runtime_dir: str | os.PathLike[str] | None = None,
    pid: int | None = None,
) -> ServerInfo:
    """The server this process should talk to (see the module docstring)."""
    env = os.environ if env is None else env
    if env.get(ENV_URL, "").strip():  # no need to read files or walk processes
        return select_server(env, [], [])
    return select_server(env, running_servers(runtime_dir), ancestor_pids(pid))


def running_servers(runtime_dir: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """The runtime files of servers whose process still exists (stale files are skipped)."""
    if runtime_dir is None:
        from jupyter_core.paths import jupyter_runtime_dir

        runtime_dir = jupyter_runtime_dir()
    folder = Path(runtime_dir)
    if not folder.is_dir():
        return []
    found = []
    for path in sorted(folder.glob("jpserver-*.json")):
        try:
            info = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # being written, or unreadable: not a server we can use
        if isinstance(info, dict) and isinstance(info.get("pid"), int) and _alive(info["pid"]):
            found.append(info)
    return found


def ancestor_pids(pid: int | None = None, limit: int = 32) -> list[int]:
    """`pid` (default: this process) and its ancestors, nearest first.

    Uses /proc on Linux, psutil where installed (ipykernel depends on it), and otherwise only
    the direct parent, which is the server itself with the local kernel provisioner.
    """
    pid = os.getpid() if pid is None else pid
    chain = [pid]
    while len(chain) < limit:
        ppid = _parent_of(chain[-1])
        if ppid is None and chain[-1] == os.getpid():
            ppid = os.getppid()  # neither /proc nor psutil: the direct parent is still known
        if ppid is None or ppid <= 0 or ppid in chain:
            break
        chain.append(ppid)
    return chain


def normalize_url(url: str) -> str:
    """A base URL ending in exactly one slash, so API paths join onto it."""
    url = url.strip()
    if "://" not in url:
        url = "http://" + url
    return url.rstrip("/") + "/"


def _server_url(server: Mapping[str, Any]) -> str:
    """The runtime file's URL, made connectable; '' for servers on a UNIX socket."""
    if server.get("sock"):
        return ""  # urllib cannot speak HTTP over a UNIX socket
    url = str(server.get("url") or "")
    if not url:
        port = server.get("port")
        if not port:
            return ""
        scheme = "https" if server.get("secure") else "http"
        host = server.get("hostname") or "localhost"
        url = f"{scheme}://{host}:{port}{server.get('base_url') or '/'}"
    for wildcard in ("//0.0.0.0:", "//[::]:"):
        url = url.replace(wildcard, "//127.0.0.1:")
    return normalize_url(url)


def _alive(pid: int) -> bool:
    if sys.platform == "win32":  # pragma: no cover - os.kill(pid, 0) would terminate it
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, but another user's
    except OSError:
        return False
    return True


def _has_proc() -> bool:
    return Path("/proc/self/stat").exists()


def _parent_of(pid: int) -> int | None:
    if _has_proc():
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return None
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after it
        fields = stat[stat.rfind(")") + 2 :].split()
        return int(fields[1]) if len(fields) > 1 else None
    try:
        import psutil

        return psutil.Process(pid).ppid()
    except Exception:
        return None
