"""Runs job processes on this machine as child processes: the server's drivers each in its own
session (process group), a driver's workers in the driver's (see `LocalLauncher`)."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from ..runtime.jobdir import process_start_time
from .accounts import Account, account_environment
from .base import Launcher, ProcessHandle, ProcessSpec
from .forkserver import FORKSERVER_ENV, ForkClient, ForkServer, StatusPipe

log = logging.getLogger(__name__)

#: How long a start waits for the fork server this launcher's owner started to preload.
FORKSERVER_WAIT_S = 30.0
#: The exit code of an adopted process that ended without recording one.
UNKNOWN_EXIT = -1

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


class LocalProcess(ProcessHandle):
    """A child process; `group`: it leads its own process group, which its signals reach."""

    def __init__(self, spec: ProcessSpec, popen: subprocess.Popen[bytes], group: bool) -> None:
        self.spec = spec
        self.pid = popen.pid
        self._popen = popen
        self._group = group

    @property
    def returncode(self) -> int | None:
        return self._popen.poll()

    def send_signal(self, sig: int) -> None:
        if self._group:
            _signal_group(self.pid, sig)
        else:
            self._popen.send_signal(sig)  # nothing once reaped: its pid may be another's now

    def wait_sync(self, timeout: float | None = None) -> int:
        # a child: block in waitpid, which returns the moment it ends
        try:
            return self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"{self.spec.name} (pid {self.pid}) still runs") from None


class ForkedProcess(ProcessHandle):
    """A process the fork server started for this launcher: it leads its own session; its
    exit code comes through its status pipe."""

    def __init__(self, spec: ProcessSpec, pid: int, status: StatusPipe) -> None:
        self.spec = spec
        self.pid = pid
        self._status = status

    @property
    def returncode(self) -> int | None:
        return self._status.poll()

    def send_signal(self, sig: int) -> None:
        if self._status.poll() is None:  # once it has ended, its pid may be another's
            _signal_group(self.pid, sig)

    def wait_sync(self, timeout: float | None = None) -> int:
        code = self._status.wait(timeout)
        if code is None:
            raise TimeoutError(f"{self.spec.name} (pid {self.pid}) still runs")
        return code


class AdoptedProcess(ProcessHandle):
    """A process this server did not start (a previous server did): watched by its pid.

    Its exit code cannot be collected by a non-parent, so `exit_code` asks the caller's record
    (the job's status file) once the pid is gone; None there means "unknown" (-1). It leads its
    own process group, as everything a LocalLauncher with its own sessions starts.
    """

    def __init__(self, spec: ProcessSpec, pid: int, exit_code: Callable[[], int | None]) -> None:
        self.spec = spec
        self.pid = pid
        self._exit_code = exit_code

    @property
    def returncode(self) -> int | None:
        if process_start_time(self.pid) is not None:
            return None
        code = self._exit_code()
        return UNKNOWN_EXIT if code is None else code

    def send_signal(self, sig: int) -> None:
        _signal_group(self.pid, sig)


class LocalLauncher(Launcher):
    """Starts processes with the job's environment and per-process log files.

    `own_session`: each process leads its own session (the server's drivers), so a stop reaches
    everything it started (data-loader workers, shells), and a Jupyter server that stops or
    restarts does not take running jobs down with it. A driver starts its workers without
    (``LocalController``): they stay in the driver's group, so stopping the driver's group (a
    cancel, or the server cleaning up after a driver that died) stops them as well.

    A spec with an `account` starts as that account (the launcher must be root for another's),
    in a clean environment, with log files that belong to it.

    `forkserver`: the name of this machine's fork server (`launch/forkserver.py`), which
    starts ``python -m`` processes of its interpreter (`warm_python`) warm; the others, and
    all of them while it cannot, start cold. A process it starts leads its own session, and a
    driver's workers (not `own_session`) are killed when their driver dies.

    `die_with_parent`: each process gets SIGKILL when the thread that started it ends
    (Linux's parent-death signal), for a launcher that must not leave processes behind when it
    is killed itself (a Ray actor keeping them, `launch/ray.py`).
    """

    def __init__(
        self,
        own_session: bool = True,
        die_with_parent: bool = False,
        forkserver: str | None = None,
        warm_python: str = sys.executable,
        forkserver_ready: Callable[[float], bool] | None = None,
    ) -> None:
        self.own_session = own_session
        self.die_with_parent = die_with_parent
        self.warm_python = warm_python  # the interpreter the fork server runs
        self.use_forkserver(forkserver, forkserver_ready)

    def use_forkserver(
        self, name: str | None, ready: Callable[[float], bool] | None = None
    ) -> None:
        """Start processes from this fork server from now on (None: cold). `ready` waits
        while it preloads (a start then is quicker than one beside it), for its owner."""
        self.forkserver = name
        self.forkserver_ready = ready
        self._client: ForkClient | None = None if name is None else ForkClient(name)

    def driver_env(self) -> dict[str, str]:
        return {} if self.forkserver is None else {FORKSERVER_ENV: self.forkserver}

    def start_sync(self, spec: ProcessSpec) -> ProcessHandle:
        account = spec.account
        if account is None:
            spec.log_dir.mkdir(parents=True, exist_ok=True)
            env = {**os.environ, **spec.env}
        else:
            if not spec.log_dir.exists():
                spec.log_dir.mkdir(parents=True)
                os.chown(spec.log_dir, account.uid, account.gid, follow_symlinks=False)
            env = account_environment(account, os.environ, spec.env)
        # Virtual devices are CPU slots: hide every GPU. Real ones: exactly the given ones.
        if spec.virtual_devices:
            env["CUDA_VISIBLE_DEVICES"] = ""
        elif spec.devices is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in spec.devices)
        env["PYTHONUNBUFFERED"] = "1"
        if spec.one_log:
            stdout, stderr = merged_log_path(spec.log_dir, spec.name), None
        else:
            stdout, stderr = log_paths(spec.log_dir, spec.name)
        with contextlib.ExitStack() as files:
            out = files.enter_context(_open_log(stdout, account))
            err = (
                subprocess.STDOUT
                if stderr is None
                else files.enter_context(_open_log(stderr, account))
            )
            if self._warm(spec):
                forked = self._fork(spec, env, out.fileno(), out if stderr is None else err)
                if forked is not None:
                    return forked
            popen = subprocess.Popen(
                list(spec.argv),
                cwd=spec.cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=self.own_session,
                preexec_fn=_parent_death_signal() if self.die_with_parent else None,
                **_switch_to(account),
            )
        return LocalProcess(spec, popen, group=self.own_session)

    def _warm(self, spec: ProcessSpec) -> bool:
        """Whether the fork server can start this process: ``python -m module`` of the very
        interpreter it runs (a job's own Python starts cold), and no parent-death tie (a
        forked process's parent is the server)."""
        argv = list(spec.argv)
        return (
            self._client is not None
            and not self.die_with_parent
            and len(argv) >= 3
            and argv[1] == "-m"
            and os.path.abspath(argv[0]) == os.path.abspath(self.warm_python)
        )

    def _fork(
        self, spec: ProcessSpec, env: dict[str, str], out: int, err: Any
    ) -> ForkedProcess | None:
        """Start the process from the fork server; None when it cannot (it is starting, or
        gone): the caller starts it cold."""
        client, ready = self._client, self.forkserver_ready  # as they are now (a change races)
        if client is None or (ready is not None and not ready(FORKSERVER_WAIT_S)):
            return None
        account = spec.account
        try:
            pid, status = client.fork(
                spec.argv,
                env,
                str(spec.cwd),
                out,
                err.fileno(),
                account=None
                if account is None
                else {"uid": account.uid, "gid": account.gid, "groups": list(account.groups)},
                # a driver's workers: killed with their driver, as its process group would be
                die_with_requester=not self.own_session,
                nice=spec.nice,
            )
        except OSError as e:
            log.info("Starting %s cold: the fork server did not: %s", spec.name, e)
            return None
        return ForkedProcess(spec, pid, StatusPipe(status))

    def adopt(
        self, spec: ProcessSpec, pid: int, started: int, exit_code: Callable[[], int | None]
    ) -> AdoptedProcess | None:
        """Watch a process a previous server started, if that very process still runs."""
        if process_start_time(pid) != started:
            return None
        return AdoptedProcess(spec, pid, exit_code)

    def stop_leftovers(self, spec: ProcessSpec, pid: int) -> None:
        """Kill what is left of the process group the ended process led (a cold driver's
        workers run in its group). Its pid names that group only while no process has it: the
        kernel gives a pid to no new process while a group of that id has members, so a pid
        in use again means the group is empty, and is left alone."""
        if process_start_time(pid) is None:  # gone, or a zombie: its group is its own still
            _signal_group(pid, signal.SIGKILL)


def _parent_death_signal() -> Callable[[], None]:
    """What the child runs between fork and exec to be killed when its parent thread ends.
    Set after the switch to the job's account (a change of credentials clears it)."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()

    def arm() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent ended before the signal was armed
            os._exit(1)

    return arm


def _switch_to(account: Account | None) -> dict[str, Any]:
    """Popen's arguments that start the process as `account`: its uid, gid and groups (root
    only). None, or the account this launcher already runs as: nothing to switch."""
    if account is None:
        return {}
    if os.geteuid() != 0:
        if account.uid != os.geteuid():
            raise PermissionError(
                f"Only root starts processes as another Unix account ({account.name!r}); "
                f"this launcher runs as uid {os.geteuid()}."
            )
        return {}
    return {"user": account.uid, "group": account.gid, "extra_groups": list(account.groups)}


def _open_log(path: Path, account: Account | None) -> BinaryIO:
    """A log file opened for appending; with an account, one that belongs to it.

    The log directory is the account's, and a process of that account may have left a link
    there: root must not append to, or hand over, the file it points to. So the directory and
    the file are opened without following links, and the file must be a regular one."""
    if account is None:
        return path.open("ab")
    nofollow = os.O_NOFOLLOW | os.O_CLOEXEC
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | nofollow)
    try:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | nofollow
        fd = os.open(path.name, flags, 0o644, dir_fd=dir_fd)  # O_NONBLOCK: a fifo won't hang
    finally:
        os.close(dir_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise PermissionError(f"{path} is not a regular file; it cannot be a log.")
        os.fchown(fd, account.uid, account.gid)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "ab")


def _signal_group(pid: int, sig: int) -> None:
    # the process leads its own session, so its group id is its pid
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)


def log_paths(log_dir: Path, name: str) -> tuple[Path, Path]:
    return log_dir / f"{name}.stdout", log_dir / f"{name}.stderr"


def merged_log_path(log_dir: Path, name: str) -> Path:
    """The one log of a process started with `ProcessSpec.one_log` (a worker's)."""
    return log_dir / f"{name}.out"


@contextlib.contextmanager
def warm_launchers(
    warm: Sequence[str] = (), timeout: float = 180
) -> Iterator[Callable[[], LocalLauncher]]:
    """Launchers for `LocalController`s (one each) whose workers are forked from one fork
    server of their own that preloaded torch, the runtime and `warm`, as the service's start:
    milliseconds a worker instead of the seconds an interpreter takes. The server stops after.
    RuntimeError when it has not preloaded within `timeout` seconds."""
    server = ForkServer(warm=warm)
    server.start()
    try:
        if not server.wait_ready(timeout):
            raise RuntimeError(f"the fork server did not preload within {timeout:.0f} s")
        yield lambda: LocalLauncher(own_session=False, forkserver=server.name)
    finally:
        server.stop()
