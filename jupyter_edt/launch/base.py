"""The Launcher interface: start a job's processes, watch them, stop them.

A job's driver and each of its workers is one process. The launcher knows nothing of
training; it runs a command with an environment in a directory, with logs going to files, and
can stop a process with everything it started. The server starts each job's driver through it,
and the driver starts its workers through it; a cluster engine (Ray) implements the same
interface, so where a process runs is the launcher's business alone.

An engine implements what does not wait: `Launcher.start_sync` and `Launcher.adopt` (and
`start_all_sync` where starts are best overlapped), and a `ProcessHandle` that tells its exit
code and delivers signals. Waiting and stopping (graceful, then forced) are written here once,
in the two colours the callers need: async for the server, whose event loop must never block,
and blocking (``*_sync``) for the driver, a plain process whose loop and monitor thread have
nothing else to do meanwhile (an event loop there would only move its threads into callbacks).
Both colours are methods of the same object, so the one launcher a deployment configures serves
the server and the drivers alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .accounts import Account

#: How often a wait asks a process whether it has ended, when it cannot block on it.
POLL_S = 0.1


@dataclass(frozen=True)
class ProcessSpec:
    """One process of a job. `devices` are the GPUs it may use, as CUDA_VISIBLE_DEVICES names
    them: indices or, better, UUIDs, which do not shift when a GPU disappears (none: CPU only;
    None: the launcher places no device and CUDA_VISIBLE_DEVICES is whatever `env` and the
    launcher's own environment say, as for the workers of a ``LocalController`` in a test).

    `one_log` interleaves stdout and stderr in one ``<name>.out`` (a worker's log: a traceback
    reads in its place among the prints), else they go to ``<name>.stdout`` and
    ``<name>.stderr``.

    `account`: the Unix account the process runs as, with that account's identity and only a
    safe part of the launcher's environment (see `accounts.account_environment`); starting a
    process as another account needs root. None: the launcher's own account and environment.
    A process started as an account starts its own children as itself (a driver its workers),
    so only the server's specs carry one.

    `node`: where a cluster launcher runs it (a Ray node id); None: wherever the launcher runs.
    `gpus`: how many GPUs it holds in the cluster's accounting (None: one per device). A local
    launcher has one node and ignores both. `job_dir`: the job directory below which its
    working directory, logs and results lie, which a cluster launcher copies to a node that
    does not share this file system, and back.

    `nice`: how much lower than the launcher's own its CPU priority starts (a joiner's, so that
    its start does not slow the job's training processes). Applied only where the process may
    raise it back (the runtime does as it joins, `runtime/priority.py`): by the fork server as
    root; elsewhere ignored."""

    job_id: str
    name: str  # "driver", "w0", ...: unique within the job, used for its log files
    argv: Sequence[str]
    cwd: Path
    log_dir: Path
    env: Mapping[str, str] = field(default_factory=dict)
    devices: Sequence[int | str] | None = ()
    virtual_devices: bool = False
    one_log: bool = False
    account: Account | None = None
    node: str | None = None
    gpus: int | None = None
    job_dir: Path | None = None
    nice: int = 0


class ProcessHandle(ABC):
    """A started (or adopted) process. `returncode` is None while it runs.

    `vanished`: it was lost with the place it ran (its node died, or could not be reached or
    placed), not ended by its program; a driver does not charge such a loss to the program's
    budget of replacements, nor tries that place again at once."""

    spec: ProcessSpec
    pid: int
    vanished: bool = False

    @property
    @abstractmethod
    def returncode(self) -> int | None:
        """Its exit code once it has ended (-N: killed by signal N), without waiting."""

    @property
    def silent_s(self) -> float:
        """How long a question about the process has gone unanswered: its launcher asks
        another machine, which may be gone (0: it answers, or it runs here, where nothing needs
        asking)."""
        return 0.0

    def abandon(self) -> None:
        """Take the process for lost without waiting for an answer (its peers' group failed on
        it and it stays silent): kill it wherever it may still run, and end this handle."""
        self.send_signal(signal.SIGKILL)

    @abstractmethod
    def send_signal(self, sig: int) -> None:
        """Deliver `sig` to the process and whatever it started that its launcher stops with it
        (locally: its process group when it leads one, even once the leader itself is gone)."""

    async def wait(self) -> int:
        # Poll rather than park a thread: the default executor has few threads, and Tornado
        # resolves host names on them.
        while (code := self.returncode) is None:
            await asyncio.sleep(POLL_S)
        return code

    def wait_sync(self, timeout: float | None = None) -> int:
        """Block until it has ended; TimeoutError after `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.returncode) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"{self.spec.name} (pid {self.pid}) still runs")
            time.sleep(POLL_S)
        return code


class Launcher(ABC):
    """Starts, adopts and stops processes. Subclasses implement `start_sync` and `adopt`."""

    @abstractmethod
    def start_sync(self, spec: ProcessSpec) -> ProcessHandle:
        """Start the process; return as soon as it runs (never wait for its end)."""

    def start_all_sync(self, specs: Sequence[ProcessSpec]) -> list[ProcessHandle]:
        """Start several processes, returning their handles in order. One after the other
        here, where a start returns at once; a launcher whose starts wait on something remote
        (a Ray actor to be made) overlaps them, so a job that grows by n waits for one start,
        not n. When one start raises, those already started are stopped first: the caller
        never got their handles, so nobody else would."""
        started: list[ProcessHandle] = []
        try:
            for spec in specs:
                started.append(self.start_sync(spec))
        except BaseException:
            self._stop_all_sync(started)
            raise
        return started

    def _stop_all_sync(self, handles: Sequence[ProcessHandle]) -> None:
        for handle in handles:
            with contextlib.suppress(Exception):
                self.stop_sync(handle, grace=0)

    @abstractmethod
    def adopt(
        self, spec: ProcessSpec, pid: int, started: int, exit_code: Callable[[], int | None]
    ) -> ProcessHandle | None:
        """Watch a process a previous server started, if that same process still runs.

        `started` tells that process from a later one with the same pid; `exit_code` reads its
        end from the caller's own record (its status file), since a non-parent cannot."""

    def stop_leftovers(self, spec: ProcessSpec, pid: int) -> None:
        """Stop what is left of what a process a previous server started had started, now that
        it has ended (`adopt` found it gone): a driver's workers, which would otherwise train
        on beside the job's next driver. Nothing by default: a launcher
        whose processes end with the one that started them has nothing to do."""
        return None

    def available(self, node: str | None) -> bool:
        """Whether a process may be placed on `node` now: not one this launcher has seen go
        (its processes vanished) or that its cluster has taken out. Always, for one machine."""
        return True

    def driver_env(self) -> dict[str, str]:
        """What a driver this launcher starts needs in its environment to start its workers
        through the same kind of launcher (`launch.workers_launcher` reads it)."""
        return {}

    def reachable_host(self) -> str:
        """The address at which processes this launcher starts reach a server in this
        process (a driver's store): loopback here, the node's address on a cluster."""
        return "127.0.0.1"

    async def start(self, spec: ProcessSpec) -> ProcessHandle:
        return await asyncio.to_thread(self.start_sync, spec)

    async def stop(self, handle: ProcessHandle, grace: float = 10.0) -> int:
        """SIGTERM the process, then SIGKILL it if it is still there after `grace` (no grace:
        SIGKILL at once). Once it has ended, whatever it left behind is killed too (a killed
        driver's workers): nobody is left to stop them gracefully."""
        handle.send_signal(signal.SIGTERM if grace > 0 else signal.SIGKILL)
        try:
            code = await asyncio.wait_for(handle.wait(), grace)
        except asyncio.TimeoutError:
            handle.send_signal(signal.SIGKILL)
            code = await handle.wait()
        handle.send_signal(signal.SIGKILL)
        return code

    def stop_sync(self, handle: ProcessHandle, grace: float = 10.0) -> int:
        """:meth:`stop`, blocking: the same signals at the same moments."""
        handle.send_signal(signal.SIGTERM if grace > 0 else signal.SIGKILL)
        try:
            code = handle.wait_sync(grace)
        except TimeoutError:
            handle.send_signal(signal.SIGKILL)
            code = handle.wait_sync()
        handle.send_signal(signal.SIGKILL)
        return code
