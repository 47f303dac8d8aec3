"""What prompted the scheduler to change allocations: what changed in the cluster between two
reschedules (a job arrived or left, a priority, a job's max GPUs or the quotas changed, the
devices changed).

An allocation event records it as its `trigger`, beside its `cause` (`ChangeCause`: what the
change did to the job, a shrink say), so the allocation timeline can say why a job shrank:
another job arrived. Pure: the scheduler takes a `Snapshot` at each reschedule and asks
`changes` what differs from the last one, then `trigger_of` for each of its orders.

An order the policy defers (a job rescaled too recently keeps its size a while) is carried out
at a later reschedule in which nothing may have changed: the scheduler keeps the last changes it
saw, so such an order still names what prompted it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["Changes", "Snapshot", "Trigger", "changes", "trigger_of"]


class Trigger(str, enum.Enum):
    """What prompted an allocation change (an `allocation` event's `trigger`)."""

    ARRIVAL = "arrival"  # a job came to the queue: submitted, or queued again
    DEPARTURE = "departure"  # a job left or released its devices: they came free
    PRIORITY = "priority"  # a job's priority changed
    LIMITS = "limits"  # a job's max GPUs changed
    QUOTA = "quota"  # the quotas or weights between users changed
    DEVICES = "devices"  # devices came, vanished or began to drain (a node's loss)


@dataclass(frozen=True)
class Snapshot:
    """What the scheduler deals with at one reschedule."""

    #: The scheduled jobs (queued, starting, running): their (priority, max GPUs).
    jobs: Mapping[str, tuple[int, int]]
    #: The devices present and not draining.
    devices: frozenset[str]
    #: Of those, the ones that can be dealt out (not held by a job that is releasing them).
    dealable: frozenset[str]
    #: The weights and quotas between users (compared with ==).
    rules: object = None


@dataclass(frozen=True)
class Changes:
    """What differs between two snapshots."""

    arrived: frozenset[str] = field(default_factory=frozenset)
    departed: frozenset[str] = field(default_factory=frozenset)
    priority: frozenset[str] = field(default_factory=frozenset)
    limits: frozenset[str] = field(default_factory=frozenset)
    #: A suspended job released its devices (the cluster's devices stayed the same).
    released: bool = False
    quota: bool = False
    devices: bool = False

    def __bool__(self) -> bool:
        return bool(
            self.arrived
            or self.departed
            or self.priority
            or self.limits
            or self.released
            or self.quota
            or self.devices
        )


def changes(before: Snapshot, after: Snapshot) -> Changes:
    """What changed from `before` to `after`."""
    common = before.jobs.keys() & after.jobs.keys()
    same_devices = before.devices == after.devices
    return Changes(
        arrived=frozenset(after.jobs.keys() - before.jobs.keys()),
        departed=frozenset(before.jobs.keys() - after.jobs.keys()),
        priority=frozenset(j for j in common if before.jobs[j][0] != after.jobs[j][0]),
        limits=frozenset(j for j in common if before.jobs[j][1] != after.jobs[j][1]),
        released=same_devices and bool(after.dealable - before.dealable),
        quota=before.rules != after.rules,
        devices=not same_devices,
    )


def trigger_of(job_id: str, gained: int, seen: Changes) -> Trigger | None:
    """What prompted an order for `job_id` that gains `gained` devices (fewer than 0: it
    shrinks; 0: it moves; a start gains its first), given the last changes `seen`; None when
    nothing is known to have changed.

    A change of the job's own comes first (its arrival starts it, its new priority or max
    GPUs resizes it), then the devices' change; then, for a job that grows, devices that came
    free (a departure) before an arrival, and for one that shrinks the other way round."""
    if job_id in seen.arrived:
        return Trigger.ARRIVAL
    if job_id in seen.priority:
        return Trigger.PRIORITY
    if job_id in seen.limits:
        return Trigger.LIMITS
    if seen.devices:
        return Trigger.DEVICES
    freed = bool(seen.departed) or seen.released
    candidates = (
        ((Trigger.ARRIVAL, bool(seen.arrived)), (Trigger.DEPARTURE, freed))
        if gained < 0
        else ((Trigger.DEPARTURE, freed), (Trigger.ARRIVAL, bool(seen.arrived)))
    )
    for trigger, happened in candidates:
        if happened:
            return trigger
    if seen.priority:
        return Trigger.PRIORITY
    if seen.limits:
        return Trigger.LIMITS
    if seen.quota:
        return Trigger.QUOTA
    return None
