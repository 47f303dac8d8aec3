"""Who gets which device: a pure function of the jobs and the devices.

No I/O, no clock, no globals: the allocator passes `now` in, so every decision can be replayed
and property-tested. The policy works in four steps:

1. Levels. `fair-share` has one level; `priority` has one per priority, highest first. Each
   level is served completely before the next one sees what is left, so a lower-priority job
   shrinks toward its minimum, and waits (is suspended) only when even that is not left.
2. Admission, in a level. Running jobs come first, then waiting jobs in submission order; a job
   is admitted while its minimum fits. A waiting job that does not fit makes the later waiting
   jobs of its level wait too (first come, first served).
3. Counts, in a level. Admitted jobs get their minimum, then the free devices are handed out
   one by one, max-min fair between users and then between each user's jobs, never past a
   job's maximum. A job is below its maximum only when no device idles (work conservation),
   with the two exceptions below: restart jobs held at their count, and allowed sizes.
   Devices that do not split evenly go to the users and jobs expected to finish first (by
   the remaining steps and throughput jobs report, unknown last, then submission order):
   fairness fixes every count up to that one device, and finishing a job sooner gives its
   devices to all the others sooner (`_finish_order`).
4. Placement. A job that sits on as few nodes as its count allows keeps the devices it holds
   (fewest moves) and grows on its own nodes first. New jobs and jobs split over more nodes
   than they need are placed afresh, biggest first, on the fewest nodes (packing: a job split
   over nodes synchronises over the network and runs slower); a split job that would gain no
   node keeps its devices (`_place`).

Stability: a running job rescaled less than `min_rescale_interval` ago keeps its device count,
unless a waiting job is being admitted or devices would otherwise idle.

Rigid jobs (`JobDemand.rigid`: their program does not use the elastic runtime, or has not
announced it yet) cannot be resized: one that holds devices keeps exactly those, or gets none
(under `priority`, it is suspended, which stops it); one that lost a device gets none.

Restart jobs (`JobDemand.restart_cost_s`: a torchrun program, resized by restarting all its
workers, during which none of its devices make progress) are resized only when it pays:
- it grows from n to m devices only when the remaining time that saves (remaining steps over
  the throughput at n, less the same at m) is more than `RESTART_PAYBACK` times its restart
  cost (`restart_pays`), and not within `restart_interval` of its last resize. A job that has
  not reported its remaining steps and a throughput grows as the policy says, at most once per
  interval (its gain is unknown; the interval bounds its restarts' share of its time).
- it shrinks when a waiting job is admitted, at any time, toward its minimum as any job does.
  Otherwise, once its interval has passed, it may shrink to a count at which its (estimated)
  throughput is as high as now (it gives up devices it does not use: `goodput` takes back an
  exploration that did not pay); and at any time when keeping its count would suspend another
  running job (a higher priority level taking its devices). Fair-share rebalancing between
  running jobs does not restart it otherwise.
- at an unchanged count it keeps its very devices (a move would restart it too). One that lost
  a device, or holds a count it may not keep, restarts anyway: it is counted like a new job.
A device that a held restart job does not take goes to the other jobs, or idles.

Sizes (`JobDemand.sizes`): a job runs only at the counts listed (a restart job's global batch
must split evenly over its workers). Its minimum and maximum are raised and lowered to allowed
counts; a count between two sizes is rounded down, and the devices that frees go to the other
jobs, or idle (`_fill`). A rigid job that runs keeps what it holds, allowed or not.

`goodput` keeps the levels and replaces steps 2 to 4 (see `_count_goodput` and `_repack`): it
admits waiting jobs least remaining work first, gives each spare device where it speeds a job
up most, weighted toward jobs with little remaining time, judged from the throughput each job
reported at the device counts it ran on (`throughput_curve`), and never grows a job past its
knee, the count beyond which its (estimated) throughput no longer rises. So `goodput` leaves a
device idle rather than give it to a job it would not speed up: unlike `fair-share` it is not
work-conserving, by design. A job that grows may also be moved onto fewer nodes, since the
runtime's one in-place rescale covers both and a job split over nodes runs slower.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

PolicyName = Literal["fair-share", "priority", "goodput"]
POLICY_NAMES: tuple[PolicyName, ...] = ("fair-share", "priority", "goodput")

#: `goodput` assumes a count above the largest measured one adds this fraction of the last
#: measured gain per device (conservative: half) ...
EXTRAPOLATION_EFFICIENCY = 0.5
#: ... and that nothing beyond this multiple of the largest measured count is faster still: a
#: job explores at most a doubling per decision before its throughput there is known.
EXPLORATION_FACTOR = 2
#: `goodput` weighs a job's relative speed-up by (number of jobs with at least its remaining
#: time) ** RANK_EXPONENT. Speeding up a job that finishes early helps every job still running
#: after it (they get its devices sooner), and for concave speed-ups the optimal shares grow as
#: a power of that rank (heSRPT, Berg et al., 2020); 2 measured best on the Pollux workloads
#: (1.5 to 2.5 within 1%, see bench/simulate.py).
RANK_EXPONENT = 2.0
#: A restart job grows from n to m devices only when the time that saves it (remaining steps
#: over the throughput at n, less the same at m) is more than this multiple of its restart's
#: cost. Twice: a job that grows is likely to pay a second restart before it ends (a newcomer's
#: admission shrinks it at any time), and the saving rests on an estimated throughput at m
#: (extrapolated when m was never measured), so one restart's worth of gain is no margin.
RESTART_PAYBACK = 2.0

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
    #: Optimizer steps left (epochs x dataset size / effective batch, less the steps done). The
    #: effective batch is constant, so this does not depend on the device count. `goodput`
    #: schedules by it; `fair-share` and `priority` only order ties by it (`_finish_order`).
    remaining_steps: float | None = None
    #: Throughput measured at each device count the job ran on, in steps/s (with
    #: `remaining_steps`, it gives the remaining time). Unmeasured counts: `throughput_curve`.
    throughput: Mapping[int, float] | None = field(default=None, hash=False)
    #: Runs on the devices it started with or on none: it is never resized or moved.
    rigid: bool = False
    #: None: resized in place at a step boundary (an elastic job: a pause of a second or less,
    #: not weighed). Seconds: resized only by restarting all its workers at the new size (a
    #: restart job, torchrun's contract), during which none of its devices make progress, from
    #: the decision to its first step at the new size. The job service gives its own measured
    #: restarts (a default until the first). Such a job grows only when that pays
    #: (`RESTART_PAYBACK`), at most once per `restart_interval`, and shrinks for a waiting
    #: job's admission, or to give up devices it does not use (see the module docstring).
    restart_cost_s: float | None = None
    #: The device counts it may run at (None: any from `min_gpus` to `max_gpus`); only those
    #: between the two count. A restart job keeps its global batch by giving each worker an equal
    #: share, so it runs only at counts that divide that batch (the job service lists them).
    #: Stored sorted, each once.
    sizes: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.min_gpus < 1:
            raise ValueError(f"Job {self.id}: min_gpus must be at least 1, got {self.min_gpus}.")
        if self.max_gpus < self.min_gpus:
            raise ValueError(
                f"Job {self.id}: max_gpus ({self.max_gpus}) must be at least min_gpus "
                f"({self.min_gpus})."
            )
        cost = self.restart_cost_s
        if cost is not None and not (math.isfinite(cost) and cost >= 0):
            raise ValueError(f"Job {self.id}: restart_cost_s must be 0 or more, got {cost}.")
        if self.sizes is not None:
            sizes = tuple(sorted({int(n) for n in self.sizes}))
            object.__setattr__(self, "sizes", sizes)  # frozen: normalised once, here
            if not any(self.min_gpus <= n <= self.max_gpus for n in sizes):
                raise ValueError(
                    f"Job {self.id}: sizes {list(sizes)} hold no count between min_gpus "
                    f"({self.min_gpus}) and max_gpus ({self.max_gpus})."
                )

    @property
    def restarts(self) -> bool:
        """Whether a resize restarts it (`restart_cost_s` given, and not rigid)."""
        return self.restart_cost_s is not None and not self.rigid


@dataclass(frozen=True)
class DeviceSlot:
    """A device the policy can give: its id and the node it sits on."""

    id: str
    node: str = "local"


@dataclass(frozen=True)
class ShareRules:
    """What a deployment sets between users: each user's weight in the fair share (default
    1: a user of weight 2 gets twice the devices of one of weight 1 when both want more), and
    the most devices a user, or all the users of a group together, may hold at once (quotas;
    none by default). A job that its user's or a group's quota keeps from starting waits,
    and does not hold back the jobs behind it."""

    weights: Mapping[str, float] = field(default_factory=dict)
    user_quotas: Mapping[str, int] = field(default_factory=dict)
    group_quotas: Mapping[str, int] = field(default_factory=dict)
    #: The groups each user belongs to (a group quota counts the devices of all of them).
    groups: Mapping[str, Sequence[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for user, weight in self.weights.items():
            if not weight > 0:
                raise ValueError(f"The weight of user {user!r} must be positive, got {weight}.")
        for kind, quotas in (("user", self.user_quotas), ("group", self.group_quotas)):
            for name, quota in quotas.items():
                if quota < 0:
                    raise ValueError(
                        f"The quota of {kind} {name!r} must be 0 or more, got {quota}."
                    )

    def weight(self, user: str) -> float:
        return self.weights.get(user, 1.0)

    def groups_of(self, user: str) -> tuple[str, ...]:
        """The user's groups, each once (a group named twice counts a device once)."""
        return tuple(dict.fromkeys(self.groups.get(user, ())))

    def held_back(self, user: str, want: int, holding: Mapping[str, int]) -> str | None:
        """Why a quota keeps `user` from holding `want` devices more, when the users hold
        `holding` (devices per user); None when no quota does. The sentence starts with
        "quota", the waiting reason a job record shows."""
        held = holding.get(user, 0)
        if user in self.user_quotas and held + want > self.user_quotas[user]:
            quota = self.user_quotas[user]
            return f"quota: {user} holds {held} of their {quota} GPU(s), and this job needs {want}"
        for group in self.groups_of(user):
            if group in self.group_quotas:
                quota = self.group_quotas[group]
                members = [u for u in holding if group in self.groups_of(u)]
                in_use = sum(holding[u] for u in members)
                if in_use + want > quota:
                    return (
                        f"quota: group {group} holds {in_use} of its {quota} GPU(s), "
                        f"and this job needs {want}"
                    )
        return None


