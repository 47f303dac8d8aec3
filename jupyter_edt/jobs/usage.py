"""Accounting: the GPU-seconds each job held and used over a time range, summed by job, user
or group, and the quotas that apply to a user. Pure: the store reads the events
(`JobStore.usage_events`), `JobQueries.usage` decides whose the caller may see.

The definitions, from the job's event log (every allocation change and every state change is
an event, so nothing here is sampled):

- **held** GPU-seconds: the number of devices the job's allocation named, times the time it
  named them. A job holds devices from the allocation that gave them (at STARTING) until the
  allocation that took them back (a shrink, a suspension's release, or the job's end); an
  allocation still held counts up to now.
- **used** GPU-seconds: held while the job was RUNNING, its processes training. Time the job
  held devices while STARTING (processes launching), SUSPENDED (writing its checkpoint before
  it gives them back) or in any other state counts as held, not used. held - used is what the
  scheduling cost: devices taken from everyone else that trained nothing.

Both are clipped to the range [since, until]: what was held at `since` counts from `since`,
which is why the store hands in, for each job, its last state and allocation events before
the range as well as the events within it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .models import JobState

__all__ = [
    "ACCOUNTED_KINDS",
    "NO_GROUP",
    "JobUsage",
    "Quota",
    "UsageBy",
    "UsageReport",
    "UsageRow",
    "aggregate",
    "job_usage",
    "quota_of",
    "total",
]

#: The event kinds accounting reads.
ACCOUNTED_KINDS = ("state", "allocation")

#: The key of the by-group row of users in no group (JSON null: no group name can clash).
NO_GROUP: None = None


class UsageBy(str, enum.Enum):
    """What the rows of a usage report are."""

    USER = "user"
    GROUP = "group"
    JOB = "job"


@dataclass
class JobUsage:
    """One job's GPU-seconds in a range."""

    job_id: str
    user: str
    name: str = ""
    held: float = 0.0
    used: float = 0.0


@dataclass(frozen=True)
class UsageRow:
    """One row of a report: a user, a group (None: users in no group) or a job."""

    key: str | None
    held: float
    used: float
    #: The jobs of the row that held a device in the range.
    jobs: int
    #: The most GPUs the row's user or group may hold at once; None when no quota applies
    #: (and for a job).
    quota: int | None = None
    #: A job row's owner and name.
    user: str | None = None
    name: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "key": self.key,
            "held_gpu_seconds": self.held,
            "used_gpu_seconds": self.used,
            "jobs": self.jobs,
            "quota": self.quota,
        }
        if self.user is not None:
            out["user"] = self.user
            out["name"] = self.name or ""
        return out


@dataclass(frozen=True)
class UsageReport:
    since: float
    until: float
    by: UsageBy
    rows: list[UsageRow]
    #: Every job counted once (a user in two groups counts once here, in two group rows).
    total: UsageRow

    def to_dict(self) -> dict[str, Any]:
        total = self.total.to_dict()
        del total["key"], total["quota"]
        return {
            "since": self.since,
            "until": self.until,
            "by": self.by.value,
            "rows": [row.to_dict() for row in self.rows],
            "total": total,
        }


@dataclass(frozen=True)
class Quota:
    """The quotas that cap what a user's jobs hold at once."""

    user: int | None = None
    groups: Mapping[str, int] = field(default_factory=dict)

    @property
    def gpus(self) -> int | None:
        """The most GPUs the user may hold at once: the least of their quotas (a group's is
        shared with the group's other users); None when no quota applies."""
        limits = [q for q in (self.user, *self.groups.values()) if q is not None]
        return min(limits) if limits else None

    def to_dict(self) -> dict[str, Any]:
        return {"gpus": self.gpus, "user": self.user, "groups": dict(self.groups)}


