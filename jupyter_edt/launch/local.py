"""Runs job processes on this machine as child processes: the server's drivers each in its own
session (process group), a driver's workers in the driver's (see `LocalLauncher`)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

from ..runtime.jobdir import process_start_time
from .base import Launcher, ProcessHandle, ProcessSpec

#: The exit code of an adopted process that ended without recording one.
UNKNOWN_EXIT = -1


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
    """

    def __init__(self, own_session: bool = True) -> None:
        self.own_session = own_session

    def start_sync(self, spec: ProcessSpec) -> LocalProcess:
        spec.log_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **spec.env}
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
            out = files.enter_context(stdout.open("ab"))
            err = subprocess.STDOUT if stderr is None else files.enter_context(stderr.open("ab"))
            popen = subprocess.Popen(
                list(spec.argv),
                cwd=spec.cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=self.own_session,
            )
        return LocalProcess(spec, popen, group=self.own_session)

    def adopt(
        self, spec: ProcessSpec, pid: int, started: int, exit_code: Callable[[], int | None]
    ) -> AdoptedProcess | None:
        """Watch a process a previous server started, if that very process still runs."""
        if process_start_time(pid) != started:
            return None
        return AdoptedProcess(spec, pid, exit_code)


def _signal_group(pid: int, sig: int) -> None:
    # the process leads its own session, so its group id is its pid
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)


def log_paths(log_dir: Path, name: str) -> tuple[Path, Path]:
    return log_dir / f"{name}.stdout", log_dir / f"{name}.stderr"


def merged_log_path(log_dir: Path, name: str) -> Path:
    """The one log of a process started with `ProcessSpec.one_log` (a worker's)."""
    return log_dir / f"{name}.out"