class _Ledger:
    """The devices counted against each user's and group's quota while counts are made."""

    def __init__(self, rules: ShareRules) -> None:
        self.rules = rules
        self.by_user: Counter[str] = Counter()
        self.by_group: Counter[str] = Counter()

    def room(self, user: str) -> float:
        """How many more devices `user` may hold (inf: no quota applies)."""
        rules = self.rules
        room = math.inf
        if user in rules.user_quotas:
            room = rules.user_quotas[user] - self.by_user[user]
        for group in rules.groups_of(user):
            if group in rules.group_quotas:
                room = min(room, rules.group_quotas[group] - self.by_group[group])
        return room

    def take(self, user: str, n: int) -> None:
        self.by_user[user] += n
        for group in self.rules.groups_of(user):
            self.by_group[group] += n


def allocate(
    jobs: Iterable[JobDemand],
    devices: Sequence[DeviceSlot],
    policy: PolicyName | Policy = "fair-share",
    *,
    now: float = 0.0,
    min_rescale_interval: float = 0.0,
    restart_interval: float = 0.0,
) -> Allocation:
    """Return the target allocation: every job id mapped to its devices (empty: not running).
    `policy`: a name of `POLICIES`, or a `Policy`. `min_rescale_interval`: seconds an elastic
    job keeps its count after a rescale (unless a waiting job is admitted or devices would
    idle); `restart_interval`: seconds a restart job (`JobDemand.restart_cost_s`) keeps its
    count after its last resize, unless a waiting job is admitted."""
    if isinstance(policy, str):
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICY_NAMES)}, got {policy!r}.")
        policy = POLICIES[policy]()
    return policy.allocate(
        jobs,
        devices,
        now=now,
        min_rescale_interval=min_rescale_interval,
        restart_interval=restart_interval,
    )


