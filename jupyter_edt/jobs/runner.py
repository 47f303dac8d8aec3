"""Runs each job as one driver process; the driver starts and resizes the job's workers.

The runner prepares the job directory, starts the driver through a Launcher, writes the
allocator's orders into the directory, and watches the driver: its status (running), its
workers' metric events, and its exit.

A job with an account (`DriverRunner(accounts=...)`, a service running as root) runs as its
user's Unix account. Its directory is then 0700 and belongs to that account, everything in it
included, so no other user's job can read it. The service itself keeps reading it as root, and
whatever it writes there later (orders, a restart's job.json) it hands to the directory's owner
as well: the job can read it, and the rule stays one rule, "a job's directory is its user's",
with no file mode to get right. The directory belongs to a user whose processes may have left
links in it, so the service follows none when it writes there or reads a log back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import stat
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from ..launch.accounts import Account, hand_over
from ..launch.base import Launcher, ProcessHandle, ProcessSpec
from ..launch.local import UNKNOWN_EXIT, log_paths
from ..runtime.environment import JOB_ENV_KEY
from ..runtime.jobdir import JobDir, write_json_atomic
from ..scheduling.inventory import Device
from .archives import open_artifact
from .metrics import JobMetricsTail
from .models import Job
from .plugins import JobPlugin
from .protocols import RunnerReports
from .reconnect import DatabaseUnreachable

log = logging.getLogger(__name__)

DRIVER = "driver"

#: Which Unix account a job runs as; None: the service's own (see `launch.accounts`).
Accounts = Callable[[Job], Account | None]


class DriverRunner:
    """`accounts`: the account each job's processes run as (default: the service's own for
    every job). `python` must be an interpreter those accounts can execute."""

    def __init__(
        self,
        launcher: Launcher,
        jobs_dir: str | Path,
        *,
        python: str = sys.executable,
        driver_module: str = "jupyter_edt.runtime.driver",
        poll_interval: float = 0.2,
        stop_grace: float = 10.0,
        suspend_grace: float = 150.0,
        plugins: Sequence[JobPlugin] = (),
        accounts: Accounts | None = None,
        restart_grace: float = 30.0,
        max_restarts: int = 3,
    ) -> None:
        """`restart_grace`: seconds a restart or rigid job's workers have after SIGTERM to
        checkpoint and exit; `max_restarts`: restarts of a restart job after a worker failed."""
        self.launcher = launcher
        self.restart_grace = restart_grace
        self.max_restarts = max_restarts
        self.accounts: Accounts = accounts if accounts is not None else lambda job: None
        self.plugins = tuple(plugins)
        self.jobs_dir = Path(jobs_dir)
        self.python = python
        self.driver_module = driver_module
        self.poll_interval = poll_interval
        self.stop_grace = stop_grace
        self.suspend_grace = suspend_grace
        self._reports: RunnerReports | None = None
        self._drivers: dict[str, ProcessHandle] = {}
        # starts under way (preparing the directory, launching the driver), by job: a cancel
        # meanwhile waits for its driver, which it then stops, or it would start after the
        # cancel and run on, unwatched, for a job that has ended (its directory deleted)
        self._starting: dict[str, asyncio.Future[None]] = {}
        self._watchers: dict[str, asyncio.Task[None]] = {}
        self._tails: dict[str, JobMetricsTail] = {}
        # records read but not stored yet (the database was out of reach), and how far their
        # files had been read: sent with the next ones
        self._unsent: dict[str, tuple[list[dict[str, Any]], dict[str, int]]] = {}
        self._forwarding = asyncio.Lock()  # one reading at a time: records stay in order
        self._collector: asyncio.Task[None] | None = None

    def report_to(self, reports: RunnerReports) -> None:
        self._reports = reports

    def job_dir(self, job_id: str) -> JobDir:
        return JobDir(self.jobs_dir / job_id)

    def log_dir(self, job_id: str) -> Path:
        return self.job_dir(job_id).logs

    # uploaded code and artifacts (jobs/archives.py) -------------------------------------------

    def result_dir(self, job_id: str) -> Path:
        return self.job_dir(job_id).result

    def staging_dir(self) -> Path:
        """Where uploads are unpacked and checked: on the jobs' file system, so that moving a
        checked tree into its job directory is one rename."""
        return self.jobs_dir / ".uploads"

    def install_code(self, job_id: str, tree: Path) -> None:
        """Make an unpacked upload the job's code directory; `_prepare` then keeps it."""
        d = self.job_dir(job_id)
        d.root.mkdir(mode=0o700, parents=True, exist_ok=True)  # private until it is handed over
        tree.rename(d.code)

    # orders from the service --------------------------------------------------------------

    async def start(self, job: Job, devices: Sequence[Device]) -> None:
        """Lay out the job's directory and start its driver. A start, once begun, completes
        and its driver is followed, even if the caller is cancelled meanwhile: a driver no one
        knows would run on, and no cancel would reach it."""
        # known as starting from this moment: a cancel from here on waits for the driver
        started = self._starting[job.id] = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._start(job, devices, started))

    async def _start(
        self, job: Job, devices: Sequence[Device], started: asyncio.Future[None]
    ) -> None:
        try:
            d = self.job_dir(job.id)
            account = self.accounts(job)
            await asyncio.to_thread(self._prepare, d, job, account)
            _write_json(d, d.orders, {"seq": 1, "action": "run", "devices": _devices(devices)})
            handle = await self.launcher.start(self._driver_spec(job, account))
            self._follow(job.id, handle)
        finally:
            del self._starting[job.id]
            started.set_result(None)

    def reattach(self, job: Job) -> bool:
        """After a server restart: follow the job's driver again if it still runs."""
        handle = self._adopt(job)
        if handle is None:
            return False
        self._follow(job.id, handle)
        return True

    def _adopt(self, job: Job) -> ProcessHandle | None:
        """The job's driver that a previous server started, if that very process still runs."""
        d = self.job_dir(job.id)
        status = d.read_status() or {}
        if "pid" not in status or "started" not in status:
            return None

        def exit_code() -> int | None:
            return (d.read_status() or {}).get("exit_code")

        spec = self._driver_spec(job)
        handle = self.launcher.adopt(spec, status["pid"], status["started"], exit_code)
        if handle is None:  # it died while no server watched it: not its workers too
            self.launcher.stop_leftovers(spec, status["pid"])
        return handle

    def _driver_spec(self, job: Job, account: Account | None = None) -> ProcessSpec:
        """The driver's process; `account` only matters to a start (an adopted driver is only
        watched and signalled, which root does to any account's)."""
        d = self.job_dir(job.id)
        return ProcessSpec(
            job_id=job.id,
            name=DRIVER,
            argv=[self.python, "-m", self.driver_module, str(d.root)],
            cwd=d.code,
            log_dir=d.logs,
            # and what it needs to start its workers through the same kind of launcher
            env={**self.job_environment(job), **self.launcher.driver_env()},
            virtual_devices=True,  # the driver never touches a GPU
            account=account,
        )

    def _unfollow(self, job_id: str) -> None:
        self._tails.pop(job_id, None)
        self._unsent.pop(job_id, None)
        watcher = self._watchers.pop(job_id, None)
        if watcher is not None:
            watcher.cancel()

    def _follow(self, job_id: str, handle: ProcessHandle) -> None:
        """Watch the job's driver, and read its metric files on from where the service's
        records of them end (a resumed job's files hold its earlier runs' lines)."""
        assert self._reports is not None, "the service calls report_to() before jobs start"
        self._drivers[job_id] = handle
        d = self.job_dir(job_id)
        start = self._reports.read_from(job_id)
        self._tails[job_id] = JobMetricsTail(d.root, d.logs, self.plugins, start)
        if self._collector is None:
            self._collector = asyncio.create_task(self._collect())
        self._watchers[job_id] = asyncio.create_task(self._watch(job_id, handle))

    async def resize(self, job: Job, devices: Sequence[Device]) -> None:
        self._order(job.id, "run", devices)

    async def suspend(self, job: Job) -> bool:
        """Ask the driver to checkpoint and stop its workers; return once it has exited
        (forced after the grace time), so that its devices are free. True when it stopped by
        itself, having written its checkpoint.

        The watcher goes first, so the driver's exit is not mistaken for the job's end. The
        driver stays known while it checkpoints, so a cancel meanwhile still stops it; one a
        previous server started (a restart during the suspension) is adopted.
        """
        job_id = job.id
        self._unfollow(job_id)
        self._order(job_id, "suspend", [])
        handle = self._drivers.get(job_id) or self._adopt(job)
        if handle is None:  # gone already (a restart): its last report says how it ended
            return (self.job_dir(job_id).read_status() or {}).get("state") == "suspended"
        self._drivers[job_id] = handle
        try:
            return await asyncio.wait_for(handle.wait(), self.suspend_grace) == 0
        except asyncio.TimeoutError:
            await self.launcher.stop(handle, grace=self.stop_grace)
            return False
        finally:
            if self._drivers.get(job_id) is handle:
                del self._drivers[job_id]

    async def cancel(self, job: Job) -> None:
        starting = self._starting.get(job.id)
        if starting is not None:  # its driver is being started: stopped once it runs
            await asyncio.shield(starting)
        self._unfollow(job.id)
        handle = self._drivers.pop(job.id, None)
        if handle is not None:
            await self.launcher.stop(handle, grace=self.stop_grace)

    async def close(self) -> None:
        if self._collector is not None:
            self._collector.cancel()
            self._collector = None
        for watcher in self._watchers.values():
            watcher.cancel()

    # helpers ------------------------------------------------------------------------------

    def job_environment(self, job: Job) -> dict[str, str]:
        """The job's environment (layer 2 of `runtime/environment.py`'s rule): what was
        submitted, then the contract. Its driver gets it, and hands it to every worker it
        starts, on whatever node (it is in job.json)."""
        return {**job.spec.env, **self.contract(job)}

    def contract(self, job: Job) -> dict[str, str]:
        """The environment every process of the job gets: the core's names, then what each
        plugin adds (WMLA's names, say)."""
        d = self.job_dir(job.id)
        env = {
            "EDT_JOB_ID": job.id,
            "EDT_JOB_DIR": str(d.root),
            "EDT_MAX_GPUS": str(job.max_gpus),
            "EDT_JOB_KIND": job.spec.kind,
            "RESULT_DIR": str(d.result),
            "LOG_DIR": str(d.logs),
            # where the program reads its data: the submitter's EDT_DATA_DIR, else its code.
            # A job with an account runs as its user, so a DATA_DIR under the user's home (or
            # anywhere the user may read) is readable by the job, and no other user's is.
            "DATA_DIR": job.spec.env.get("EDT_DATA_DIR", str(d.code)),
        }
        for plugin in self.plugins:
            env.update(plugin.environment(job, d))
        return env

    def _prepare(self, d: JobDir, job: Job, account: Account | None = None) -> None:
        """Lay out the job directory; with an account, hand all of it to that account.

        The first time, the directory is still the service's alone (0700), so everything in it
        is what the service put there (uploaded code, plugins' files) and all of it is handed
        over. Afterwards (a restart) its user's processes have had it: the service then writes
        only its own few files, safely (`_write_json`, `_write_text`), and walks nothing."""
        d.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        d.create()
        owner = _owner(d)  # the account's ids on a restart, else None
        if owner is not None:
            for sub in (d.code, d.result, d.logs):  # any the job removed were made again
                os.chown(sub, *owner, follow_symlinks=False)
        for plugin in self.plugins:
            plugin.prepare(job, d)
        spec = job.spec
        entry = d.code / spec.entrypoint
        if spec.code is not None:
            _write_text(d.code, entry.name, spec.code, owner)
        else:  # an uploaded archive or a script: put into code/ at submission
            if spec.script is not None:
                entry = d.code / Path(spec.script).name
            if not entry.is_file():
                raise FileNotFoundError(f"The job's submitted code has no {entry.name}.")
        _write_json(
            d,
            d.job,
            {
                "id": job.id,
                "program": [str(entry), *spec.args],
                "max_gpus": job.max_gpus,
                "kind": spec.kind,
                "restart_grace_s": self.restart_grace,
                "max_restarts": self.max_restarts,
                JOB_ENV_KEY: self.job_environment(job),
            },
        )
        if account is not None:
            if d.root.stat().st_uid != account.uid:
                hand_over(d.root, account)
            d.root.chmod(0o700)

    def _order(self, job_id: str, action: str, devices: Sequence[Device]) -> None:
        d = self.job_dir(job_id)
        previous = d.read_orders() or {"seq": 0}
        orders = {"seq": previous["seq"] + 1, "action": action, "devices": _devices(devices)}
        _write_json(d, d.orders, orders)

    async def _collect(self) -> None:
        """Forward every followed job's new metric events, all jobs in one go, so the store
        sees one transaction per interval however many jobs run."""
        while True:
            try:
                await self._forward(list(self._tails))
            except DatabaseUnreachable as err:  # kept in `_unsent`, sent once it answers
                log.warning("jupyter-edt: metrics wait for the job database: %s", err)
            await asyncio.sleep(self.poll_interval)

    async def _forward(self, job_ids: list[str]) -> None:
        async with self._forwarding:
            await self._forward_now(job_ids)

    async def _forward_now(self, job_ids: list[str]) -> None:
        assert self._reports is not None, "the service calls report_to() before jobs start"
        tails = {j: self._tails[j] for j in job_ids if j in self._tails}

        def read() -> dict[str, tuple[list[dict[str, Any]], dict[str, int]]]:
            # each tail's positions as of what it just read: stored with those records
            return {j: (t.read_new(), t.positions()) for j, t in tails.items()}

        for j, (records, positions) in (await asyncio.to_thread(read)).items():
            if records:
                held = self._unsent.get(j, ([], {}))[0]
                self._unsent[j] = (held + records, positions)
        batches = {j: self._unsent[j] for j in job_ids if j in self._unsent}
        if batches:
            self._reports.add_metrics(
                {j: records for j, (records, _) in batches.items()},
                {j: positions for j, (_, positions) in batches.items()},
            )
            for j in batches:
                self._unsent.pop(j, None)

    async def _watch(self, job_id: str, handle: ProcessHandle) -> None:
        """Follow one driver until it exits, forwarding what it reports to the service.

        A driver that reported the job's failure fails it. One that died otherwise (a signal,
        an exit without that report) lost the job's processes, not the job: its workers are
        stopped and the service may resume the job from its newest checkpoint."""
        assert self._reports is not None, "the service calls report_to() before jobs start"
        service = self._reports
        d = self.job_dir(job_id)
        seen: dict[str, Any] = {"running": False, "elastic": False, "formed": 0, "restarts": 0}

        async def report(status: dict[str, Any]) -> None:
            # each noted as seen once the service has it: one the database missed comes again
            if not seen["running"] and status.get("state") in ("running", "exited"):
                await service.job_running(job_id, "processes started")
                seen["running"] = True
            # the group's forming first: once elastic, the job may be resized at once, and its
            # first group is recorded before any allocation that follows it
            formed = status.get("formed")
            if isinstance(formed, dict) and int(formed.get("generation", 0)) > seen["formed"]:
                await service.job_formed(job_id, formed)
                seen["formed"] = int(formed["generation"])
            if not seen["elastic"] and status.get("elastic"):
                await service.job_elastic(job_id)
                seen["elastic"] = True
            for restart in status.get("restart_history") or []:
                if isinstance(restart, dict) and int(restart.get("count", 0)) > seen["restarts"]:
                    await service.job_restarted(job_id, restart)
                    seen["restarts"] = int(restart["count"])

        try:
            while handle.returncode is None:
                with contextlib.suppress(DatabaseUnreachable):  # again at the next poll
                    await report(d.read_status() or {})
                await asyncio.sleep(self.poll_interval)
            # a job quicker than a poll: what it reported before it ended still counts
            await self._stored(job_id, lambda: report(d.read_status() or {}))
            # what it wrote last, before its end is recorded
            await self._stored(job_id, lambda: self._forward([job_id]))
            self._tails.pop(job_id, None)
            code = handle.returncode
            self._drivers.pop(job_id, None)
            self._watchers.pop(job_id, None)
            status = d.read_status() or {}
            if code == 0:
                await self._stored(job_id, lambda: service.job_exited(job_id, True, "finished"))
            elif status.get("state") == "failed" and status.get("error"):
                # the program's error as the driver put it (runtime/failures.py), whole: the
                # driver's own exit code says only that training failed
                error = str(status["error"])
                await self._stored(job_id, lambda: service.job_exited(job_id, False, error))
            else:
                await self.launcher.stop(handle, grace=0)  # its orphaned workers
                stderr = _tail_text(log_paths(d.logs, DRIVER)[1], limit=800)
                why = status.get("lost") if status.get("state") == "lost" else None
                await self._stored(
                    job_id, lambda: service.job_lost(job_id, why or _driver_death(code), stderr)
                )
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("Watching job %s failed", job_id)

    async def _stored(self, job_id: str, report: Callable[[], Awaitable[object]]) -> None:
        """`report()`, again while the job database is out of reach: a job's end must be
        recorded, however long that takes."""
        while True:
            try:
                await report()
                return
            except DatabaseUnreachable as err:
                log.warning("jupyter-edt: job %s waits for the job database: %s", job_id, err)
                await asyncio.sleep(max(self.poll_interval, 1.0))


