"""The scheduling loop: stored jobs and present devices in, the allocator's orders carried out.

One lock serialises the loop. A suspension's checkpoint is waited for off the lock (a task per
suspended job), so no order waits on a checkpoint, and its devices are dealt out only once
they are free.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from ..scheduling.allocator import Order, plan
from ..scheduling.inventory import Device
from ..scheduling.monitor import InventoryMonitor
from ..scheduling.policy import POLICIES, JobDemand, Policy, PolicyName, ShareRules
from .models import SCHEDULED, ChangeCause, Job, JobState, effective_batch
from .progress import JobProgress, ProgressBook
from .protocols import JobRunner
from .store import JobStore, UnknownJob
from .triggers import Changes, Snapshot, Trigger, changes, trigger_of

log = logging.getLogger(__name__)


class Scheduler:
    def __init__(
        self,
        store: JobStore,
        monitor: InventoryMonitor,
        runner: JobRunner,
        progress: ProgressBook,
        *,
        policy: PolicyName | Policy,
        min_rescale_interval: float,
        clock: Callable[[], float],
        rules: Callable[[], ShareRules] | None = None,
        restart_interval: float = 60.0,
        restart_cost: float = 30.0,
    ) -> None:
        """`rules`: the weights and quotas between users as they stand at each reschedule
        (groups change as users come); default: the policy's own. `restart_interval`: the
        least time between two resizes of a restart job; `restart_cost`: what one costs it
        (seconds without progress) until its own restarts have been measured."""
        self.store = store
        self.monitor = monitor  # its latest reading is what the allocator deals out
        self.runner = runner
        self.progress = progress
        self.policy = POLICIES[policy]() if isinstance(policy, str) else policy
        self.min_rescale_interval = min_rescale_interval
        self.restart_interval = restart_interval
        self.restart_cost = restart_cost
        self.clock = clock
        self.rules = rules
        self._lock = asyncio.Lock()
        # jobs checkpointing before they release their devices (see `_release_suspended`)
        self._suspending: dict[str, asyncio.Task[None]] = {}
        # what the last reschedule dealt with, and the last changes seen since (`triggers.py`)
        self._seen: Snapshot | None = None
        self._changes = Changes()
        self._suspended_by: dict[str, Trigger | None] = {}  # what prompted each suspension

    def demand(self, job: Job) -> JobDemand:
        """What the policy is told of a job: its record and what its progress measured."""
        known = self.progress.get(job.id)
        return JobDemand(
            id=job.id,
            user=job.user,
            min_gpus=job.min_gpus,
            max_gpus=job.max_gpus,
            priority=job.priority,
            submitted=job.created,
            current=job.devices,
            last_rescale=job.rescaled,
            remaining_steps=None if known is None else known.remaining_steps,
            throughput=None if known is None else (dict(known.steps_per_s) or None),
            rigid=not job.elastic and job.spec.kind != "restart",
            restart_cost_s=self._restart_cost(job, known),
            sizes=allowed_sizes(job),
        )

    def _restart_cost(self, job: Job, known: JobProgress | None) -> float | None:
        """What a resize costs a restart job that is not elastic (None for one resized in
        place): its own measured decision-to-first-step, else the configured default."""
        if job.elastic or job.spec.kind != "restart":
            return None
        if known is not None and known.restart_cost_s is not None:
            return known.restart_cost_s
        return self.restart_cost

    async def reschedule(self) -> list[Order]:
        """Recompute the target allocation and carry out the orders that reach it (`_reschedule`).

        Once begun, a reschedule is carried out whole even if whoever asked for it is cancelled
        meanwhile: a job's watcher, say, cancelled because its job was, in the middle of the
        reschedule its report asked for. Stopped halfway, that left another job's driver
        started with no one knowing it, so no cancel could stop it.
        """
        return await asyncio.shield(self._reschedule())

    async def _reschedule(self) -> list[Order]:
        """Recompute the target allocation and carry out the orders that reach it.

        Devices held by jobs that are checkpointing before a suspension are not dealt out: an
        order that needs one waits (the job keeps what it holds) until the suspended job has
        released them, which reschedules again. So no order waits on a checkpoint under the
        lock, and no device has two jobs.
        """
        async with self._lock:
            # a draining node's devices are offered to nobody: its jobs shrink off it, or move
            present = [d for d in self.monitor.devices if not d.draining]
            draining = {d.id for d in self.monitor.devices if d.draining}
            releasing = {
                d for j in self.store.list_jobs(states=[JobState.SUSPENDED]) for d in j.devices
            }
            devices = [d for d in present if d.id not in releasing]
            jobs = self.store.list_jobs(states=SCHEDULED)
            policy = self.policy
            if self.rules is not None:
                policy.rules = self.rules()
            self._note_changes(jobs, present, devices, policy.rules)
            orders = plan(
                [self.demand(j) for j in jobs],
                devices,
                policy,
                now=self.clock(),
                min_rescale_interval=self.min_rescale_interval,
                restart_interval=self.restart_interval,
            )
            by_id = {d.id: d for d in devices}
            current = {j.id: j.devices for j in jobs}
            gone = {d for j in jobs for d in j.devices} - {d.id for d in present}
            applied = []
            for order in orders:
                holds = current[order.job_id]
                if self._changed_since_planned(order.job_id, holds):
                    continue  # the reschedule that the change asked for plans it again
                if (set(order.devices) - set(holds)) & releasing:
                    releasing |= set(holds)  # it waits, keeping its devices meanwhile
                    continue
                lost = [d for d in holds if d in gone]
                drained = [d for d in lost if d in draining]
                await self._apply(order, [by_id[d] for d in order.devices], lost, drained)
                if order.action == "suspend":
                    releasing |= set(holds)
                applied.append(order)
            self._say_why_waiting(jobs, orders, policy.rules)
            return applied

    def _changed_since_planned(self, job_id: str, planned: Sequence[str]) -> bool:
        """Whether the job is no longer as the plan saw it: an earlier order's wait (a start)
        let a cancel, a delete or a report in. Carried out on that stale state, a start of a
        job cancelled meanwhile would be refused by the store and end the reschedule there,
        and a resize would undo what changed."""
        try:
            job = self.store.get_job(job_id)
        except UnknownJob:
            return True
        return job.state not in SCHEDULED or list(job.devices) != list(planned)

    def _note_changes(
        self,
        jobs: Sequence[Job],
        present: Sequence[Device],
        dealable: Sequence[Device],
        rules: ShareRules,
    ) -> None:
        """Keep what changed since the last reschedule, when something did: what the orders
        of this one (and of later ones, where the policy deferred them) were prompted by. The
        first one sees every job arrive."""
        devices = frozenset(d.id for d in present)
        seen = Snapshot(
            jobs={j.id: (j.priority, j.max_gpus) for j in jobs},
            devices=devices,
            dealable=frozenset(d.id for d in dealable),
            rules=rules,
        )
        before = self._seen or Snapshot(
            jobs={}, devices=devices, dealable=seen.dealable, rules=rules
        )
        if changed := changes(before, seen):
            self._changes = changed
        self._seen = seen

    def _say_why_waiting(
        self, jobs: Sequence[Job], orders: Sequence[Order], rules: ShareRules
    ) -> None:
        """Give each job that stays queued the reason a quota gives it, or take that reason
        back once no quota holds the job (what it then waits for is GPUs)."""
        holds = {j.id: len(j.devices) for j in jobs}
        holds.update({o.job_id: len(o.devices) for o in orders})
        holding: dict[str, int] = {}
        for job in jobs:
            holding[job.user] = holding.get(job.user, 0) + holds[job.id]
        now = self.clock()
        for job in jobs:
            if job.state != JobState.QUEUED or holds[job.id]:
                continue
            why = rules.held_back(job.user, job.min_gpus, holding)
            if why is None and job.reason.startswith("quota"):
                why = "waiting for GPUs"
            if why is not None and why != job.reason:
                self.store.set_waiting_reason(job.id, why, now=now)

    async def _apply(
        self,
        order: Order,
        devices: Sequence[Device],
        lost: Sequence[str],
        drained: Sequence[str] = (),
    ) -> None:
        """Carry out one order; `lost` names the devices the job held that vanished or drain
        (`drained`, those of them whose node drains)."""
        job_id, now = order.job_id, self.clock()
        n = len(devices)
        vanished = [d for d in lost if d not in drained]
        gone = "".join(
            f"{', '.join(ids)} {what}: "
            for ids, what in ((vanished, "gone"), (drained, "draining"))
            if ids
        )
        if order.action == "start":
            self.store.set_state(job_id, JobState.STARTING, f"given {n} GPU(s)", now=now)
            trigger = trigger_of(job_id, n, self._changes)
            job = self.store.set_devices(
                job_id, order.devices, "admitted", now=now, cause=ChangeCause.START, trigger=trigger
            )
            try:
                await self.runner.start(job, devices)
            except Exception as err:  # a job that cannot start must not block the others
                log.exception("Job %s could not start", job_id)
                self.store.set_state(job_id, JobState.FAILED, f"could not start: {err}", now=now)
        elif order.action == "resize":
            before = len(self.store.get_job(job_id).devices)
            verb = "grown" if n > before else "shrunk" if n < before else "moved"
            reason = f"{gone}{verb} to {n} GPU(s)"
            cause = _resize_cause(n - before, vanished, drained)
            trigger = trigger_of(job_id, n - before, self._changes)
            job = self.store.set_devices(
                job_id, order.devices, reason, now=now, cause=cause, trigger=trigger
            )
            if not job.elastic and job.spec.kind == "restart":
                self.progress.restart_asked(job_id, now)  # its cost: from here to a step
            await self.runner.resize(job, devices)
        else:
            why = f"{gone}too few GPUs left" if lost else "preempted"
            how = suspension(self.store.get_job(job_id))
            job = self.store.set_state(job_id, JobState.SUSPENDED, f"{why}; {how}", now=now)
            self._suspended_by[job_id] = trigger_of(job_id, -1, self._changes)  # gives all back
            self.follow_suspension(job)

    # suspensions --------------------------------------------------------------------------

    def follow_suspension(self, job: Job) -> None:
        """Wait, off the lock, for a SUSPENDED job to checkpoint and release its devices."""
        self._suspending[job.id] = asyncio.create_task(self._release_suspended(job))

    def drop_suspension(self, job_id: str) -> None:
        """Stop waiting on the job's suspension (it is being cancelled: the cancel stops the
        driver the wait is for, and records the job's end)."""
        task = self._suspending.pop(job_id, None)
        self._suspended_by.pop(job_id, None)
        if task is not None:
            task.cancel()

    async def _release_suspended(self, job: Job) -> None:
        """Wait for a suspended job's checkpoint and its driver's exit, then free its devices,
        queue it again and deal the devices out."""
        job_id = job.id
        try:
            clean = await self.runner.suspend(job)
        except Exception:
            log.exception("Suspending job %s failed; releasing its GPUs anyway", job_id)
            clean = False
        if self._suspending.get(job_id) is not asyncio.current_task():
            return  # cancelled meanwhile: `cancel` has recorded the job's end
        now = self.clock()
        trigger = self._suspended_by.pop(job_id, None)
        if self.store.get_job(job_id).state == JobState.SUSPENDED:
            if not job.elastic and job.spec.kind == "elastic":
                how = "stopped (a rigid job cannot checkpoint)"
            elif not job.elastic:
                how = (
                    "its workers exited within the grace (checkpointed)"
                    if clean
                    else "its workers were stopped: the steps since its last checkpoint are lost"
                )
            else:
                how = "checkpoint written" if clean else "stopped without a clean checkpoint"
            released = f"suspended: {how}, GPUs released"
            self.store.set_devices(
                job_id, [], released, now=now, cause=ChangeCause.SUSPEND, trigger=trigger
            )
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