class Policy:
    """An allocation policy: levels served in turn, counts within them, then placement.

    Subclasses choose the three steps; the frame (rigid jobs, stability) is the same for all.
    Pure: no I/O, no clock, no globals. A deployment may configure its own subclass by its
    import path (``EDTApp.policy``)."""

    name = "custom"

    def __init__(self, rules: ShareRules | None = None) -> None:
        #: Weights and quotas between users (`ShareRules`); none by default.
        self.rules = rules or ShareRules()

    def allocate(
        self,
        jobs: Iterable[JobDemand],
        devices: Sequence[DeviceSlot],
        *,
        now: float = 0.0,
        min_rescale_interval: float = 0.0,
        restart_interval: float = 0.0,
    ) -> Allocation:
        jobs = sorted(jobs, key=lambda j: (j.submitted, j.id))
        if len({j.id for j in jobs}) != len(jobs):
            raise ValueError("Job ids must be unique.")
        if len({d.id for d in devices}) != len(devices):
            raise ValueError("Device ids must be unique.")
        existing = {d.id for d in devices}
        held = {j.id: [d for d in j.current if d in existing] for j in jobs}
        # A rigid job that lost a device cannot shrink onto the others: it gets none (stops).
        stopped = [j for j in jobs if j.rigid and len(held[j.id]) < len(j.current)]
        jobs = [j if j.rigid and held[j.id] else _within_sizes(j) for j in jobs if j not in stopped]
        pinned = {j.id: len(held[j.id]) for j in jobs if j.rigid and held[j.id]}

        # Restart jobs: the counts each may take this time (`_restart_counts`), first with
        # shrinking allowed; kept at their count after all when no waiting job is admitted.
        bounds = _restart_counts(jobs, held, now, restart_interval)
        loose = [_narrow(j, bounds[j.id][0]) if j.id in bounds else j for j in jobs]
        counts = self.count(loose, held, len(devices), frozen=pinned)
        admitting = any(counts.get(j.id) and not held[j.id] for j in jobs)
        jobs = loose
        if not admitting and any(counts.get(i, 0) < len(held[i]) for i in bounds):
            kept = [_narrow(j, bounds[j.id][1]) if j.id in bounds else j for j in jobs]
            steady = self.count(kept, held, len(devices), frozen=pinned)
            if steady.keys() == counts.keys():  # holding one never suspends another job
                counts, jobs = steady, kept
        if min_rescale_interval > 0 and not admitting:
            # No waiting job is being admitted: hold recently rescaled jobs at their count.
            frozen = {
                j.id: len(held[j.id])
                for j in jobs
                if j.id in counts
                and j.last_rescale is not None
                and now - j.last_rescale < min_rescale_interval
                and _fits(j, len(held[j.id]))
            } | pinned
            if frozen.keys() - pinned.keys():
                steady = self.count(jobs, held, len(devices), frozen)
                if steady.keys() == counts.keys():  # stability never suspends or delays a job
                    counts = steady
        recent = {
            j.id
            for j in jobs
            if j.last_rescale is not None and now - j.last_rescale < min_rescale_interval
        }
        # A restart job moved at the same count would restart for nothing: it stays put.
        unmoved = {i for i in bounds if counts.get(i) == len(held[i])}
        placed = self.place(jobs, counts, devices, held, recent | unmoved | pinned.keys())
        return placed | {j.id: [] for j in stopped}

    def levels(self, jobs: Sequence[JobDemand]) -> list[list[JobDemand]]:
        """Groups of jobs served one after the other, each completely before the next."""
        raise NotImplementedError

    def count(
        self,
        jobs: Sequence[JobDemand],
        held: dict[str, list[str]],
        capacity: int,
        frozen: dict[str, int],
    ) -> dict[str, int]:
        """Device counts of the admitted jobs (`frozen`: counts that must not change); a job
        missing from the answer waits."""
        return _count(self.levels(jobs), jobs, held, capacity, frozen, self.rules)

    def place(
        self,
        jobs: Sequence[JobDemand],
        counts: dict[str, int],
        devices: Sequence[DeviceSlot],
        held: dict[str, list[str]],
        keep: set[str],
    ) -> Allocation:
        """Which devices give each job its count (`keep`: jobs that keep the devices they
        hold: recently rescaled or rigid)."""
        return _place(jobs, counts, devices, held, keep)


class FairShare(Policy):
    """One level: max-min fair between users, then between each user's jobs."""

    name = "fair-share"

    def levels(self, jobs: Sequence[JobDemand]) -> list[list[JobDemand]]:
        return [list(jobs)]


class Priority(Policy):
    """One level per priority, highest first; fair share within a level."""

    name = "priority"

    def levels(self, jobs: Sequence[JobDemand]) -> list[list[JobDemand]]:
        return _by_priority(jobs)