def _devices(devices: Sequence[Device]) -> list[dict[str, Any]]:
    """The devices as orders name them; the UUID lets the driver name a GPU to CUDA by it."""
    return [
        {"id": d.id, "index": d.index, "uuid": d.uuid, "virtual": d.virtual, "node": d.node}
        for d in devices
    ]


def _driver_death(code: int) -> str:
    """How a driver ended, in words: `driver killed by SIGKILL`."""
    if code == UNKNOWN_EXIT:  # adopted after a restart: only the pid was watched
        return "driver ended without reporting why (killed, or the machine ran out of memory)"
    if code < 0:
        try:
            return f"driver killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"driver killed by signal {-code}"
    return f"driver exited with code {code}"


def _owner(d: JobDir) -> tuple[int, int] | None:
    """The (uid, gid) the job directory belongs to when that is not this service (a job with
    an account, after its first preparation): what the service writes there goes to them."""
    st = d.root.stat()
    return None if st.st_uid == os.geteuid() else (st.st_uid, st.st_gid)


def _write_json(d: JobDir, path: Path, data: Any) -> None:
    """`write_json_atomic` into the job directory, the file belonging to the directory's owner
    from the moment it appears (staged, handed over, then renamed into place; no link is
    followed on the way), so the job reads every version of it."""
    owner = _owner(d)
    if owner is None:
        write_json_atomic(path, data)
        return
    staged = path.with_name(f".{path.name}.staged")
    write_json_atomic(staged, data)
    os.chown(staged, *owner, follow_symlinks=False)
    os.replace(staged, path)


def _write_text(directory: Path, name: str, text: str, owner: tuple[int, int] | None) -> None:
    """Write `directory/name`; with an `owner` (a directory its user's processes have had),
    following no link there and handing the file to the owner."""
    if owner is None:
        (directory / name).write_text(text)
        return
    nofollow = os.O_NOFOLLOW | os.O_CLOEXEC
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | nofollow)
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK | nofollow
        fd = os.open(name, flags, 0o644, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    with os.fdopen(fd, "w") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise PermissionError(f"{directory / name} is not a regular file.")
        os.fchown(fd, *owner)
        f.write(text)


def _tail_text(path: Path, limit: int = 2000) -> str:
    """The end of a log, for a failure reason a user can act on. Opened as `open_artifact`
    opens a result, following no link: the log directory may be a user's."""
    try:
        f, size = open_artifact(path.parent, path.name)
    except FileNotFoundError:
        return ""
    with f:
        f.seek(max(0, size - limit))
        data = f.read(limit)
    return data.decode(errors="replace").strip()
