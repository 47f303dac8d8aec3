"""The allocation timeline: which job held each device over a time range, and why each change
happened. Pure: the store reads the events (`JobStore.allocation_events`), `JobQueries`
decides whose jobs the caller may see, and `anonymised` hides the others'.

From the job's `allocation` events (each names every device the job holds from then on): a job
holds a device from the event that names it first to the first one that no longer does (a
shrink, a move, a suspension's release, its end). That stretch is one `Interval` of the device,
and every allocation change of the job meanwhile is one of its `changes`: the one that gave the
device, those that resized the job around it, and the one that took it back, each with its
`cause` (what it did to the job), its `trigger` (what in the cluster prompted it) and its
`reason` (the sentence the job's record shows).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..scheduling.inventory import Device

__all__ = ["Change", "DeviceTimeline", "Interval", "anonymised", "device_intervals", "timeline"]


@dataclass(frozen=True)
class Change:
    """One allocation change of a job: its `allocation` event."""

    event_id: int
    time: float
    #: What it did to the job (`ChangeCause`); None in events stored before causes were.
    cause: str | None
    #: What prompted it (`Trigger`); None when nothing is known to have changed.
    trigger: str | None
    #: The sentence of the job's record; None where the caller may not see the job.
    reason: str | None
    #: The GPUs the job holds after it.
    gpus: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "event_id": self.event_id,
            "time": self.time,
            "cause": self.cause,
            "trigger": self.trigger,
            "reason": self.reason,
            "gpus": self.gpus,
        }


@dataclass
class Interval:
    """A job's hold on one device, from `start` to `end` (None: held at the range's end). The
    job's id, owner and name are None where the caller may not see the job."""

    job_id: str | None
    user: str | None
    name: str | None
    start: float
    end: float | None = None
    changes: list[Change] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "user": self.user,
            "name": self.name,
            "start": self.start,
            "end": self.end,
            "changes": [c.to_dict() for c in self.changes],
        }


def device_intervals(
    events: Iterable[Mapping[str, Any]], *, since: float, until: float
) -> dict[str, list[Interval]]:
    """Each device's intervals that overlap [since, until], oldest first.

    `events`: `allocation` events as `JobStore.allocation_events` gives them (`id`, `job_id`,
    `user`, `name`, `time`, `devices`, `reason`, and `cause` and `trigger` where recorded), in
    the order they were recorded, each job's from before `since` when it held devices then.
    Events after `until` are ignored: an interval still open then has no end."""
    if until < since:
        raise ValueError(f"until ({until}) is before since ({since}).")
    held: dict[str, dict[str, Interval]] = {}  # per job, its open interval on each device
    out: dict[str, list[Interval]] = {}
    for ev in events:
        if ev["time"] > until:
            continue
        job_id, devices = ev["job_id"], list(dict.fromkeys(ev.get("devices") or []))
        change = Change(
            event_id=int(ev["id"]),
            time=float(ev["time"]),
            cause=ev.get("cause"),
            trigger=ev.get("trigger"),
            reason=ev.get("reason"),
            gpus=len(devices),
        )
        open_ = held.setdefault(job_id, {})
        for device in [d for d in open_ if d not in devices]:
            interval = open_.pop(device)
            interval.end = change.time
            interval.changes.append(change)
        for device in devices:
            if device in open_:
                open_[device].changes.append(change)
            else:
                interval = Interval(job_id, ev.get("user"), ev.get("name"), change.time)
                interval.changes.append(change)
                open_[device] = interval
                out.setdefault(device, []).append(interval)
    return {
        device: kept
        for device, intervals in out.items()
        if (kept := [i for i in intervals if i.start <= until and (i.end is None or i.end > since)])
    }


def anonymised(interval: Interval) -> Interval:
    """`interval` as a user who may not see its job sees it: held, by nobody they may know,
    and why (what the changes did and what prompted them, not the job's own sentences, which
    may quote its program)."""
    return replace(
        interval,
        job_id=None,
        user=None,
        name=None,
        changes=[replace(c, reason=None) for c in interval.changes],
    )


@dataclass(frozen=True)
class DeviceTimeline:
    """One device of the timeline and its intervals. A device held in the range that is no
    longer present (its node left) has no node or index, and `present` False."""

    id: str
    node: str | None
    index: int | None
    name: str | None
    present: bool
    intervals: Sequence[Interval]

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "node": self.node,
            "index": self.index,
            "name": self.name,
            "present": self.present,
            "intervals": [i.to_dict() for i in self.intervals],
        }


def timeline(
    devices: Sequence[Device], intervals: Mapping[str, Sequence[Interval]]
) -> list[DeviceTimeline]:
    """A row for every present device (held in the range or not), in the inventory's order,
    then one for each device that was held in the range and is gone, by id."""
    present = [
        DeviceTimeline(d.id, d.node, d.index, d.name, True, intervals.get(d.id, ()))
        for d in devices
    ]
    known = {d.id for d in devices}
    gone = [
        DeviceTimeline(device, None, None, None, False, held)
        for device, held in sorted(intervals.items())
        if device not in known
    ]
    return present + gone