class Goodput(Priority):
    """Priority levels; within one, spare devices where they speed a job up most
    (`_count_goodput`), and growing jobs re-packed (`_repack`)."""

    name = "goodput"

    def count(
        self,
        jobs: Sequence[JobDemand],
        held: dict[str, list[str]],
        capacity: int,
        frozen: dict[str, int],
    ) -> dict[str, int]:
        return _count_goodput(self.levels(jobs), held, capacity, frozen, self.rules)

    def place(
        self,
        jobs: Sequence[JobDemand],
        counts: dict[str, int],
        devices: Sequence[DeviceSlot],
        held: dict[str, list[str]],
        keep: set[str],
    ) -> Allocation:
        return _repack(jobs, counts, devices, held)


POLICIES: dict[str, type[Policy]] = {p.name: p for p in (FairShare, Priority, Goodput)}


def _by_priority(jobs: Sequence[JobDemand]) -> list[list[JobDemand]]:
    by_priority: dict[int, list[JobDemand]] = defaultdict(list)
    for job in jobs:
        by_priority[job.priority].append(job)
    return [by_priority[p] for p in sorted(by_priority, reverse=True)]


def allowed_counts(job: JobDemand) -> list[int]:
    """The device counts `job` may run at, smallest first: its `sizes` between its min and
    max, or every count from min to max."""
    if job.sizes is None:
        return list(range(job.min_gpus, job.max_gpus + 1))
    return [n for n in job.sizes if job.min_gpus <= n <= job.max_gpus]


def _fits(job: JobDemand, n: int) -> bool:
    return job.min_gpus <= n <= job.max_gpus and (job.sizes is None or n in job.sizes)


def _within_sizes(job: JobDemand) -> JobDemand:
    """`job` with its min and max raised and lowered to its nearest allowed counts, so that
    admission reserves a count it may run at and no count past its largest is handed out."""
    if job.sizes is None:
        return job
    return _narrow(job, allowed_counts(job))


def _narrow(job: JobDemand, counts: Sequence[int]) -> JobDemand:
    """`job` allowed only `counts` (ascending, not empty)."""
    if job.sizes is None and list(counts) == list(range(job.min_gpus, job.max_gpus + 1)):
        return job
    return replace(job, min_gpus=counts[0], max_gpus=counts[-1], sizes=tuple(counts))


def _restart_counts(
    jobs: Sequence[JobDemand], held: dict[str, list[str]], now: float, interval: float
) -> dict[str, tuple[list[int], list[int]]]:
    """For each running restart job that may keep its count, the counts it may take this
    time: (when a waiting job is admitted, otherwise).

    Its count now; once `interval` has passed since its last resize, also the larger counts
    whose gain pays for the restart (`restart_pays`) and the smaller ones at which its
    (estimated) throughput is as high as now: devices it does not use, say after `goodput`
    grew it to a count that turned out no faster (the shrink costs it the restart and no
    speed). When a waiting job is admitted, also any smaller count, at any time. A restart
    job that holds nothing, lost a device (its workers restart anyway) or holds a count it may
    not keep is counted like any job, and so is not listed.
    """
    out = {}
    for job in jobs:
        n = len(held[job.id])
        if not job.restarts or not n or n < len(job.current) or not _fits(job, n):
            continue
        allowed = allowed_counts(job)
        smaller = [m for m in allowed if m <= n]
        if job.last_rescale is not None and now - job.last_rescale < interval:
            out[job.id] = (smaller, [n])
            continue
        grow = [m for m in allowed if m > n and restart_pays(job, n, m)]
        measured = _measured(job)
        curve = _curve(measured, n) if measured else None
        unused = [m for m in smaller if curve and curve[m] >= curve[n]] or [n]
        out[job.id] = (smaller + grow, unused + grow)
    return out


def restart_pays(job: JobDemand, n: int, m: int) -> bool:
    """Whether growing restart job `job` from `n` to `m` devices pays for its restart.

    It does when the remaining time it saves, remaining steps over the (estimated, see
    `throughput_curve`) throughput at n less the same at m, is more than `RESTART_PAYBACK`
    times `restart_cost_s`. A job that has not reported both its remaining steps and a
    throughput has no known gain: it grows as the policy says, as an elastic job would, and
    `restart_interval` alone bounds what its restarts cost (at most one per interval).
    """
    measured = _measured(job)
    if job.remaining_steps is None or not measured:
        return True
    curve = _curve(measured, m)
    steps = max(0.0, job.remaining_steps)
    saved = steps / curve[n] - steps / curve[m]
    return saved > RESTART_PAYBACK * (job.restart_cost_s or 0.0)


def _count(
    levels: Sequence[Sequence[JobDemand]],
    jobs: Sequence[JobDemand],
    held: dict[str, list[str]],
    capacity: int,
    frozen: dict[str, int],
    rules: ShareRules,
) -> dict[str, int]:
    """Device counts of the admitted jobs, `levels` served in turn; a job missing from the
    answer waits."""
    counts: dict[str, int] = {}
    free = capacity
    ledger = _Ledger(rules)
    finish: dict[str, tuple[float, float]] = {}

    def order(job: JobDemand) -> tuple[float, float]:
        if job.id not in finish:
            finish[job.id] = _finish_order(job, len(held[job.id]))
        return finish[job.id]

    for level in levels:
        # first come, first served: a waiting job that does not fit holds back later ones
        waiting = [j for j in level if not held[j.id]]
        admitted, free = _admit(level, waiting, held, counts, free, frozen, ledger)
        free = _fill(admitted, counts, free, order, skip=set(frozen), ledger=ledger)
    if free > 0 and frozen:
        # Stability never leaves a device idle: frozen jobs may still grow into what is left.
        # (A frozen job that no longer fits is not admitted here; `allocate` then drops this
        # count, as stability never suspends a job.)
        grown = [j for j in jobs if j.id in frozen and j.id in counts and not j.rigid]
        free = _fill(grown, counts, free, order, skip=set(), ledger=ledger)
    return counts


