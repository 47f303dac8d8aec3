"""Runs job processes on this machine, each in its own session (process group).

Its own session means a cancel reaches everything the process started (data-loader workers,
shells), and a Jupyter server that stops or restarts does not take running jobs down with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

from ..runtime.jobdir import process_start_time
from .base import ProcessSpec

POLL_S = 0.1
#: The exit code of an adopted process that ended without recording one.
UNKNOWN_EXIT = -1


class LocalProcess:
    def __init__(self, spec: ProcessSpec, popen: subprocess.Popen[bytes]) -> None:
        self.spec = spec
        self.pid = popen.pid
        self._popen = popen

    @property
    def returncode(self) -> int | None:
        return self._popen.poll()

    async def wait(self) -> int:
        # Poll rather than park a thread in Popen.wait: the default executor has few threads,
        # and Tornado resolves host names on them.
        while (code := self._popen.poll()) is None:
            await asyncio.sleep(POLL_S)
        return code


class AdoptedProcess:
    """A process this server did not start (a previous server did): watched by its pid.

    Its exit code cannot be collected by a non-parent, so `exit_code` asks the caller's record
    (the job's status file) once the pid is gone; None there means "unknown" (-1).
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

    async def wait(self) -> int:
        while (code := self.returncode) is None:
            await asyncio.sleep(POLL_S)  # no child to wait on: poll the pid
        return code


class LocalLauncher:
    """Starts processes with the job's environment and per-process stdout/stderr files."""

    async def start(self, spec: ProcessSpec) -> LocalProcess:
        return await asyncio.to_thread(self._start, spec)

    def _start(self, spec: ProcessSpec) -> LocalProcess:
        spec.log_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **spec.env}
        # Virtual devices are CPU slots: hide every GPU. Real ones: exactly the given ones.
        env["CUDA_VISIBLE_DEVICES"] = (
            "" if spec.virtual_devices else ",".join(str(i) for i in spec.devices)
        )
        env["PYTHONUNBUFFERED"] = "1"
        stdout, stderr = log_paths(spec.log_dir, spec.name)
        with stdout.open("ab") as out, stderr.open("ab") as err:
            popen = subprocess.Popen(
                list(spec.argv),
                cwd=spec.cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        return LocalProcess(spec, popen)

    def adopt(
        self, spec: ProcessSpec, pid: int, started: int, exit_code: Callable[[], int | None]
    ) -> AdoptedProcess | None:
        """Watch a process a previous server started, if that very process still runs."""
        if process_start_time(pid) != started:
            return None
        return AdoptedProcess(spec, pid, exit_code)

    async def stop(self, handle: LocalProcess | AdoptedProcess, grace: float = 10.0) -> int:
        """SIGTERM the process group, then SIGKILL it if it is still there after `grace`.

        Once the process itself has ended, whatever it started and left in its group (a
        killed driver's workers) is killed: nobody is left to stop them gracefully."""
        _signal_group(handle.pid, signal.SIGTERM)
        try:
            code = await asyncio.wait_for(handle.wait(), grace)
        except asyncio.TimeoutError:
            _signal_group(handle.pid, signal.SIGKILL)
            code = await handle.wait()
        _signal_group(handle.pid, signal.SIGKILL)
        return code


def _signal_group(pid: int, sig: signal.Signals) -> None:
    # the process leads its own session, so its group id is its pid
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)


def log_paths(log_dir: Path, name: str) -> tuple[Path, Path]:
    return log_dir / f"{name}.stdout", log_dir / f"{name}.stderr"
