"""Fixtures shared by the test packages: a real Jupyter server (pytest-jupyter) running the
jupyter_edt extension, single-user or, under `pytest.mark.multi_user`, multi-user.

Each package's conftest.py holds what only its modules use; helpers that modules of several
packages import live beside this file (jobprograms, waiting, multiuser, apidoc, archive_files,
fakes, wmla_program, wmlaclient), which pytest's `pythonpath` puts on the path."""

from __future__ import annotations

import os
import signal
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# The helpers' asserts explain a failure as the tests' own do (pytest rewrites test modules
# only); registered before anything imports them.
pytest.register_assert_rewrite(
    *("apidoc", "archive_files", "benchruns", "edtservice", "fakes", "hubdeploy"),
    *("jobprograms", "multiuser", "pgserver", "realjobs", "restartjobs", "scrapes"),
    *("unixaccounts", "waiting", "wmla_program", "wmlaclient", "workerruns"),
)

from multiuser import ADMINS, TokenPerUser  # noqa: E402

from jupyter_edt.launch.local import LocalLauncher, warm_launchers  # noqa: E402

# How long processes a test just stopped may take to end before they count as left running.
EXIT_GRACE_S = 5.0

pytest_plugins = ["pytest_jupyter.jupyter_server"]


#: Test packages whose modules share a package-scoped fixture (one Ray cluster): one unit.
SHARED_PACKAGES = ("ray",)


def _work_unit(nodeid: str) -> str:
    """What one xdist worker runs whole: a test's module, or its package if it is shared."""
    path = nodeid.split("::", 1)[0]
    parts = path.split("/")
    return "/".join(parts[:2]) if len(parts) > 2 and parts[1] in SHARED_PACKAGES else path


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The shared packages' tests first (stable otherwise): under ``make test``'s two workers
    (`pytest_xdist_make_scheduler`) the longest unit, the Ray package, starts at once while
    the other worker takes everything else, rather than holding up the end."""
    items.sort(key=lambda item: _work_unit(item.nodeid) == item.nodeid.split("::", 1)[0])


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``make test`` runs pytest on two workers (`--dist loadscope`): each module's tests on
    one (its module-scoped fixtures, a Hub or a service, start once) and a shared package's
    as one unit (the Ray cluster), in collection order."""
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _work_unit(nodeid)

    config.option.loadscopereorder = False  # collection order: the Ray package first
    return ModuleScheduling(config, log)


def multi_user(node: pytest.Item) -> bool:
    """Whether `node` (a test) runs against the multi-user server: its closest mark says."""
    mark = node.get_closest_marker("multi_user")
    return mark is not None and bool(mark.args[0] if mark.args else True)