def _admit(
    level: Sequence[JobDemand],
    waiting: Sequence[JobDemand],
    held: dict[str, list[str]],
    counts: dict[str, int],
    free: int,
    frozen: dict[str, int],
    ledger: _Ledger,
) -> tuple[list[JobDemand], int]:
    """Admission in a level, fair between users: running jobs keep their minimum (or frozen
    count), then the `waiting` jobs, in the order given, get theirs while it fits; but a
    user's jobs are admitted only while their minimums stay within the user's fair share
    (`_user_shares`), except the user's first job. A job past its user's share is
    admitted after, only with devices no user under their share could take: so a user with
    three running jobs gives one up (it is suspended) when a second user needs its device.
    A waiting job over a quota waits and holds back no one; one that does not fit holds back
    those after it. Returns the admitted jobs and the devices still free."""
    shares = _user_shares(level, free, ledger)
    taken: Counter[str] = Counter()
    admitted: list[JobDemand] = []
    deferred: list[JobDemand] = []

    def need(job: JobDemand) -> int:
        return frozen.get(job.id, job.min_gpus)

    def admit(job: JobDemand) -> None:
        nonlocal free
        admitted.append(job)
        counts[job.id] = need(job)
        free -= need(job)
        taken[job.user] += need(job)
        ledger.take(job.user, need(job))

    def within_share(job: JobDemand) -> bool:
        """A user's first job always is: a job needing more than its user's share is not
        overtaken for ever by smaller ones."""
        return not taken[job.user] or taken[job.user] + need(job) <= shares[job.user] + 1e-9

    running = [j for j in level if held[j.id]]
    for job in running:
        if need(job) <= free and need(job) <= ledger.room(job.user):
            if within_share(job) or job.id in frozen:
                admit(job)
            else:
                deferred.append(job)
    queue = list(waiting)
    for k, job in enumerate(queue):
        if job.min_gpus > ledger.room(job.user):
            continue
        if not within_share(job):
            deferred.append(job)
            continue
        if job.min_gpus > free:
            deferred.extend(j for j in queue[k + 1 :] if not within_share(j))
            break
        admit(job)
    # Past their users' shares: only devices that the users under their share cannot use.
    for job in deferred:
        # (whole devices: a share of 1.5 reserves 1, so ties go to admission)
        reserve = sum(
            max(0, min(math.floor(shares[u] + 1e-9), _most(admitted, u)) - taken[u])
            for u in shares
            if u != job.user
        )
        if need(job) <= free - reserve + 1e-9 and need(job) <= ledger.room(job.user):
            admit(job)
        elif not held[job.id]:
            break  # a waiting job that does not fit holds back the waiting ones after it
    return admitted, free


def _most(jobs: Sequence[JobDemand], user: str) -> int:
    """The most devices `user`'s jobs among `jobs` can take."""
    return sum(j.max_gpus for j in jobs if j.user == user)


def _user_shares(level: Sequence[JobDemand], free: int, ledger: _Ledger) -> dict[str, float]:
    """Each user's max-min fair share of `free` devices, for their weight: water-filling up
    to what the user's jobs can take (their maximums, within the user's quota room)."""
    cap: dict[str, float] = defaultdict(float)
    for job in level:
        cap[job.user] += job.max_gpus
    for user in cap:
        cap[user] = min(cap[user], ledger.room(user))
    weight = ledger.rules.weight
    shares = {user: 0.0 for user in cap}
    left, open_users = float(free), set(cap)
    while left > 1e-9 and open_users:
        total = sum(weight(u) for u in open_users)
        step = {u: left * weight(u) / total for u in open_users}
        full = {u for u in open_users if shares[u] + step[u] >= cap[u] - 1e-9}
        if not full:
            for u in open_users:
                shares[u] += step[u]
            break
        for u in full:
            left -= cap[u] - shares[u]
            shares[u] = cap[u]
        open_users -= full
    return shares


def _finish_order(job: JobDemand, held: int) -> tuple[float, float]:
    """Who gets a device left over after an even split: the job expected to finish first.

    Its remaining time (`_remaining_time`) when it reported remaining steps and throughput,
    else after those that did; then submission order. Finishing a job sooner hands its devices
    to everyone still running (shortest remaining time first), and evenness is kept: the
    order only decides which of the tied users and jobs get one device more.
    """
    left = _remaining_time(job, held)
    return (math.inf if left is None else left, job.submitted)


def _fill(
    level: Sequence[JobDemand],
    counts: dict[str, int],
    free: int,
    finish: Callable[[JobDemand], tuple[float, float]],
    skip: set[str],
    ledger: _Ledger,
) -> int:
    """Hand out `free` devices max-min fair (`_fill_devices`), each job ending at a count it
    may run at (`JobDemand.sizes`).

    A job left between two of its sizes goes down to the smaller and takes no more this time,
    and the devices it let go are handed out again to the others; one at a time, the job
    expected to finish last first (the one the tie rule serves last), so that a later one
    rounding down can lift an earlier one to its next size. At the end, each rounded-down job,
    the one expected to finish first first, takes the largest of its sizes that what nobody
    else could take holds.
    """
    skip = set(skip)
    rounded: list[JobDemand] = []
    while True:
        free = _fill_devices(level, counts, free, finish, skip, ledger)
        off = [
            j
            for j in level
            if j.sizes is not None and j.id not in skip and not _fits(j, counts[j.id])
        ]
        if not off:
            break
        job = max(off, key=lambda j: (finish(j), j.id))
        n = counts[job.id]
        counts[job.id] = max(m for m in allowed_counts(job) if m <= n)
        free += n - counts[job.id]
        ledger.take(job.user, counts[job.id] - n)
        skip.add(job.id)
        rounded.append(job)
    for job in sorted(rounded, key=lambda j: (finish(j), j.id)):
        n = counts[job.id]
        fit = [m for m in allowed_counts(job) if n < m <= n + min(free, ledger.room(job.user))]
        if fit:
            counts[job.id] = fit[-1]
            free -= fit[-1] - n
            ledger.take(job.user, fit[-1] - n)
    return free


