"""The job lifecycle: submit, change, cancel, delete; what the runner reports; recovery after a
restart. The read side is `JobQueries` (queries.py), the scheduling loop `Scheduler`
(scheduler.py); `JobService` is the one object the API and the add-ons hold.

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
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from ..scheduling.allocator import Order
from ..scheduling.inventory import Device
from ..scheduling.monitor import InventoryMonitor
from ..scheduling.policy import Policy, PolicyName, ShareRules
from .archives import safe_extract
from .liverules import LiveConfig, LiveRules, known_policy, policy_of
from .metrics import METRIC_EVENTS, ReadFrom
from .models import LIVE, TERMINAL, ChangeCause, Job, JobConflict, JobSpec, JobState, SpecError
from .progress import ProgressBook
from .protocols import JobRunner
from .queries import JobQueries, NotAllowed
from .scheduler import Scheduler
from .store import JobStore
from .users import UserDirectory

__all__ = ["JobRunner", "JobService", "NotAllowed"]

log = logging.getLogger(__name__)


class JobService(JobQueries):
    def __init__(
        self,
        store: JobStore,
        monitor: InventoryMonitor,
        runner: JobRunner,
        *,
        policy: PolicyName | Policy = "fair-share",
        min_rescale_interval: float = 30.0,
        admin_users: Iterable[str] = (),
        rules: ShareRules | None = None,
        groups: Mapping[str, Sequence[str]] | None = None,
        max_restarts: int = 3,
        admit_user: Callable[[str], object] | None = None,
        clock: Callable[[], float] = time.time,
        restart_interval: float = 60.0,
        restart_cost: float = 30.0,
        admin_groups: Iterable[str] = (),
        load_policy: Callable[[str], Policy] = known_policy,
    ) -> None:
        """`rules`: weights and quotas between users (their groups: `groups` as configured,
        and what each caller's identity says, see `UserDirectory`). `admit_user` raises
        ValueError, a sentence, for a user whose jobs cannot run here (no Unix account).
        `load_policy`: a policy by its name, for a change of the live settings (`live`)."""
        admin_users, admin_groups = tuple(admin_users), tuple(admin_groups)
        users = UserDirectory(
            store, admin_users=admin_users, groups=groups, admin_groups=admin_groups
        )
        super().__init__(store, runner, users=users, rules=rules, clock=clock)
        configured = rules or ShareRules()
        policy_name, policy = policy_of(policy, load_policy)
        if max_restarts < 0:
            raise ValueError(f"max_restarts must be 0 or more, got {max_restarts}.")
        self.max_restarts = max_restarts
        self.admit_user = admit_user
        self.clock = clock
        self._deleted: set[str] = set()  # metrics read before a deletion are dropped
        self.progress = ProgressBook()
        self.scheduler = Scheduler(
            store,
            monitor,
            runner,
            self.progress,
            policy=policy,
            min_rescale_interval=min_rescale_interval,
            clock=clock,
            rules=lambda: users.share_rules(self.configured_rules),
            restart_interval=restart_interval,
            restart_cost=restart_cost,
        )
        runner.report_to(self)
        #: The quotas, weights, groups, administrators and policy, as they change live.
        self.live = LiveConfig(
            LiveRules.parse(
                {
                    "user_quotas": configured.user_quotas,
                    "group_quotas": configured.group_quotas,
                    "user_weights": configured.weights,
                    "user_groups": {u: list(g) for u, g in (groups or {}).items()},
                    "admin_users": list(admin_users),
                    "admin_groups": list(admin_groups),
                    "policy": policy_name,
                }
            ),
            policy,
            load_policy=load_policy,
            records=store,
            use=self._use_rules,
            reschedule=self.reschedule,
        )

    def _use_rules(self, rules: LiveRules, policy: Policy) -> None:
        """Hand changed live settings to the parts that read them; the next allocation (and
        every quota, usage report and metric from now on) goes by them."""
        self.configured_rules = rules.share_rules()
        self.scheduler.policy = policy
        self.users.configure(
            admin_users=rules.admin_users, admin_groups=rules.admin_groups, groups=rules.user_groups
        )

    def config(self, user: str) -> tuple[LiveRules, list[dict[str, Any]]]:
        """The live settings and their latest changes, newest first: an administrator's."""
        if not self.users.is_admin(user):
            raise NotAllowed("Only an administrator reads the service's settings.")
        return self.live.rules, self.store.config_changes()

    async def change_config(self, user: str, patch: object) -> dict[str, Any] | None:
        """An administrator's change of the live settings (a JSON merge patch, checked whole
        before any of it applies); its record, None when nothing changed."""
        if not self.users.is_admin(user):
            raise NotAllowed("Only an administrator changes the service's settings.")
        return await self.live.change(self.live.rules.merged(patch), user=user, source="api")

    async def reschedule(self) -> list[Order]:
        """See `Scheduler.reschedule`."""
        return await self.scheduler.reschedule()

    # commands ---------------------------------------------------------------------------

    MAX_ARCHIVE_FILES = 100_000

    def _admit(self, user: str) -> None:
        """Refuse, before anything is stored, a user whose jobs could not run."""
        if self.admit_user is not None:
            try:
                self.admit_user(user)
            except ValueError as err:
                raise NotAllowed(str(err)) from err

    async def submit(self, user: str, spec: JobSpec) -> Job:
        self._admit(user)
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
        return self.store.get_job(job.id)

    async def submit_archive(
        self,
        user: str,
        spec: JobSpec,
        archive: bytes | BinaryIO,
        *,
        max_bytes: int,
        max_files: int = MAX_ARCHIVE_FILES,
        subdir: str | None = None,
    ) -> Job:
        """Submit a job whose code is an uploaded archive (or its folder `subdir`).

        The archive is unpacked and its entrypoint found before any record exists, so a bad
        upload leaves neither a job nor a directory behind (SpecError naming `file` or
        `entrypoint`).
        """
        self._admit(user)
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

    async def _submit_tree(self, user: str, spec: JobSpec, tree: Path) -> Job:
        """Record the job, then make the checked `tree` its code directory."""
        job = self.store.create_job(user, spec, now=self.clock())
        try:
            await asyncio.to_thread(self.runner.install_code, job.id, tree)
        except OSError as err:
            reason = f"its code could not be stored: {err}"
            self.store.set_state(job.id, JobState.FAILED, reason, now=self.clock())
            raise
        await self.reschedule()
        return self.store.get_job(job.id)

    async def update(
        self, user: str, job_id: str, *, priority: int | None = None, max_gpus: int | None = None
    ) -> Job:
        job = self.get(user, job_id)
        resizable = job.elastic or job.spec.kind == "restart"
        if max_gpus is not None and not resizable and max_gpus < len(job.devices):
            raise JobConflict(
                f"max_gpus must be at least the {len(job.devices)} GPU(s) the job runs on: it "
                "is rigid (a rigid job, or a program that does not use the elastic runtime), "
                "so it cannot shrink",
                "max_gpus",
            )
        self.store.update_limits(job_id, priority=priority, max_gpus=max_gpus, now=self.clock())
        await self.reschedule()
        return self.store.get_job(job_id)

    async def cancel(self, user: str, job_id: str, *, verb: str = "cancelled") -> Job:
        job = self.get(user, job_id)
        if job.state in TERMINAL:
            raise NotAllowed(f"Job {job_id} has already finished ({job.state.value}).")
        self.scheduler.drop_suspension(job_id)  # the cancel below stops the driver it waits for
        if job.devices or job.state in LIVE:
            await self.runner.cancel(job)
        self.store.set_state(job_id, JobState.CANCELLED, f"{verb} by {user}", now=self.clock())
        self.progress.forget(job_id)
        await self.reschedule()
        return self.store.get_job(job_id)

    async def delete(self, user: str, job_id: str, *, verb: str = "deleted") -> Job:
        """Remove the job: stop it if it has not ended, then delete its record, events and
        metrics (keeping what accounting needs: `JobStore.delete_job`), and its job directory
        (code, logs, results). Returns the last record."""
        job = self.get(user, job_id)
        if job.state not in TERMINAL:
            await self.cancel(user, job_id, verb=verb)
        self.feed.flush()  # subscribers see the final state before its events go
        job = self.store.delete_job(job_id, now=self.clock())
        self.feed.forget(job_id)
        self._deleted.add(job_id)
        self.progress.forget(job_id)
        root = self.runner.job_dir(job_id).root
        await asyncio.to_thread(_remove_tree, root)
        log.info("job %s deleted by %s", job_id, user)
        return job

    # nodes --------------------------------------------------------------------------------

    async def drain_node(
        self, user: str, node: str, deadline_s: float | None = None
    ) -> list[Device]:
        """An administrator announces that `node` leaves (a spot instance's notice, a
        maintenance), in `deadline_s` seconds if said: its devices are offered to no job from
        now on, and its jobs shrink off it (or move) at their next step boundary. A cluster's
        inventory is told too (Ray then places nothing new there, and lets the node go once
        nothing runs on it). Returns the node's devices."""
        if not self.users.is_admin(user):
            raise NotAllowed("Only an administrator drains a node.")
        if deadline_s is not None and not deadline_s >= 0:
            raise SpecError("deadline_s", "deadline_s must be 0 or more seconds.")
        monitor = self.scheduler.monitor
        node = monitor.node(node)
        tell = getattr(monitor.inventory, "drain", None)
        if tell is not None:
            await asyncio.to_thread(tell, node, deadline_s)
        devices = monitor.drain(node, deadline_s)
        log.info("node %s drained by %s (deadline in %s s)", node, user, deadline_s)
        await self.reschedule()
        return devices

    async def undrain_node(self, user: str, node: str) -> list[Device]:
        """Take back an administrator's drain (one its inventory reports stays)."""
        if not self.users.is_admin(user):
            raise NotAllowed("Only an administrator takes a drain back.")
        devices = self.scheduler.monitor.undrain(node)
        await self.reschedule()
        return devices

    # reports from the runner (`RunnerReports`) --------------------------------------------

    async def job_running(self, job_id: str, reason: str = "processes started") -> None:
        if self.store.get_job(job_id).state == JobState.STARTING:
            self.store.set_state(job_id, JobState.RUNNING, reason, now=self.clock())

    async def job_elastic(self, job_id: str) -> None:
        """The job's program announced the elastic runtime: it may now be resized in place,
        which may deal it (or a job waiting behind it) devices at once."""
        if self.store.get_job(job_id).state in LIVE:
            self.store.set_elastic(job_id, "the elastic runtime started", now=self.clock())
            await self.reschedule()

    async def job_restarted(self, job_id: str, restart: Mapping[str, Any]) -> None:
        """The job's driver started every worker again (a restart job's resize or failure):
        an event that says why and what the job lost, and the start of a measurement of what
        a restart costs it (decision to first step, `ProgressBook.restart_cost_s`)."""
        if self.store.get_job(job_id).state not in LIVE:
            return
        asked = float(restart.get("asked") or self.clock())
        if restart.get("reason") != "resize":  # a resize was timed from its decision
            self.progress.restart_asked(job_id, asked)
        self.store.record_restart(
            job_id, restart, describe_restart(restart), now=float(restart.get("started") or asked)
        )

    async def job_formed(self, job_id: str, formed: Mapping[str, Any]) -> None:
        """The job's workers formed a group (`formed`: generation, world_size, pause_s and the
        time it formed, as the driver saw it): recorded for the UI's allocation changes."""
        if self.store.get_job(job_id).state in LIVE:
            self.store.record_formed(
                job_id,
                int(formed["generation"]),
                int(formed["world_size"]),
                float(formed.get("pause_s") or 0.0),
                now=float(formed.get("time") or self.clock()),
            )

    async def job_lost(self, job_id: str, why: str, log_tail: str = "") -> None:
        """The job's driver died (`why`: "driver killed by SIGKILL") and its workers with it.
        The job goes back to the queue and resumes from its newest checkpoint, at most
        `max_restarts` times; without a checkpoint, or past that, it fails, saying why."""
        job = self.store.get_job(job_id)
        if job.state not in LIVE:
            return  # cancelled or suspended meanwhile: the report is stale
        now = self.clock()
        step = self.runner.job_dir(job_id).latest_checkpoint_step()
        if step is not None and job.restarts < self.max_restarts:
            where = self.progress.describe_step(job_id, step)
            n = job.restarts + 1
            resume = f"resumes from its checkpoint at {where} (restart {n} of {self.max_restarts})"
            self._requeue_lost(job_id, why, f"{why}; {resume}", now, restart=True)
        else:
            if step is None:
                detail = "no checkpoint to resume from"
            else:
                detail = f"restarted {job.restarts} time(s) already, the most allowed"
            tail = f"; its log ends: {log_tail}" if log_tail else ""
            reason = f"{why}; {detail}{tail}"
            self.store.set_state(job_id, JobState.FAILED, reason, now=now, cause=ChangeCause.LOST)
            self.progress.forget(job_id)
        await self.reschedule()

    async def job_exited(self, job_id: str, succeeded: bool, reason: str) -> None:
        job = self.store.get_job(job_id)
        if job.state not in LIVE:
            return  # cancelled or suspended: the runner's exit report is stale
        if job.state == JobState.STARTING and succeeded:
            self.store.set_state(job_id, JobState.RUNNING, "started", now=self.clock())
        state = JobState.SUCCEEDED if succeeded else JobState.FAILED
        self.store.set_state(job_id, state, reason, now=self.clock())
        self.progress.forget(job_id)
        await self.reschedule()

    def add_metrics(
        self,
        batches: Mapping[str, Sequence[Mapping[str, Any]]],
        positions: Mapping[str, Mapping[str, int]] | None = None,
    ) -> None:
        """Record what jobs' workers reported, for many jobs at once (one transaction), with
        how far their files were read."""
        # the store copies each record as it writes it
        kept = {j: rs for j, rs in batches.items() if j not in self._deleted}
        read = {j: positions[j] for j in kept if j in (positions or {})}
        self.store.add_metrics_many(kept, now=self.clock(), positions=read)
        for job_id, records in kept.items():
            self.progress.observe(job_id, records)

    def read_from(self, job_id: str) -> ReadFrom:
        return ReadFrom(
            self.store.read_positions(job_id), self.store.latest_metrics(job_id, METRIC_EVENTS)
        )

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
            self.scheduler.follow_suspension(job)
        for job in self.store.list_jobs(states=LIVE):
            if self.runner.reattach(job):
                outcome["reattached"].append(job.id)
                continue
            if resume_lost:
                self._requeue_lost(
                    job.id,
                    "processes lost",
                    "its processes were gone after a server restart; it resumes from its "
                    "last checkpoint",
                    now,
                )
                outcome["resumed"].append(job.id)
            else:
                self.store.set_state(
                    job.id,
                    JobState.FAILED,
                    "its processes were gone after a server restart",
                    now=now,
                    cause=ChangeCause.LOST,
                )
                outcome["failed"].append(job.id)
        await self.reschedule()
        return outcome

    def _requeue_lost(
        self, job_id: str, why: str, reason: str, now: float, *, restart: bool = False
    ) -> None:
        """A job whose processes are gone waits for devices again: SUSPENDED (`why`), its
        devices released, then QUEUED (`reason`), to resume from its newest checkpoint."""
        lost = ChangeCause.LOST
        self.store.set_state(job_id, JobState.SUSPENDED, why, now=now, cause=lost)
        self.store.set_devices(job_id, [], why, now=now, cause=lost)
        self.store.set_state(job_id, JobState.QUEUED, reason, now=now, restart=restart)

    async def close(self) -> None:
        """Stop waiting on suspensions (a restart's `recover` takes them up again)."""
        await self.scheduler.close()


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


def describe_restart(restart: Mapping[str, Any]) -> str:
    """What a restart did, as a user reads it: why, at what size, and what it lost (a worker
    killed after the grace loses the steps since the program's last checkpoint)."""
    size = restart.get("world_size")
    killed = list(restart.get("killed") or [])
    exited = dict(restart.get("exited") or {})
    grace = float(restart.get("grace_s") or 0)
    why = str(restart.get("detail") or restart.get("reason") or "restarted")
    text = f"{why}: every worker restarted at {size} GPU(s)"
    if killed:
        return (
            f"{text}; {', '.join(killed)} did not exit within the {grace:g} s grace and "
            "was killed: the steps since its last checkpoint are lost"
        )
    clean = [w for w, code in exited.items() if code == 0]
    if exited and len(clean) == len(exited):
        return f"{text}; its workers exited within the grace (checkpointed, no step lost)"
    if exited:
        codes = ", ".join(f"{w}: {code}" for w, code in exited.items())
        return f"{text}; its workers ended with status {codes}"
    return text
