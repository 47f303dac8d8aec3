"""The job lifecycle: submit, schedule, resize, cancel, finish; and the change feed.

The service knows users only as names handed in with each call (the Jupyter identity in the
embedded mode, a forwarded one in the shared mode); it never imports Jupyter.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

from ..scheduling.allocator import SCHEDULED_STATES, Order, plan
from ..scheduling.inventory import Device
from ..scheduling.monitor import InventoryMonitor
from ..scheduling.policy import Policy, PolicyName
from .archives import list_artifacts, open_artifact, safe_extract
from .feed import EventFeed, Published
from .logs import LogChunk, list_logs, read_log
from .models import TERMINAL, JobSpec, JobState, SpecError
from .progress import ProgressBook
from .store import JobStore, UnknownJob

if TYPE_CHECKING:
    from ..runtime.jobdir import JobDir

log = logging.getLogger(__name__)


class JobRunner(Protocol):
    """Runs jobs' processes. It reports back through the service's `job_*` methods."""

    async def start(self, job: dict[str, Any], devices: Sequence[Device]) -> None: ...

    async def resize(self, job: dict[str, Any], devices: Sequence[Device]) -> None: ...

    async def suspend(self, job: dict[str, Any]) -> bool: ...

    async def cancel(self, job: dict[str, Any]) -> None: ...

    def log_dir(self, job_id: str) -> Path: ...

    def reattach(self, job: dict[str, Any]) -> bool: ...

    # uploaded code and artifacts
    def job_dir(self, job_id: str) -> JobDir: ...

    def result_dir(self, job_id: str) -> Path: ...

    def staging_dir(self) -> Path: ...

    def install_code(self, job_id: str, tree: Path) -> None: ...


class NotAllowed(PermissionError):
    """The user may see the job but not do this to it (e.g. cancel a finished job)."""


class JobService:
    def __init__(
        self,
        store: JobStore,
        monitor: InventoryMonitor,
        runner: JobRunner,
        *,
        policy: PolicyName | Policy = "fair-share",
        min_rescale_interval: float = 30.0,
        admin_users: Iterable[str] = (),
        max_restarts: int = 3,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.monitor = monitor  # its latest reading is what the allocator deals out
        self.runner = runner
        self.policy = policy
        self.min_rescale_interval = min_rescale_interval
        self.admin_users = frozenset(admin_users)
        if max_restarts < 0:
            raise ValueError(f"max_restarts must be 0 or more, got {max_restarts}.")
        self.max_restarts = max_restarts
        self.clock = clock
        self._schedule_lock = asyncio.Lock()
        # jobs checkpointing before they release their devices (see `_release_suspended`)
        self._suspending: dict[str, asyncio.Task[None]] = {}
        self._deleted: set[str] = set()  # metrics read before a deletion are dropped
        self.feed = EventFeed(store)
        self.progress = ProgressBook()

    # queries ------------------------------------------------------------------------------

    def is_admin(self, user: str) -> bool:
        return user in self.admin_users

    def get(self, user: str, job_id: str) -> dict[str, Any]:
        """The job, if `user` may see it; others' jobs look absent, so ids leak nothing."""
        job = self.store.get_job(job_id)
        if job["user"] != user and not self.is_admin(user):
            raise UnknownJob(job_id)
        return job

    def list(
        self, user: str, *, states: Iterable[JobState] | None = None, owner: str | None = None
    ) -> list[dict[str, Any]]:
        if not self.is_admin(user):
            if owner not in (None, user):
                raise NotAllowed("Only an administrator can list other users' jobs.")
            owner = user
        return self.store.list_jobs(user=owner, states=states)

    def events(
        self, user: str, *, after: int = 0, limit: int = 1000, job_id: str | None = None
    ) -> list[Published]:
        """The change feed as `user` may see it: their own jobs' events (or one of them), or
        all for an admin."""
        owner = None if self.is_admin(user) else user
        return self.feed.read(after=after, owner=owner, limit=limit, job_id=job_id)

    def holders(self, user: str) -> dict[str, str | None]:
        """Each held device's job id; None where the job is not `user`'s to see."""
        out: dict[str, str | None] = {}
        held = [JobState.STARTING, JobState.RUNNING, JobState.SUSPENDED]  # suspending: still held
        for job in self.store.list_jobs(states=held):
            visible = job["user"] == user or self.is_admin(user)
            for device in job["devices"]:
                out[device] = job["id"] if visible else None
        return out

    def log_names(self, user: str, job_id: str) -> list[str]:
        self.get(user, job_id)
        return list_logs(self.runner.log_dir(job_id))

    def read_log(
        self, user: str, job_id: str, name: str, *, offset: int | None, tail: int | None
    ) -> LogChunk:
        self.get(user, job_id)
        return read_log(self.runner.log_dir(job_id), name, offset=offset, tail=tail)

    # uploaded code and artifacts ----------------------------------------------------------

    MAX_ARCHIVE_FILES = 100_000

    async def submit_archive(
        self,
        user: str,
        spec: JobSpec,
        archive: bytes | BinaryIO,
        *,
        max_bytes: int,
        max_files: int = MAX_ARCHIVE_FILES,
        subdir: str | None = None,
    ) -> dict[str, Any]:
        """Submit a job whose code is an uploaded archive (or its folder `subdir`).

        The archive is unpacked and its entrypoint found before any record exists, so a bad
        upload leaves neither a job nor a directory behind (SpecError naming `file` or
        `entrypoint`).
        """
        staging = self.runner.staging_dir()
        tree = staging / uuid.uuid4().hex
        try:
            try:
                await asyncio.to_thread(
                    safe_extract, archive, tree, max_bytes=max_bytes, max_files=max_files
                )
            except ValueError as err:
                raise SpecError("file", str(err)) from err
            code = tree / subdir if subdir else tree
            if not code.is_dir():
                raise SpecError("file", f"the archive has no folder {subdir}")
            _check_entrypoint(code, spec.entrypoint)
            return await self._submit_tree(user, spec, code)
        finally:
            await asyncio.to_thread(shutil.rmtree, tree, True)

    async def _submit_tree(self, user: str, spec: JobSpec, tree: Path) -> dict[str, Any]:
        """Record the job, then make the checked `tree` its code directory."""
        job = self.store.create_job(user, spec, now=self.clock())
        try:
            await asyncio.to_thread(self.runner.install_code, job["id"], tree)
        except OSError as err:
            reason = f"its code could not be stored: {err}"
            self.store.set_state(job["id"], JobState.FAILED, reason, now=self.clock())
            raise
        await self.reschedule()
        return self.store.get_job(job["id"])

    def result_dir(self, user: str, job_id: str) -> Path:
        """The job's RESULT_DIR, if `user` may see the job (it may not exist yet)."""
        self.get(user, job_id)
        return self.runner.result_dir(job_id)

    async def artifacts(self, user: str, job_id: str) -> list[dict[str, Any]]:
        return await asyncio.to_thread(list_artifacts, self.result_dir(user, job_id))

    async def open_artifact(self, user: str, job_id: str, path: str) -> tuple[BinaryIO, int]:
        """One result file, opened without following links, and its size. ValueError for a
        path that climbs out, FileNotFoundError for one that names no file."""
        return await asyncio.to_thread(open_artifact, self.result_dir(user, job_id), path)

    def changed(self) -> asyncio.Event:
        """See `EventFeed.changed`."""
        return self.feed.changed()

    # commands -----------------------------------------------------------------------------

    async def submit(self, user: str, spec: JobSpec) -> dict[str, Any]:
        if spec.script is not None:
            # Copied now, not when the job starts: a queued job runs what was submitted.
            tree = self.runner.staging_dir() / uuid.uuid4().hex
            try:
                await asyncio.to_thread(_stage_script, Path(spec.script), tree)
                return await self._submit_tree(user, spec, tree)
            finally:
                await asyncio.to_thread(shutil.rmtree, tree, True)
        job = self.store.create_job(user, spec, now=self.clock())
        await self.reschedule()
        return self.store.get_job(job["id"])

    async def update(
        self, user: str, job_id: str, *, priority: int | None = None, max_gpus: int | None = None
    ) -> dict[str, Any]:
        job = self.get(user, job_id)
        if max_gpus is not None and not job["elastic"] and max_gpus < len(job["devices"]):
            raise SpecError(
                "max_gpus",
                f"must be at least the {len(job['devices'])} GPU(s) the job runs on: it is "
                "rigid (its program does not use the elastic runtime), so it cannot shrink",
            )
        self.store.update_limits(job_id, priority=priority, max_gpus=max_gpus, now=self.clock())
        await self.reschedule()
        return self.store.get_job(job_id)

    async def cancel(self, user: str, job_id: str, *, verb: str = "cancelled") -> dict[str, Any]:
        job = self.get(user, job_id)
        if JobState(job["state"]) in TERMINAL:
            raise NotAllowed(f"Job {job_id} has already finished ({job['state']}).")
        suspending = self._suspending.pop(job_id, None)
        if suspending is not None:
            suspending.cancel()  # the cancel below stops the driver it waits for
        if job["devices"] or job["state"] in ("STARTING", "RUNNING"):
            await self.runner.cancel(job)
        self.store.set_state(job_id, JobState.CANCELLED, f"{verb} by {user}", now=self.clock())
        self.progress.forget(job_id)
        await self.reschedule()
        return self.store.get_job(job_id)

    async def delete(self, user: str, job_id: str, *, verb: str = "deleted") -> dict[str, Any]:
        """Remove the job: stop it if it has not ended, then delete its record, events and
        metrics, and its job directory (code, logs, results). Returns the last record."""
        job = self.get(user, job_id)
        if JobState(job["state"]) not in TERMINAL:
            await self.cancel(user, job_id, verb=verb)
        self.feed.flush()  # subscribers see the final state before its events go
        job = self.store.delete_job(job_id)
        self._deleted.add(job_id)
        self.progress.forget(job_id)
        root = self.runner.job_dir(job_id).root
        await asyncio.to_thread(_remove_tree, root)
        log.info("job %s deleted by %s", job_id, user)
        return job

    # reports from the runner --------------------------------------------------------------

    async def job_running(self, job_id: str, reason: str = "processes started") -> None:
        job = self.store.get_job(job_id)
        if job["state"] == JobState.STARTING.value:
            self.store.set_state(job_id, JobState.RUNNING, reason, now=self.clock())

    async def job_elastic(self, job_id: str) -> None:
        """The job's program announced the elastic runtime: it may now be resized in place,
        which may deal it (or a job waiting behind it) devices at once."""
        job = self.store.get_job(job_id)
        if job["state"] in (JobState.STARTING.value, JobState.RUNNING.value):
            self.store.set_elastic(job_id, "the elastic runtime started", now=self.clock())
            await self.reschedule()

    async def job_lost(self, job_id: str, why: str, log_tail: str = "") -> None:
        """The job's driver died (`why`: "driver killed by SIGKILL") and its workers with it.
        The job goes back to the queue and resumes from its newest checkpoint, at most
        `max_restarts` times; without a checkpoint, or past that, it fails, saying why."""
        job = self.store.get_job(job_id)
        if job["state"] not in (JobState.STARTING.value, JobState.RUNNING.value):
            return  # cancelled or suspended meanwhile: the report is stale
        now = self.clock()
        step = self.runner.job_dir(job_id).latest_checkpoint_step()
        if step is not None and job["restarts"] < self.max_restarts:
            where = self.progress.describe_step(job_id, step)
            n = job["restarts"] + 1
            resume = f"resumes from its checkpoint at {where} (restart {n} of {self.max_restarts})"
            self._requeue_lost(job_id, why, f"{why}; {resume}", now, restart=True)
        else:
            if step is None:
                detail = "no checkpoint to resume from"
            else:
                detail = f"restarted {job['restarts']} time(s) already, the most allowed"
            tail = f"; its log ends: {log_tail}" if log_tail else ""
            self.store.set_state(job_id, JobState.FAILED, f"{why}; {detail}{tail}", now=now)
            self.progress.forget(job_id)
        await self.reschedule()

    async def job_exited(self, job_id: str, succeeded: bool, reason: str) -> None:
        job = self.store.get_job(job_id)
        if JobState(job["state"]) in TERMINAL or job["state"] in ("QUEUED", "SUSPENDED"):
            return  # cancelled or suspended: the runner's exit report is stale
        if job["state"] == JobState.STARTING.value and succeeded:
            self.store.set_state(job_id, JobState.RUNNING, "started", now=self.clock())
        state = JobState.SUCCEEDED if succeeded else JobState.FAILED
        self.store.set_state(job_id, state, reason, now=self.clock())
        self.progress.forget(job_id)
        await self.reschedule()

    def add_metrics(self, batches: dict[str, list[dict[str, Any]]]) -> None:
        """Record what jobs' workers reported, for many jobs at once (one transaction)."""
        batches = {j: r for j, r in batches.items() if j not in self._deleted}
        self.store.add_metrics_many(batches, now=self.clock())
        for job_id, records in batches.items():
            self.progress.observe(job_id, records)

    # restart ------------------------------------------------------------------------------

    async def recover(self, *, resume_lost: bool = True) -> dict[str, list[str]]:
        """After a (re)start: follow the jobs whose driver still runs; resume or fail the rest.

        A resumed job goes back to the queue and restarts from its last checkpoint when it
        gets devices again (the runtime resumes from the newest checkpoint it finds).
        """
        outcome: dict[str, list[str]] = {"reattached": [], "resumed": [], "failed": []}
        now = self.clock()
        # uploads a crash interrupted: never recorded as jobs, so nothing refers to them
        await asyncio.to_thread(shutil.rmtree, self.runner.staging_dir(), True)
        for job in self.store.list_jobs(states=[JobState.SUSPENDED]):
            # suspended while the server stopped: its driver may still be checkpointing
            self._suspending[job["id"]] = asyncio.create_task(self._release_suspended(job))
        for job in self.store.list_jobs(states=[JobState.STARTING, JobState.RUNNING]):
            if self.runner.reattach(job):
                outcome["reattached"].append(job["id"])
                continue
            if resume_lost:
                self._requeue_lost(
                    job["id"],
                    "processes lost",
                    "its processes were gone after a server restart; it resumes from its "
                    "last checkpoint",
                    now,
                )
                outcome["resumed"].append(job["id"])
            else:
                self.store.set_state(
                    job["id"],
                    JobState.FAILED,
                    "its processes were gone after a server restart",
                    now=now,
                )
                outcome["failed"].append(job["id"])
        await self.reschedule()
        return outcome

    def _requeue_lost(
        self, job_id: str, why: str, reason: str, now: float, *, restart: bool = False
    ) -> None:
        """A job whose processes are gone waits for devices again: SUSPENDED (`why`), its
        devices released, then QUEUED (`reason`), to resume from its newest checkpoint."""
        self.store.set_state(job_id, JobState.SUSPENDED, why, now=now)
        self.store.set_devices(job_id, [], why, now=now)
        self.store.set_state(job_id, JobState.QUEUED, reason, now=now, restart=restart)

    # scheduling ---------------------------------------------------------------------------

    async def reschedule(self) -> list[Order]:
        """Recompute the target allocation and carry out the orders that reach it.

        Devices held by jobs that are checkpointing before a suspension are not dealt out: an
        order that needs one waits (the job keeps what it holds) until the suspended job has
        released them, which reschedules again. So no order waits on a checkpoint under the
        lock, and no device has two jobs.
        """
        async with self._schedule_lock:
            present = self.monitor.devices
            releasing = {
                d for j in self.store.list_jobs(states=[JobState.SUSPENDED]) for d in j["devices"]
            }
            devices = [d for d in present if d.id not in releasing]
            jobs = self.store.list_jobs(states=[JobState(s) for s in SCHEDULED_STATES])
            orders = plan(
                jobs,
                devices,
                self.policy,
                now=self.clock(),
                min_rescale_interval=self.min_rescale_interval,
                progress=self._progress_of(jobs),
            )
            by_id = {d.id: d for d in devices}
            current = {j["id"]: j["devices"] for j in jobs}
            gone = {d for j in jobs for d in j["devices"]} - {d.id for d in present}
            applied = []
            for order in orders:
                holds = current[order.job_id]
                if (set(order.devices) - set(holds)) & releasing:
                    releasing |= set(holds)  # it waits, keeping its devices meanwhile
                    continue
                lost = [d for d in holds if d in gone]
                await self._apply(order, [by_id[d] for d in order.devices], lost)
                if order.action == "suspend":
                    releasing |= set(holds)
                applied.append(order)
            return applied

    def _progress_of(
        self, jobs: Sequence[dict[str, Any]]
    ) -> dict[str, tuple[float | None, dict[int, float]]]:
        out = {}
        for job in jobs:
            known = self.progress.get(job["id"])
            if known is not None:
                out[job["id"]] = (known.remaining_steps, dict(known.steps_per_s))
        return out

    async def _apply(self, order: Order, devices: Sequence[Device], lost: Sequence[str]) -> None:
        """Carry out one order; `lost` names the devices the job held that vanished."""
        job_id, now = order.job_id, self.clock()
        n = len(devices)
        gone = f"{', '.join(lost)} gone: " if lost else ""
        if order.action == "start":
            self.store.set_state(job_id, JobState.STARTING, f"given {n} GPU(s)", now=now)
            job = self.store.set_devices(job_id, order.devices, "admitted", now=now)
            try:
                await self.runner.start(job, devices)
            except Exception as err:  # a job that cannot start must not block the others
                log.exception("Job %s could not start", job_id)
                self.store.set_state(job_id, JobState.FAILED, f"could not start: {err}", now=now)
        elif order.action == "resize":
            before = len(self.store.get_job(job_id)["devices"])
            verb = "grown" if n > before else "shrunk" if n < before else "moved"
            reason = f"{gone}{verb} to {n} GPU(s)"
            job = self.store.set_devices(job_id, order.devices, reason, now=now)
            await self.runner.resize(job, devices)
        else:
            why = f"{gone}too few GPUs left" if lost else "preempted"
            job = self.store.get_job(job_id)
            how = (
                "checkpointing, then it releases its GPUs"
                if job["elastic"]
                else "it is rigid and cannot checkpoint: stopping it, it starts over later"
            )
            job = self.store.set_state(job_id, JobState.SUSPENDED, f"{why}; {how}", now=now)
            self._suspending[job_id] = asyncio.create_task(self._release_suspended(job))

    async def _release_suspended(self, job: dict[str, Any]) -> None:
        """Wait for a suspended job's checkpoint and its driver's exit, then free its devices,
        queue it again and deal the devices out. Runs off the schedule lock."""
        job_id = job["id"]
        try:
            clean = await self.runner.suspend(job)
        except Exception:
            log.exception("Suspending job %s failed; releasing its GPUs anyway", job_id)
            clean = False
        if self._suspending.get(job_id) is not asyncio.current_task():
            return  # cancelled meanwhile: `cancel` has recorded the job's end
        now = self.clock()
        if self.store.get_job(job_id)["state"] == JobState.SUSPENDED.value:
            if not job["elastic"]:
                how = "stopped (a rigid job cannot checkpoint)"
            else:
                how = "checkpoint written" if clean else "stopped without a clean checkpoint"
            self.store.set_devices(job_id, [], f"suspended: {how}, GPUs released", now=now)
            self.store.set_state(job_id, JobState.QUEUED, "waiting for GPUs", now=now)
        del self._suspending[job_id]
        try:
            await self.reschedule()
        except Exception:
            log.exception("Rescheduling after job %s was suspended failed", job_id)

    async def close(self) -> None:
        """Stop waiting on suspensions (a restart's `recover` takes them up again)."""
        tasks = list(self._suspending.values())
        self._suspending.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _remove_tree(root: Path) -> None:
    # absent: never created (a job deleted before it started), or already gone
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(root)


def _stage_script(script: Path, tree: Path) -> None:
    if script.suffix != ".py" or not script.is_file():
        raise SpecError("script", f"{script} is not a Python file on the server")
    tree.mkdir(parents=True)
    try:
        shutil.copy2(script, tree / script.name)
    except OSError as err:
        raise SpecError("script", f"{script} cannot be read: {err.strerror}") from err


def _check_entrypoint(tree: Path, entrypoint: str) -> None:
    """The uploaded code must hold the file the job runs, at its top level."""
    if (tree / entrypoint).is_file():
        return
    nested = sorted(p.relative_to(tree).as_posix() for p in tree.rglob(entrypoint) if p.is_file())
    hint = f" (it has {nested[0]}: archive the folder's contents, not the folder)" if nested else ""
    raise SpecError("entrypoint", f"the archive has no {entrypoint} at its top level{hint}")
