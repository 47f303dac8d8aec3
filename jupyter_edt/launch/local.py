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
from pathlib import Path

from .base import ProcessSpec


class LocalProcess:
    def __init__(self, spec: ProcessSpec, popen: subprocess.Popen[bytes]) -> None:
        self.spec = spec
        self.pid = popen.pid
        self._popen = popen

    @property
    def returncode(self) -> int | None:
        return self._popen.poll()

    async def wait(self) -> int:
        return await asyncio.to_thread(self._popen.wait)


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

    async def stop(self, handle: LocalProcess, grace: float = 10.0) -> int:
        """SIGTERM the process group, then SIGKILL it if it is still there after `grace`."""
        _signal_group(handle.pid, signal.SIGTERM)
        try:
            return await asyncio.wait_for(handle.wait(), grace)
        except asyncio.TimeoutError:
            _signal_group(handle.pid, signal.SIGKILL)
            return await handle.wait()


def _signal_group(pid: int, sig: signal.Signals) -> None:
    # the process leads its own session, so its group id is its pid
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)


def log_paths(log_dir: Path, name: str) -> tuple[Path, Path]:
    return log_dir / f"{name}.stdout", log_dir / f"{name}.stderr"