def _resize_cause(change: int, vanished: Sequence[str], drained: Sequence[str]) -> ChangeCause:
    """Why a resize happens: its node drains, a device vanished, else the policy's choice
    (`change`: the GPUs it gains, or loses when negative)."""
    if drained:
        return ChangeCause.NODE_DRAIN
    if vanished:
        return ChangeCause.DEVICE_LOST
    if change:
        return ChangeCause.GROW if change > 0 else ChangeCause.SHRINK
    return ChangeCause.MOVE


def suspension(job: Job) -> str:
    """What a suspension does to the job, by its kind, as its event says it."""
    if job.elastic:
        return "checkpointing, then it releases its GPUs"
    if job.spec.kind == "elastic":
        return (
            "it is rigid (its program does not use the elastic runtime) and cannot checkpoint: "
            "stopping it, it starts over later"
        )
    return (
        "SIGTERM to its workers, which may checkpoint within the grace; then it releases its GPUs"
    )


def allowed_sizes(job: Job) -> tuple[int, ...] | None:
    """The GPU counts a job may run at: those its effective batch splits evenly over, for a
    job that keeps one (None: any count from its min to its max)."""
    batch = effective_batch(job.spec)
    if batch is None or job.elastic:
        return None
    return tuple(n for n in range(job.min_gpus, job.max_gpus + 1) if batch % n == 0)