def _fill_devices(
    level: Sequence[JobDemand],
    counts: dict[str, int],
    free: int,
    finish: Callable[[JobDemand], tuple[float, float]],
    skip: set[str],
    ledger: _Ledger,
) -> int:
    """Hand out `free` devices one at a time, max-min fair between users, then their jobs.

    Each device goes to the user holding fewest devices in `level` for their weight, and to
    that user's job holding fewest; a user (or group) at its quota gets no more. Ties (the
    devices that do not split evenly) go by `finish`: to the user whose job would finish
    first, to that user's job that would finish first, then by id. Heaps keep this
    O(devices x log jobs), which matters at a thousand jobs.
    """
    user_total: dict[str, int] = defaultdict(int)
    for job in level:
        user_total[job.user] += counts[job.id]
    first: dict[str, tuple[float, float]] = {}
    jobs_of: dict[str, list[tuple[int, tuple[float, float], str, JobDemand]]] = defaultdict(list)
    for job in level:
        if job.id in skip or counts[job.id] >= job.max_gpus:
            continue
        key = finish(job)
        first[job.user] = min(first.get(job.user, (math.inf, math.inf)), key)
        jobs_of[job.user].append((counts[job.id], key, job.id, job))
    weight = ledger.rules.weight
    users = [(user_total[u] / weight(u), user_total[u], first[u], u) for u in jobs_of]
    heapq.heapify(users)
    for mine in jobs_of.values():
        heapq.heapify(mine)
    while free > 0 and users:
        _, total, soonest, user = heapq.heappop(users)
        if ledger.room(user) < 1:
            continue  # at its quota, or its group's: it gets no more
        mine = jobs_of[user]
        n, key, job_id, job = heapq.heappop(mine)
        counts[job_id] = n + 1
        free -= 1
        ledger.take(user, 1)
        if n + 1 < job.max_gpus:
            heapq.heappush(mine, (n + 1, key, job_id, job))
        if mine:
            heapq.heappush(users, ((total + 1) / weight(user), total + 1, soonest, user))
    return free


def _keep(
    held: Sequence[str], want: int, node_of: dict[str, str], order: dict[str, int]
) -> list[str]:
    """Up to `want` of the devices a job holds, those on the node where it holds most first."""
    home = Counter(node_of[d] for d in held)
    return sorted(held, key=lambda d: (-home[node_of[d]], order[d]))[:want]


def _place(
    jobs: Sequence[JobDemand],
    counts: dict[str, int],
    devices: Sequence[DeviceSlot],
    held: dict[str, list[str]],
    recent: set[str],
) -> Allocation:
    """Placement for `fair-share` and `priority`: packed jobs stay, split ones are re-placed.

    A job is packed when its devices span no more nodes than its count needs on this cluster
    (`_fewest_nodes`). Split over more, it synchronises over the network and can run much
    slower (yolov3 on 2+1 GPUs at 0.68x its speed on 3 GPUs of one node in the Pollux
    measurements), and equal shares that change with every arrival and departure fragment the
    nodes quickly. So:
    1. A job whose kept devices (up to its count, on the nodes where it holds most) are packed
       keeps them: it never moves, and a growing one first takes what is free on its nodes.
       So does a job rescaled less than `min_rescale_interval` ago (`recent`), packed or not.
    2. The other jobs (new, or split) are placed afresh from the free devices, theirs included,
       biggest count first, each on the fewest nodes that can hold it (`_take`: best fit,
       its own devices on ties). A split job that would not end on fewer nodes keeps its
       devices instead, when no bigger job took them. An in-place rescale moves devices at
       the cost of a resize, so this trades a few moves for placements that run faster.
    """
    node_of = {d.id: d.node for d in devices}
    order = {d.id: i for i, d in enumerate(devices)}
    node_rank = {n: i for i, n in enumerate(dict.fromkeys(node_of.values()))}
    fewest = _fewest_nodes(devices)
    result: Allocation = {j.id: [] for j in jobs}
    taken: set[str] = set()
    placing = []
    for job in jobs:
        want = counts.get(job.id, 0)
        if not want:
            continue
        keep = _keep(held[job.id], want, node_of, order)
        if keep and (job.id in recent or len({node_of[d] for d in keep}) <= fewest[len(keep)]):
            result[job.id] = keep
            taken.update(keep)
        if len(result[job.id]) < want:
            placing.append(job)
    free_on = _free_by_node(devices, taken)
    placing.sort(key=lambda j: (-counts[j.id], j.submitted, j.id))
    for job in placing:
        want = counts[job.id]
        got = result[job.id]
        if got:  # packed and growing: what is free on its own nodes first
            for node, _ in Counter(node_of[d] for d in got).most_common():
                take = free_on[node][: want - len(got)]
                del free_on[node][: len(take)]
                got.extend(take)
            if len(got) < want:
                got.extend(_take(free_on, want - len(got), set(), node_rank, order))
            continue
        kept = _keep(held[job.id], want, node_of, order)
        if (
            len(kept) == want
            and all(d in free_on[node_of[d]] for d in kept)
            and _fewest_free(free_on, want) >= len({node_of[d] for d in kept})
        ):
            for d in kept:
                free_on[node_of[d]].remove(d)
            result[job.id] = kept
        else:
            result[job.id] = _take(free_on, want, set(held[job.id]), node_rank, order)
    return {job_id: sorted(ids, key=order.__getitem__) for job_id, ids in result.items()}


