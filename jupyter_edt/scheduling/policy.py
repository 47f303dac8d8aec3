"""Who gets which device: a pure function of the jobs and the devices.

No I/O, no clock, no globals: the allocator passes `now` in, so every decision can be replayed
and property-tested. The policy works in three steps:

1. Levels. `fair-share` has one level; `priority` has one per priority, highest first. Each
   level is served completely before the next one sees what is left, so a lower-priority job
   shrinks toward its minimum, and waits (is suspended) only when even that is not left.
2. Admission, in a level. Running jobs come first, then waiting jobs in submission order; a job
   is admitted while its minimum fits. A waiting job that does not fit makes the later waiting
   jobs of its level wait too (first come, first served).
3. Counts, in a level. Admitted jobs get their minimum, then the free devices are handed out
   one by one, max-min fair between users and then between each user's jobs, never past a
   job's maximum. A job is below its maximum only when no device idles (work conservation).
4. Placement. A job keeps the devices it holds where it can (fewest moves) and takes new ones
   on the node where it already runs, else on the node with the most free devices (packing).

Stability: a running job rescaled less than `min_rescale_interval` ago keeps its device count,
unless a waiting job is being admitted or devices would otherwise idle.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

PolicyName = Literal["fair-share", "priority"]
POLICY_NAMES: tuple[PolicyName, ...] = ("fair-share", "priority")

Allocation = dict[str, list[str]]


@dataclass(frozen=True)
class JobDemand:
    """What the policy needs to know of a job. `current` lists the devices it holds now."""

    id: str
    user: str
    max_gpus: int
    min_gpus: int = 1
    priority: int = 0
    submitted: float = 0.0
    current: tuple[str, ...] = ()
    last_rescale: float | None = None

    def __post_init__(self) -> None:
        if self.min_gpus < 1:
            raise ValueError(f"Job {self.id}: min_gpus must be at least 1, got {self.min_gpus}.")
        if self.max_gpus < self.min_gpus:
            raise ValueError(
                f"Job {self.id}: max_gpus ({self.max_gpus}) must be at least min_gpus "
                f"({self.min_gpus})."
            )


@dataclass(frozen=True)
class DeviceSlot:
    """A device the policy can give: its id and the node it sits on."""

    id: str
    node: str = "local"


def allocate(
    jobs: Iterable[JobDemand],
    devices: Sequence[DeviceSlot],
    policy: PolicyName = "fair-share",
    *,
    now: float = 0.0,
    min_rescale_interval: float = 0.0,
) -> Allocation:
    """Return the target allocation: every job id mapped to its devices (empty: not running)."""
    if policy not in POLICY_NAMES:
        raise ValueError(f"policy must be one of {', '.join(POLICY_NAMES)}, got {policy!r}.")
    jobs = sorted(jobs, key=lambda j: (j.submitted, j.id))
    if len({j.id for j in jobs}) != len(jobs):
        raise ValueError("Job ids must be unique.")
    if len({d.id for d in devices}) != len(devices):
        raise ValueError("Device ids must be unique.")
    existing = {d.id for d in devices}
    held = {j.id: [d for d in j.current if d in existing] for j in jobs}

    counts = _count(jobs, held, len(devices), policy, frozen={})
    if min_rescale_interval > 0 and not any(counts.get(j.id) and not held[j.id] for j in jobs):
        # No waiting job is being admitted: hold recently rescaled jobs at their count.
        frozen = {
            j.id: len(held[j.id])
            for j in jobs
            if j.id in counts
            and j.last_rescale is not None
            and now - j.last_rescale < min_rescale_interval
            and j.min_gpus <= len(held[j.id]) <= j.max_gpus
        }
        if frozen:
            steady = _count(jobs, held, len(devices), policy, frozen)
            if steady.keys() == counts.keys():  # stability never suspends or delays a job
                counts = steady
    return _place(jobs, counts, devices, held)


def _levels(jobs: Sequence[JobDemand], policy: PolicyName) -> list[list[JobDemand]]:
    if policy == "fair-share":
        return [list(jobs)]
    by_priority: dict[int, list[JobDemand]] = defaultdict(list)
    for job in jobs:
        by_priority[job.priority].append(job)
    return [by_priority[p] for p in sorted(by_priority, reverse=True)]


def _count(
    jobs: Sequence[JobDemand],
    held: dict[str, list[str]],
    capacity: int,
    policy: PolicyName,
    frozen: dict[str, int],
) -> dict[str, int]:
    """Device counts of the admitted jobs; a job missing from the answer waits."""
    counts: dict[str, int] = {}
    free = capacity
    for level in _levels(jobs, policy):
        admitted = []
        running = [j for j in level if held[j.id]]
        waiting = [j for j in level if not held[j.id]]
        for job in running:
            need = frozen.get(job.id, job.min_gpus)
            if need <= free:
                admitted.append(job)
                counts[job.id] = need
                free -= need
        for job in waiting:
            if job.min_gpus > free:
                break  # first come, first served: later jobs of this level wait behind it
            admitted.append(job)
            counts[job.id] = job.min_gpus
            free -= job.min_gpus
        free = _fill(admitted, counts, free, skip=set(frozen))
    if free > 0 and frozen:
        # Stability never leaves a device idle: frozen jobs may still grow into what is left.
        free = _fill([j for j in jobs if j.id in frozen], counts, free, skip=set())
    return counts


def _fill(level: Sequence[JobDemand], counts: dict[str, int], free: int, skip: set[str]) -> int:
    """Hand out `free` devices one at a time, max-min fair between users, then their jobs."""
    growable = [j for j in level if j.id not in skip]
    by_user: dict[str, list[JobDemand]] = defaultdict(list)
    for job in growable:
        by_user[job.user].append(job)
    first_submit = {u: min(j.submitted for j in js) for u, js in by_user.items()}
    while free > 0:
        open_users = [u for u, js in by_user.items() if any(counts[j.id] < j.max_gpus for j in js)]
        if not open_users:
            break
        user_total = {u: sum(counts[j.id] for j in level if j.user == u) for u in open_users}
        user = min(open_users, key=lambda u: (user_total[u], first_submit[u], u))
        job = min(
            (j for j in by_user[user] if counts[j.id] < j.max_gpus),
            key=lambda j: (counts[j.id], j.submitted, j.id),
        )
        counts[job.id] += 1
        free -= 1
    return free


def _place(
    jobs: Sequence[JobDemand],
    counts: dict[str, int],
    devices: Sequence[DeviceSlot],
    held: dict[str, list[str]],
) -> Allocation:
    node_of = {d.id: d.node for d in devices}
    order = {d.id: i for i, d in enumerate(devices)}
    result: Allocation = {j.id: [] for j in jobs}
    taken: set[str] = set()
    # Keep what each job holds, preferring devices on the node where it holds most.
    for job in jobs:
        want = counts.get(job.id, 0)
        home = Counter(node_of[d] for d in held[job.id])
        keep = sorted(held[job.id], key=lambda d: (-home[node_of[d]], order[d]))[:want]
        result[job.id] = keep
        taken.update(keep)
    # Then grow, biggest need first, packing each job onto as few nodes as possible.
    need = sorted(
        (j for j in jobs if counts.get(j.id, 0) > len(result[j.id])),
        key=lambda j: (-(counts[j.id] - len(result[j.id])), j.submitted, j.id),
    )
    for job in need:
        while len(result[job.id]) < counts[job.id]:
            free = [d for d in devices if d.id not in taken]
            free_on = Counter(d.node for d in free)
            mine = Counter(node_of[d] for d in result[job.id])
            missing = counts[job.id] - len(result[job.id])
            device = min(
                free,
                key=lambda d: (
                    -mine[d.node],
                    -min(free_on[d.node], missing),
                    -free_on[d.node],
                    order[d.id],
                ),
            )
            result[job.id].append(device.id)
            taken.add(device.id)
    return {job_id: sorted(ids, key=order.__getitem__) for job_id, ids in result.items()}