def processes_in(root: Path) -> list[int]:
    """The processes working in `root` or below it (a job's driver and workers work in its
    code directory), but this one."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cwd = os.readlink(f"/proc/{entry.name}/cwd")
        except OSError:  # gone, or a zombie
            continue
        if cwd == str(root) or cwd.startswith(f"{root}{os.sep}"):
            found.append(int(entry.name))
    return found


def _command_line(pid: int) -> str:
    """What a warning names a process by: its command line (a forked one shows its fork
    server's) and where it works."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:200]
        return f"{argv} (in {os.readlink(f'/proc/{pid}/cwd')})"
    except OSError:
        return f"pid {pid}"


@pytest.fixture(autouse=True)
def no_process_outlives_its_test(request, tmp_path):
    """A job a test leaves running (a server's shutdown leaves jobs running, by design) would
    train on through the rest of the run, taking the cores other tests measure on: killed,
    and named in a warning so the test gets mended."""
    yield
    deadline = time.monotonic() + EXIT_GRACE_S  # a job the test just stopped may be ending
    while processes_in(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.05)
    left: dict[int, str] = {}
    for _ in range(3):  # what a killed driver was starting may come up meanwhile
        found = processes_in(tmp_path)
        if not found:
            break
        left.update({pid: _command_line(pid) for pid in found})
        for pid in found:
            try:  # with its group (a cold driver's workers), unless it is this process's
                group = os.getpgid(pid)
                os.kill(pid, signal.SIGKILL)
                if group != os.getpgrp():
                    os.killpg(group, signal.SIGKILL)
            except ProcessLookupError:
                continue
    if left:
        warnings.warn(
            f"{request.node.nodeid} left {len(left)} process(es) running in {tmp_path}; "
            f"killed them: {sorted(left.values())}",
            stacklevel=1,
        )


@pytest.fixture(scope="session")
def warm_launcher() -> Iterator[Callable[[], LocalLauncher]]:
    """Launchers for a `LocalController` whose workers are forked warm, as the service starts
    them (`launch/forkserver.py`), from one fork server for the whole session that preloaded
    torch, the runtime, dynamo, Hugging Face's GPT-2 and Trainer and Lightning (with their
    integrations): a worker starts in milliseconds instead of the seconds an interpreter takes
    to import torch and a framework. A launcher per controller."""
    warm = [
        "torch._dynamo",
        "transformers.models.gpt2",
        "jupyter_edt.integrations.transformers",
        "jupyter_edt.integrations.lightning",
    ]
    with warm_launchers(warm) as launchers:
        yield launchers


@pytest.fixture(scope="session")
def postgresql() -> Iterator[Any]:
    """This pytest worker's throwaway PostgreSQL server (`pgserver.PostgresServer`), started
    at its first use and removed when the worker ends."""
    import pgserver  # psycopg: only where a test asks for PostgreSQL

    if not pgserver.enabled():
        pytest.skip(f"{pgserver.ENABLED_ENV}=0: no PostgreSQL runs")
    server = pgserver.PostgresServer()
    try:
        server.start()
        yield server
    finally:
        server.remove()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request, tmp_path) -> str:
    """A fresh, empty job database, once on each backend the store supports: an SQLite file
    in the test's directory, a new database of the worker's PostgreSQL. For the tests of what
    the database itself does (transactions, schema upgrades, queries), not every API test."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'edt.sqlite'}"
    return request.getfixturevalue("postgresql").database()


@pytest.fixture
def edt_config() -> dict:
    """EDTApp settings for a test; parametrize it to change them. No fork server of its own
    unless a test asks for one (a fork server preloads torch, seconds of CPU per server): its
    jobs start warm from the session's instead (`jp_serverapp`)."""
    return {"virtual_gpus": 4, "warm_workers": False}


@pytest.fixture
def jp_serverapp(jp_serverapp, request):
    """The test's Jupyter server (pytest-jupyter's), whose jobs' processes start from the
    session's fork server (`warm_launcher`), as a deployed service's start from its own
    (`warm_workers` is on by default): seconds faster per job than cold. Not where the test
    configures warm processes itself, nor under `pytest.mark.cold_jobs`."""
    (app,) = jp_serverapp.extension_manager.extension_apps["jupyter_edt"]
    launcher = getattr(getattr(app, "job_service", None), "runner", None)
    launcher = getattr(launcher, "launcher", None)
    if (
        isinstance(launcher, LocalLauncher)
        and launcher.forkserver is None
        and not app.warm_workers
        and request.node.get_closest_marker("cold_jobs") is None
    ):
        launcher.use_forkserver(request.getfixturevalue("warm_launcher")().forkserver)
    return jp_serverapp


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
def edt_app(jp_serverapp):
    """The live server's jupyter_edt extension: its job service, store and device monitor."""
    (app,) = jp_serverapp.extension_manager.extension_apps["jupyter_edt"]
    return app


@pytest.fixture
def server_url(http_server, jp_http_port, jp_base_url) -> str:
    """The live server's base URL (`http_server` makes the app serve on `jp_http_port`)."""
    return f"http://127.0.0.1:{jp_http_port}{jp_base_url}"


@pytest.fixture
def alice(server_url: str):
    """A real client of the live server, as the user alice (see `multiuser.TokenPerUser`)."""
    from jupyter_edt.notebook import EDTClient

    return EDTClient(server_url, "alice")