def _fewest_nodes(devices: Sequence[DeviceSlot]) -> list[int]:
    """For each count 0..len(devices), the fewest nodes of the cluster that can hold it."""
    sizes = sorted(Counter(d.node for d in devices).values(), reverse=True)
    out = [0]
    held = 0
    for nodes, size in enumerate(sizes, start=1):
        held += size
        out.extend([nodes] * (held - len(out) + 1))
    return out


def _fewest_free(free_on: dict[str, list[str]], want: int) -> int:
    """How many nodes `_take` spreads `want` free devices over (largest free nodes first)."""
    nodes = 0
    for free in sorted((len(ids) for ids in free_on.values()), reverse=True):
        if want <= 0:
            break
        want -= free
        nodes += 1
    return nodes


def _take(
    free_on: dict[str, list[str]],
    want: int,
    own: set[str],
    node_rank: dict[str, int],
    order: dict[str, int],
) -> list[str]:
    """Take `want` free devices on as few nodes as possible, removing them from `free_on`.

    Each time the node that fits most of what is still missing, preferring the node with most
    of the job's `own` free devices, then the fullest such node (best fit, to keep room
    elsewhere), then node order; the job's own devices first there. Taking the largest
    fitting node each time spreads a job over the fewest nodes there are.
    """
    got: list[str] = []
    while len(got) < want:
        missing = want - len(got)
        node = max(
            (n for n, ids in free_on.items() if ids),
            key=lambda n: (
                min(len(free_on[n]), missing),
                sum(d in own for d in free_on[n]),
                -len(free_on[n]),
                -node_rank[n],
            ),
        )
        take = sorted(free_on[node], key=lambda d: (d not in own, order[d]))[:missing]
        free_on[node] = [d for d in free_on[node] if d not in take]
        got.extend(take)
    return got


def _free_by_node(devices: Sequence[DeviceSlot], taken: set[str]) -> dict[str, list[str]]:
    """Free device ids per node, in device order; nodes in order of their first device."""
    free_on: dict[str, list[str]] = {}
    for d in devices:
        free_on.setdefault(d.node, [])
        if d.id not in taken:
            free_on[d.node].append(d.id)
    return free_on


def throughput_curve(job: JobDemand, upto: int | None = None) -> list[float]:
    """Estimated throughput of `job` at 0..max_gpus (or `upto`) devices, indexed by count.

    The product knows only what a job reported at the counts it ran on, so the estimate is
    built from those measurements and errs on the side of not handing out devices:
    - at a measured count, the measurement;
    - below the smallest measured count, linear scaling down from it;
    - between two measured counts, linear interpolation;
    - above the largest measured count c: the last measured marginal gain per device (between
      the two largest counts; with one measurement, c's throughput per device), scaled by
      `EXTRAPOLATION_EFFICIENCY` and never negative, up to `EXPLORATION_FACTOR` x c; flat
      beyond, so a job explores at most a doubling before it is measured there.
    A job that reported nothing is taken to run at relative speed 1 on the devices it holds (its
    minimum if none): its curve ranks only against itself (see `_count_goodput`).
    """
    measured = _measured(job)
    if not measured:
        held = len(job.current)
        base = min(max(held, job.min_gpus), job.max_gpus) if held else job.min_gpus
        measured = {base: 1.0}
    return _curve(measured, job.max_gpus if upto is None else min(upto, job.max_gpus))


def knee(job: JobDemand) -> int:
    """The fewest devices, at least `min_gpus`, at which `job`'s estimated throughput peaks."""
    curve = throughput_curve(job)
    return max(range(job.min_gpus, job.max_gpus + 1), key=lambda n: (curve[n], -n))


def _measured(job: JobDemand) -> dict[int, float]:
    if not job.throughput:
        return {}
    return {
        int(n): float(t)
        for n, t in job.throughput.items()
        if int(n) >= 1 and math.isfinite(float(t)) and float(t) > 0
    }


def _curve(measured: Mapping[int, float], upto: int) -> list[float]:
    pts = sorted(measured.items())
    c1, t1 = pts[0]
    ck, tk = pts[-1]
    slope = (tk - pts[-2][1]) / (ck - pts[-2][0]) if len(pts) > 1 else tk / ck
    slope = max(0.0, slope) * EXTRAPOLATION_EFFICIENCY
    limit = EXPLORATION_FACTOR * ck
    out = [0.0] * (upto + 1)
    i = 0
    for n in range(1, upto + 1):
        if n <= c1:
            out[n] = t1 * n / c1
        elif n <= ck:
            while pts[i + 1][0] < n:
                i += 1
            (a, ta), (b, tb) = pts[i], pts[i + 1]
            out[n] = ta + (tb - ta) * (n - a) / (b - a)
        else:
            out[n] = tk + slope * (min(n, limit) - ck)
    return out


