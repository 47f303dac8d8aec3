"""The Launcher interface: start a job's processes, watch them, stop them.

A job's driver and each of its workers is one process. The launcher knows nothing of
training; it runs a command with an environment in a directory, with logs going to files, and
can stop everything it started for a job. A cluster engine (Ray) implements the same interface.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class ProcessSpec:
    """One process of a job. `devices` are the GPUs it may use, as CUDA_VISIBLE_DEVICES names
    them: indices or, better, UUIDs, which do not shift when a GPU disappears (none: CPU only)."""

    job_id: str
    name: str  # "driver", "worker-0", ...: unique within the job, used for its log files
    argv: Sequence[str]
    cwd: Path
    log_dir: Path
    env: Mapping[str, str] = field(default_factory=dict)
    devices: Sequence[int | str] = ()
    virtual_devices: bool = False


class ProcessHandle(Protocol):
    """A started process. `returncode` is None while it runs."""

    spec: ProcessSpec
    pid: int

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...


class Launcher(Protocol):
    async def start(self, spec: ProcessSpec) -> ProcessHandle: ...

    def adopt(
        self, spec: ProcessSpec, pid: int, started: int, exit_code: Callable[[], int | None]
    ) -> ProcessHandle | None:
        """Watch a process a previous server started, if that same process still runs."""

    async def stop(self, handle: ProcessHandle, grace: float = 10.0) -> int: ...