def quota_of(
    user: str,
    groups: Sequence[str],
    user_quotas: Mapping[str, int],
    group_quotas: Mapping[str, int],
) -> Quota:
    """The quotas of `user`, who belongs to `groups`."""
    return Quota(
        user=user_quotas.get(user),
        groups={g: group_quotas[g] for g in dict.fromkeys(groups) if g in group_quotas},
    )


def job_usage(
    events: Iterable[Mapping[str, Any]], *, since: float, until: float
) -> dict[str, JobUsage]:
    """Each job's held and used GPU-seconds within [since, until], from its events.

    `events`: `state` and `allocation` events (as `JobStore.events` gives them: `job_id`,
    `user`, `time`, `kind`, and `state` or `devices`; optionally the job's `name`), each job's
    in the order they were recorded. Events before `since` only set what the job held and its
    state at `since` (at least each job's last of either kind before the range is needed);
    events after `until` are ignored. `until` is the end of what is counted: pass
    min(until, now), so that an allocation still held counts up to now. Jobs that never held
    a device in the range have held == 0.
    """
    if until < since:
        raise ValueError(f"until ({until}) is before since ({since}).")
    out: dict[str, JobUsage] = {}
    # per job: (time counted up to, devices held, running)
    now_at: dict[str, tuple[float, int, bool]] = {}
    for ev in events:
        job_id = ev["job_id"]
        usage = out.get(job_id)
        if usage is None:
            usage = out[job_id] = JobUsage(job_id, ev["user"], ev.get("name", ""))
            now_at[job_id] = (since, 0, False)
        t, held, running = now_at[job_id]
        at = min(max(ev["time"], since), until)
        if at > t:
            usage.held += held * (at - t)
            if running:
                usage.used += held * (at - t)
            t = at
        if ev["kind"] == "allocation":
            held = len(ev["devices"])
        elif ev["kind"] == "state":
            running = ev["state"] == JobState.RUNNING.value
        now_at[job_id] = (t, held, running)
    for job_id, (t, held, running) in now_at.items():
        if until > t:
            out[job_id].held += held * (until - t)
            if running:
                out[job_id].used += held * (until - t)
    return out


def aggregate(
    jobs: Iterable[JobUsage],
    by: UsageBy,
    *,
    groups_of: Callable[[str], Sequence[str]],
    quota: Callable[[str | None], int | None] = lambda _key: None,
) -> list[UsageRow]:
    """Rows by `by`, most GPU-seconds held first; only jobs that held a device count.

    By group, a job counts in each of its user's groups (`groups_of`: the groups as known
    now), and the jobs of users in no group in one row keyed None. `quota(key)` gives a user
    or group row its quota."""
    sums: dict[str | None, list[float]] = {}
    owners: dict[str, tuple[str, str]] = {}
    for job in jobs:
        if job.held <= 0:
            continue
        if by is UsageBy.JOB:
            keys: Sequence[str | None] = (job.job_id,)
            owners[job.job_id] = (job.user, job.name)
        elif by is UsageBy.USER:
            keys = (job.user,)
        else:
            keys = tuple(dict.fromkeys(groups_of(job.user))) or (NO_GROUP,)
        for key in keys:
            row = sums.setdefault(key, [0.0, 0.0, 0])
            row[0] += job.held
            row[1] += job.used
            row[2] += 1
    rows = [
        UsageRow(
            key=key,
            held=held,
            used=used,
            jobs=int(n),
            quota=None if by is UsageBy.JOB else quota(key),
            user=owners[key][0] if by is UsageBy.JOB and key is not None else None,
            name=owners[key][1] if by is UsageBy.JOB and key is not None else None,
        )
        for key, (held, used, n) in sums.items()
    ]
    rows.sort(key=lambda r: (-r.held, r.key is None, r.key or ""))
    return rows


def total(jobs: Iterable[JobUsage]) -> UsageRow:
    """Every job that held a device, each counted once."""
    counted = [job for job in jobs if job.held > 0]
    return UsageRow(
        key=None,
        held=sum(job.held for job in counted),
        used=sum(job.used for job in counted),
        jobs=len(counted),
    )