def _count_goodput(
    levels: Sequence[Sequence[JobDemand]],
    held: dict[str, list[str]],
    capacity: int,
    frozen: dict[str, int],
    rules: ShareRules,
) -> dict[str, int]:
    """Device counts under `goodput`; a job missing from the answer waits.

    Priority levels are served in turn, as under `priority`. In a level, running jobs keep their
    minimum, then waiting jobs are admitted least remaining work first (jobs that did not say
    come last, in submission order) while their minimum fits. Spare devices then go out in two
    rounds, each greedy over the best next step of every job, that is the larger count m with
    the highest throughput gain per added device (the upper hull of its curve, so a
    non-concave curve, say one that dips when a job spills onto a second node, is crossed when
    the count beyond pays off):
    1. jobs that reported throughput and remaining steps: relative gain per device (which
       shortens the job's remaining time by that fraction), times the job's rank by remaining
       time to the power `RANK_EXPONENT`: the job that would finish first weighs most, since
       every job still running after it gains its devices when it is done;
    2. the others (not measured yet): relative gain per device on the assumed curve of
       `throughput_curve`, so a new job explores up to twice its count if devices are left.
    No job grows past a count that is not faster than every smaller count (its knee), so
    devices may idle: unlike `fair-share`, `goodput` is not work-conserving by design.
    """
    counts: dict[str, int] = {}
    free = capacity
    ledger = _Ledger(rules)
    for level in levels:
        # least work first; a waiting job that does not fit holds back the rest of the level
        waiting = sorted((j for j in level if not held[j.id]), key=_work_order)
        admitted, free = _admit(level, waiting, held, counts, free, frozen, ledger)
        # A job with no work left is finishing: more devices would only cost it a rescale.
        growable = [
            j
            for j in admitted
            if j.id not in frozen and (j.remaining_steps is None or j.remaining_steps > 0)
        ]
        informed = [j for j in growable if j.remaining_steps is not None and _measured(j)]
        blind = [j for j in growable if j.remaining_steps is None or not _measured(j)]
        rank = _rank_by_remaining_time(informed, held)
        weights = {i: r**RANK_EXPONENT for i, r in rank.items()}
        free = _grow(informed, counts, free, weights, ledger)
        free = _grow(blind, counts, free, {j.id: 1.0 for j in blind}, ledger)
    return counts


def _work_order(job: JobDemand) -> tuple[bool, float, float, str]:
    return (job.remaining_steps is None, job.remaining_steps or 0.0, job.submitted, job.id)


def _rank_by_remaining_time(
    jobs: Sequence[JobDemand], held: dict[str, list[str]]
) -> dict[str, int]:
    """For each job, how many of `jobs` have at least its remaining time (itself included).

    Remaining time: remaining steps over the throughput at the count the job runs on now (its
    minimum if it holds nothing or more than its max). Ties go to the earlier job.
    """
    remaining = {j.id: _remaining_time(j, len(held[j.id])) for j in jobs}
    ranked = sorted(jobs, key=lambda j: (remaining[j.id], j.submitted, j.id))
    return {j.id: len(ranked) - i for i, j in enumerate(ranked)}


def _remaining_time(job: JobDemand, held: int) -> float | None:
    """Remaining steps over the throughput at the count `job` runs on now (its minimum if it
    holds nothing or more than its max); None when it reported either not at all."""
    measured = _measured(job) if job.remaining_steps is not None else None
    if not measured:
        return None
    now = min(max(held, job.min_gpus), job.max_gpus)
    return job.remaining_steps / _curve(measured, now)[now]  # type: ignore[operator]


def _grow(
    level: Sequence[JobDemand],
    counts: dict[str, int],
    free: int,
    weight: Mapping[str, float],
    ledger: _Ledger,
) -> int:
    """Give out `free` devices greedily by weighted relative throughput gain, up to knees,
    and within the users' and groups' quotas.

    Each job offers its best next step: the count m (up to its max and what is free) with the
    highest gain per added device over its current count n. Its offer is that gain relative to
    its throughput at n, times `weight[job.id]`; the highest offer wins. Only steps that gain
    are offered, so a count beyond which the curve never rises again is never reached.
    """
    curves = {j.id: throughput_curve(j, counts[j.id] + free) for j in level}
    heap: list[tuple[float, float, str, int]] = []
    by_id = {j.id: j for j in level}

    def push(job: JobDemand) -> None:
        n = counts[job.id]
        curve = curves[job.id]
        best, target = 0.0, 0
        for m in range(n + 1, int(min(job.max_gpus, n + free, n + ledger.room(job.user))) + 1):
            if job.sizes is not None and m not in job.sizes:
                continue
            slope = (curve[m] - curve[n]) / (m - n)
            if slope > best:
                best, target = slope, m
        if target:
            offer = best / curve[n] * weight[job.id]
            heapq.heappush(heap, (-offer, job.submitted, job.id, target))

    for job in level:
        push(job)
    while heap and free > 0:
        _, _, job_id, target = heapq.heappop(heap)
        job = by_id[job_id]
        if target - counts[job_id] > min(free, ledger.room(job.user)):
            push(job)  # the step no longer fits: the best step that does
            continue
        free -= target - counts[job_id]
        ledger.take(job.user, target - counts[job_id])
        counts[job_id] = target
        push(job)
    return free


def _repack(
    jobs: Sequence[JobDemand],
    counts: dict[str, int],
    devices: Sequence[DeviceSlot],
    held: dict[str, list[str]],
) -> Allocation:
    """`goodput`'s placement: like `_place`, but a job that grows is placed afresh.

    A job split over nodes synchronises over the network and can run much slower (yolov3 on
    2+2 GPUs takes 1.8x as long as on 4 GPUs of one node in the Pollux measurements). A job
    whose count grows is rescaled anyway, and the runtime's in-place rescale moves devices in
    the same generation change, so moving costs nothing more. Jobs that keep or lower their
    count keep their devices (on the nodes where they hold most). Growing jobs, biggest first,
    then take devices on the fewest nodes that hold them (`_take`).
    """
    node_of = {d.id: d.node for d in devices}
    order = {d.id: i for i, d in enumerate(devices)}
    node_rank = {n: i for i, n in enumerate(dict.fromkeys(d.node for d in devices))}
    result: Allocation = {j.id: [] for j in jobs}
    taken: set[str] = set()
    grow = []
    for job in jobs:
        want = counts.get(job.id, 0)
        if want > len(held[job.id]):
            grow.append(job)
            continue
        keep = _keep(held[job.id], want, node_of, order)
        result[job.id] = keep
        taken.update(keep)
    free_on = _free_by_node(devices, taken)
    grow.sort(key=lambda j: (-counts[j.id], j.submitted, j.id))
    for job in grow:
        result[job.id] = _take(free_on, counts[job.id], set(held[job.id]), node_rank, order)
    return {job_id: sorted(ids, key=order.__getitem__) for job_id, ids in result.items()}
