"""The read side of the job service: what a user may see of jobs, their feed, logs and
results. Nothing here changes a record.

Users are names handed in with each call (the Jupyter identity in the embedded mode, a
forwarded one in the shared mode); a job of someone else looks absent, so ids leak nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, BinaryIO

from ..runtime import tracebacks
from ..scheduling.policy import ShareRules
from .allocations import Interval, anonymised, device_intervals
from .archives import list_artifacts, open_artifact
from .feed import EventFeed, Published
from .logs import FOLD_TAIL, FoldedLogs, LogChunk, list_logs, read_log
from .models import HOLDING, Job, JobState
from .protocols import JobRunner
from .store import JobStore, UnknownJob
from .usage import Quota, UsageBy, UsageReport, aggregate, job_usage, quota_of, total
from .users import UserDirectory

__all__ = ["JobQueries", "NotAllowed"]


class NotAllowed(PermissionError):
    """The user may see the job but not do this to it (e.g. cancel a finished job)."""


class JobQueries:
    def __init__(
        self,
        store: JobStore,
        runner: JobRunner,
        *,
        users: UserDirectory,
        rules: ShareRules | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`rules`: the configured weights and quotas (usage rows and `quota` show them)."""
        self.store = store
        self.runner = runner
        self.users = users
        self.configured_rules = rules or ShareRules()
        self.clock = clock
        self.feed = EventFeed(store)

    def is_admin(self, user: str) -> bool:
        return self.users.is_admin(user)

    def get(self, user: str, job_id: str) -> Job:
        """The job, if `user` may see it; others' jobs look absent."""
        job = self.store.get_job(job_id)
        if job.user != user and not self.is_admin(user):
            raise UnknownJob(job_id)
        return job

    def list(
        self, user: str, *, states: Iterable[JobState] | None = None, owner: str | None = None
    ) -> list[Job]:
        if not self.is_admin(user):
            if owner not in (None, user):
                raise NotAllowed("Only an administrator can list other users' jobs.")
            owner = user
        return self.store.list_jobs(user=owner, states=states)

    def last_event_id(self) -> int:
        """The newest event's id: read before a snapshot (a list), the feed after it brings
        every change the snapshot may lack."""
        return self.store.last_event_id()

    def events(
        self, user: str, *, after: int = 0, limit: int = 1000, job_id: str | None = None
    ) -> list[Published]:
        """The change feed as `user` may see it: their own jobs' events (or one of them), or
        all for an admin."""
        owner = None if self.is_admin(user) else user
        return self.feed.read(after=after, owner=owner, limit=limit, job_id=job_id)

    def changed(self) -> asyncio.Event:
        """See `EventFeed.changed`."""
        return self.feed.changed()

    def holders(self, user: str) -> dict[str, str | None]:
        """Each held device's job id; None where the job is not `user`'s to see."""
        out: dict[str, str | None] = {}
        for job in self.store.list_jobs(states=HOLDING):
            visible = job.user == user or self.is_admin(user)
            for device in job.devices:
                out[device] = job.id if visible else None
        return out

    def allocations(
        self, user: str, *, since: float, until: float | None = None
    ) -> tuple[float, int, dict[str, list[Interval]]]:
        """Which job held each device within [since, until] (until: now by default) and why
        each change happened (``allocations.py``): the range's end, the id of the newest event
        the answer includes (the live feed goes on after it), and each device's intervals.

        An administrator sees every job; anyone else sees their own, and the others' intervals
        `anonymised`: a device held, by a job they may not name."""
        until = _range_end(since, until, self.clock())
        # read first: an event recorded meanwhile is in the answer and in the feed after it
        last_id = self.last_event_id()
        events = self.store.allocation_events(since, until)
        by_device = device_intervals(events, since=since, until=until)
        if not self.is_admin(user):
            by_device = {
                device: [i if i.user == user else anonymised(i) for i in intervals]
                for device, intervals in by_device.items()
            }
        return until, last_id, by_device

    def quota(self, user: str) -> Quota:
        """The quotas that cap what `user`'s jobs hold at once: theirs, and their groups'."""
        rules = self.configured_rules
        return quota_of(user, self.users.groups_of(user), rules.user_quotas, rules.group_quotas)

    def usage(
        self, user: str, *, since: float = 0.0, until: float | None = None, by: UsageBy
    ) -> UsageReport:
        """GPU-seconds held and used within [since, until] (until: now by default, or `since`
        when that is later), in rows `by` user, group or job (``usage.py`` says what held and
        used mean).

        An administrator's report counts everyone's jobs. Anyone else's counts their own jobs
        only, whatever `by`: by user, their row; by group, a row for each of their groups with
        their own share of it (others' usage, even summed by group, is not theirs to see)."""
        now = self.clock()
        until = _range_end(since, until, now)
        owner = None if self.is_admin(user) else user
        events = self.store.usage_events(since, until, user=owner)
        jobs = job_usage(events, since=since, until=max(since, min(until, now))).values()
        rules = self.configured_rules
        quotas = {UsageBy.USER: rules.user_quotas, UsageBy.GROUP: rules.group_quotas}.get(by, {})
        rows = aggregate(
            jobs,
            by,
            groups_of=self.users.groups_of,
            quota=lambda key: None if key is None else quotas.get(key),
        )
        return UsageReport(since=since, until=until, by=by, rows=rows, total=total(jobs))

    def metrics(self, user: str, job_id: str, *, after: int = 0) -> list[dict[str, Any]]:
        self.get(user, job_id)
        return self.store.metrics(job_id, after=after)

    def log_names(self, user: str, job_id: str) -> list[str]:
        self.get(user, job_id)
        return list_logs(self.runner.log_dir(job_id))

    def read_log(
        self, user: str, job_id: str, name: str, *, offset: int | None, tail: int | None
    ) -> LogChunk:
        self.get(user, job_id)
        return read_log(self.runner.log_dir(job_id), name, offset=offset, tail=tail)

    def fold_logs(
        self, user: str, job_id: str, *, names: list[str] | None = None, tail: int = FOLD_TAIL
    ) -> FoldedLogs:
        """What a user reads of a failed job's logs (`runtime.tracebacks.fold_logs`, as the
        notebook's report): the last `tail` lines of each of `names` (every log by default),
        each distinct traceback once with the processes that printed it, the user's frames
        first and the framework's folded, then what each log printed besides."""
        self.get(user, job_id)
        log_dir = self.runner.log_dir(job_id)
        names = list_logs(log_dir) if names is None else names
        tails = {name: read_log(log_dir, name, tail=tail).text for name in names}
        return FoldedLogs(tracebacks.fold_logs(tails), tuple(names))

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


def _range_end(since: float, until: float | None, now: float) -> float:
    """A range's end: `until`, or now (`since` when that is later); never before `since`."""
    until = max(now, since) if until is None else until
    if until < since:
        raise ValueError(f"until ({until}) is before since ({since}).")
    return until
