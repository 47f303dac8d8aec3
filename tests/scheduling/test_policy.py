"""Properties of the pure allocation policy, checked over generated clusters and job sets."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jupyter_edt.app import EDTApp
from jupyter_edt.host import load_policy
from jupyter_edt.scheduling.allocator import plan
from jupyter_edt.scheduling.inventory import Device
from jupyter_edt.scheduling.policy import (
    POLICIES,
    DeviceSlot,
    FairShare,
    JobDemand,
    Priority,
    ShareRules,
    allocate,
    allowed_counts,
    knee,
    throughput_curve,
)

USERS = ["ana", "bo", "cy"]


@st.composite
def clusters(draw, max_devices: int = 10):
    nodes = draw(st.integers(1, 3))
    per_node = draw(st.lists(st.integers(0, max_devices // nodes), min_size=nodes, max_size=nodes))
    devices = [DeviceSlot(f"n{n}g{i}", f"n{n}") for n in range(nodes) for i in range(per_node[n])]
    count = draw(st.integers(0, 7))
    free = [d.id for d in devices]
    jobs = []
    for k in range(count):
        low = draw(st.integers(1, 3))
        high = draw(st.integers(low, 6))
        running = draw(st.booleans()) and len(free) >= low
        current: tuple[str, ...] = ()
        if running:
            n = draw(st.integers(low, min(high, len(free))))
            current = tuple(free[:n])
            free = free[n:]
        jobs.append(
            JobDemand(
                id=f"j{k}",
                user=draw(st.sampled_from(USERS)),
                min_gpus=low,
                max_gpus=high,
                priority=draw(st.integers(0, 2)),
                submitted=float(draw(st.integers(0, 5))),
                current=current,
                last_rescale=draw(st.none() | st.floats(0, 100)),
            )
        )
    return jobs, devices


@st.composite
def goodput_clusters(draw):
    """Clusters whose jobs report remaining steps and throughput at some counts (or not)."""
    jobs, devices = draw(clusters())
    out = []
    for job in jobs:
        measured = None
        if draw(st.booleans()):
            counts = draw(st.lists(st.integers(1, 8), min_size=1, max_size=4, unique=True))
            measured = {n: draw(st.floats(0.1, 100.0)) for n in counts}
        remaining = draw(st.none() | st.floats(0.0, 1e5))
        out.append(replace(job, remaining_steps=remaining, throughput=measured))
    return out, devices


@st.composite
def rigid_clusters(draw):
    """Clusters where some running jobs are rigid, and some devices may have vanished."""
    jobs, devices = draw(st.one_of(clusters(), goodput_clusters()))
    jobs = [replace(j, rigid=bool(j.current) and draw(st.booleans())) for j in jobs]
    gone = draw(st.sets(st.sampled_from([d.id for d in devices]))) if devices else set()
    return jobs, [d for d in devices if d.id not in gone]


@st.composite
def kind_clusters(draw, gone: bool = True):
    """Clusters with the three kinds of job: elastic, restart (a restart cost; allowed sizes
    or not, each of which may leave out what it holds) and rigid (running ones), with reports
    or without, and (`gone`) some devices perhaps vanished."""
    jobs, devices = draw(st.one_of(clusters(), goodput_clusters()))
    out = []
    for job in jobs:
        kind = draw(st.sampled_from(["elastic", "restart", "rigid"]))
        if kind == "rigid" and job.current:
            out.append(replace(job, rigid=True))
            continue
        sizes = None
        if draw(st.booleans()):
            sizes = draw(st.sets(st.integers(1, 8), min_size=1, max_size=4))
            if not any(job.min_gpus <= n <= job.max_gpus for n in sizes):
                sizes.add(draw(st.integers(job.min_gpus, job.max_gpus)))
        cost = draw(st.floats(0.0, 120.0)) if kind == "restart" else None
        out.append(replace(job, sizes=sizes and tuple(sizes), restart_cost_s=cost))
    lost = set()
    if gone and devices and draw(st.booleans()):
        lost = draw(st.sets(st.sampled_from([d.id for d in devices])))
    return out, [d for d in devices if d.id not in lost]


def held_restart(job: JobDemand, devices: list[DeviceSlot]) -> int:
    """The count a restart job runs at and may keep (0: it is counted like any job: it holds
    nothing, lost a device, or holds a count outside its allowed ones)."""
    n = len(job.current)
    present = {d.id for d in devices}
    if not job.restarts or not n or not set(job.current) <= present:
        return 0
    return n if n in allowed_counts(job) else 0


def pays(job: JobDemand, n: int, m: int) -> bool:
    """Reference: growing from n to m saves more than twice the restart, or the gain is
    unknown (no remaining steps or no throughput reported)."""
    if job.remaining_steps is None or not job.throughput:
        return True
    curve = throughput_curve(job)
    saved = job.remaining_steps / curve[n] - job.remaining_steps / curve[m]
    return saved > 2 * job.restart_cost_s


def recent(job: JobDemand, now: float, interval: float) -> bool:
    return job.last_rescale is not None and now - job.last_rescale < interval


def may_take(job: JobDemand, h: int, m: int, now: float, interval: float) -> bool:
    """Whether `job`, a restart job running at `h` (0: counted like any job), may be given `m`
    devices: one of its sizes, and past `h` only once its interval is over, when it pays."""
    if m not in allowed_counts(job):
        return False
    if not h or m <= h:
        return True
    return not recent(job, now, interval) and pays(job, h, m)


#: Fair-share and priority read remaining steps and throughput only to order ties, so their
#: properties must hold whether jobs report them or not.
any_clusters = st.one_of(clusters(), goodput_clusters())
policies = st.sampled_from(["fair-share", "priority"])
all_policies = st.sampled_from(["fair-share", "priority", "goodput"])


def totals(result, jobs, key):
    out: dict = defaultdict(int)
    for job in jobs:
        out[key(job)] += len(result[job.id])
    return out


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(any_clusters, kind_clusters()),
    all_policies,
    st.sampled_from([0.0, 30.0]),
    st.sampled_from([0.0, 60.0]),
)
def test_no_device_twice_and_min_max_respected(case, policy, interval, restart_interval):
    jobs, devices = case
    result = allocate(
        jobs,
        devices,
        policy,
        now=100.0,
        min_rescale_interval=interval,
        restart_interval=restart_interval,
    )
    assert set(result) == {j.id for j in jobs}
    given_out = [d for ids in result.values() for d in ids]
    assert len(given_out) == len(set(given_out))
    assert set(given_out) <= {d.id for d in devices}
    for job in jobs:
        n = len(result[job.id])
        assert n == 0 or job.min_gpus <= n <= job.max_gpus


@settings(max_examples=300, deadline=None)
@given(st.one_of(any_clusters, rigid_clusters()), policies, st.sampled_from([0.0, 30.0]))
def test_work_conserving(case, policy, interval):
    """No device idles while an admitted job that can grow (not rigid) is below its max."""
    jobs, devices = case
    result = allocate(jobs, devices, policy, now=100.0, min_rescale_interval=interval)
    idle = len(devices) - sum(len(ids) for ids in result.values())
    if idle > 0:
        for job in jobs:
            if result[job.id] and not job.rigid:
                assert len(result[job.id]) == job.max_gpus


@settings(max_examples=400, deadline=None)
@given(kind_clusters(), policies, st.sampled_from([0.0, 30.0]), st.sampled_from([0.0, 60.0]))
def test_work_conserving_but_for_restart_holds_and_sizes(case, policy, interval, restart_interval):
    """The documented exceptions to work conservation: a device idles while an admitted job is
    below its max only when the job is rigid, or no count it may take this time fits in what
    idles: one of its sizes, and for a running restart job, its count now or less, or a larger
    one only once its interval has passed and the gain pays for the restart."""
    jobs, devices = case
    now = 100.0
    result = allocate(
        jobs,
        devices,
        policy,
        now=now,
        min_rescale_interval=interval,
        restart_interval=restart_interval,
    )
    idle = len(devices) - sum(len(ids) for ids in result.values())
    for job in jobs:
        n = len(result[job.id])
        if not idle or not n or job.rigid:
            continue
        h = held_restart(job, devices)
        more = range(n + 1, n + idle + 1)
        assert not any(may_take(job, h, m, now, restart_interval) for m in more), (job, n, idle)


@settings(max_examples=400, deadline=None)
@given(rigid_clusters(), all_policies, st.sampled_from([0.0, 30.0]))
def test_rigid_jobs_keep_exactly_their_devices_or_get_none(case, policy, interval):
    """A rigid job is never resized or moved: it keeps every device it holds, or none (it is
    stopped); one whose devices are not all there any more gets none. Nothing is given twice."""
    jobs, devices = case
    result = allocate(jobs, devices, policy, now=100.0, min_rescale_interval=interval)
    present = {d.id for d in devices}
    given_out = [d for ids in result.values() for d in ids]
    assert len(given_out) == len(set(given_out)) and set(given_out) <= present
    for job in jobs:
        if job.rigid:
            assert set(result[job.id]) in (set(), set(job.current))
            if not set(job.current) <= present:
                assert result[job.id] == []
        n = len(result[job.id])
        assert n == 0 or job.min_gpus <= n <= job.max_gpus


def test_a_rigid_job_is_not_shrunk_for_a_newcomer_and_keeps_its_devices():
    """Elastic, "a" would cede half of its devices to "b"; rigid, it keeps all 4 and "b" waits
    (fair-share) until it ends. Under priority a higher "b" stops it instead."""
    devices = [DeviceSlot(f"g{i}") for i in range(4)]
    a = JobDemand("a", "ana", max_gpus=4, current=("g0", "g1", "g2", "g3"), rigid=True)
    b = JobDemand("b", "bo", max_gpus=4, submitted=1.0)
    assert allocate([a, b], devices) == {"a": ["g0", "g1", "g2", "g3"], "b": []}
    assert allocate([replace(a, rigid=False), b], devices) == {
        "a": ["g0", "g1"],
        "b": ["g2", "g3"],
    }
    high = replace(b, priority=1, min_gpus=2)
    assert allocate([a, high], devices, "priority") == {"a": [], "b": ["g0", "g1", "g2", "g3"]}


def test_a_rigid_job_that_lost_a_device_gets_none_and_frees_the_rest():
    devices = [DeviceSlot(f"g{i}") for i in (0, 1, 3)]  # g2 is gone
    a = JobDemand("a", "ana", max_gpus=4, current=("g0", "g1", "g2", "g3"), rigid=True)
    b = JobDemand("b", "bo", max_gpus=4, submitted=1.0)
    assert allocate([a, b], devices) == {"a": [], "b": ["g0", "g1", "g3"]}


@settings(max_examples=300, deadline=None)
@given(any_clusters)
def test_fair_share_is_max_min_fair_between_users_then_jobs(case):
    jobs, devices = case
    result = allocate(jobs, devices, "fair-share")
    admitted = [j for j in jobs if result[j.id]]
    users = {j.user for j in admitted}
    total = totals(result, admitted, lambda j: j.user)
    floor = defaultdict(int)
    cap = defaultdict(int)
    for j in admitted:
        floor[j.user] += j.min_gpus
        cap[j.user] += j.max_gpus
    for u in users:
        for v in users:
            # v may hold more than u + 1 only when v is at its floor or u cannot take more
            if total[v] > total[u] + 1:
                assert total[v] == floor[v] or total[u] == cap[u]
    for u in users:
        mine = [j for j in admitted if j.user == u]
        for a in mine:
            for b in mine:
                na, nb = len(result[a.id]), len(result[b.id])
                if nb > na + 1:
                    assert nb == b.min_gpus or na == a.max_gpus


def fair_shares(level: list[JobDemand], free: int) -> dict[str, float]:
    """Each user's max-min fair share of `free` devices (weights 1), up to the sum of their
    jobs' maximums: a reference for the policy's, by bisection on the water level."""
    cap: Counter[str] = Counter()
    for job in level:
        cap[job.user] += job.max_gpus
    lo, hi = 0.0, float(free) + 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if sum(min(c, mid) for c in cap.values()) > free:
            hi = mid
        else:
            lo = mid
    return {u: min(c, lo) for u, c in cap.items()}


def past_its_share(job: JobDemand, jobs: list[JobDemand], result: dict, free: int) -> bool:
    """Whether `job` waits because its user, who already has a job admitted in its level,
    would pass their fair share with it."""
    level = [j for j in jobs if j.priority == job.priority]
    mine = [j for j in level if j.user == job.user and result[j.id]]
    share = fair_shares(level, free)[job.user]
    return bool(mine) and sum(j.min_gpus for j in mine) + job.min_gpus > share + 1e-9


@settings(max_examples=300, deadline=None)
@given(any_clusters)
def test_priority_serves_higher_priorities_first(case):
    jobs, devices = case
    result = allocate(jobs, devices, "priority")
    for high in jobs:
        n = len(result[high.id])
        if n and n < high.max_gpus:
            # a higher-priority job short of its max: lower ones hold nothing
            for low in jobs:
                if low.priority < high.priority:
                    assert result[low.id] == []
        if not n:
            # a job waits only when the levels above and its own level's admitted minimums
            # leave less than its min, or an earlier waiting job of its level is ahead of it
            above = sum(len(result[j.id]) for j in jobs if j.priority > high.priority)
            same = sum(j.min_gpus for j in jobs if j.priority == high.priority and result[j.id])
            blocked = any(
                j.priority == high.priority
                and not result[j.id]
                and not j.current
                and (j.submitted, j.id) < (high.submitted, high.id)
                for j in jobs
            )
            assert (
                len(devices) - above - same < high.min_gpus
                or blocked
                or past_its_share(high, jobs, result, len(devices) - above)
            )


@settings(max_examples=200, deadline=None)
@given(any_clusters, policies, st.randoms(use_true_random=False))
def test_deterministic_and_independent_of_input_order(case, policy, rnd):
    jobs, devices = case
    first = allocate(jobs, devices, policy)
    shuffled = list(jobs)
    rnd.shuffle(shuffled)
    assert allocate(shuffled, devices, policy) == first
    assert allocate(jobs, devices, policy) == first


def fewest_nodes(devices: list[DeviceSlot], count: int) -> int:
    """The fewest nodes of the cluster that can hold `count` devices."""
    sizes = sorted(Counter(d.node for d in devices).values(), reverse=True)
    return next(k for k in range(len(sizes) + 1) if sum(sizes[:k]) >= count)


@settings(max_examples=300, deadline=None)
@given(any_clusters, policies, st.sampled_from([0.0, 30.0]))
def test_packed_jobs_keep_their_devices_when_their_count_does_not_drop(case, policy, interval):
    """Rule: a job on as few nodes as its count allows, or rescaled less than the interval ago,
    keeps every device it holds when its count does not drop. A split one keeps them too at the
    same count, unless it moves onto fewer nodes or a job at least as big (placed before it)
    took one of them."""
    jobs, devices = case
    result = allocate(jobs, devices, policy, now=100.0, min_rescale_interval=interval)
    node_of = {d.id: d.node for d in devices}
    holder = {d: j for j in jobs for d in result[j.id]}
    for job in jobs:
        n = len(result[job.id])
        if not job.current or n < len(job.current) or set(job.current) <= set(result[job.id]):
            continue
        assert job.last_rescale is None or 100.0 - job.last_rescale >= interval
        before = len({node_of[d] for d in job.current})
        assert before > fewest_nodes(devices, len(job.current))  # it was split
        if n == len(job.current):
            after = len({node_of[d] for d in result[job.id]})
            taken = [holder[d] for d in job.current if d in holder and holder[d] is not job]
            assert after < before or any(len(result[j.id]) >= n for j in taken)


@settings(max_examples=300, deadline=None)
@given(any_clusters)
def test_leftover_devices_go_to_the_jobs_that_finish_first(case):
    """Rule: where devices do not split evenly, a user gets one more than another only if its
    job would finish first (remaining time from its reports, unknown last, then submission)."""
    jobs, devices = case
    jobs = [replace(j, user=j.id) for j in jobs]  # one job per user: ties between jobs
    result = allocate(jobs, devices, "fair-share")

    def finish(job: JobDemand) -> tuple[float, float, str]:
        if job.remaining_steps is None or not job.throughput:
            return (math.inf, job.submitted, job.id)
        now = min(max(len(job.current), job.min_gpus), job.max_gpus)
        return (job.remaining_steps / throughput_curve(job, now)[now], job.submitted, job.id)

    for u in jobs:
        for v in jobs:
            nu, nv = len(result[u.id]), len(result[v.id])
            if nv and nu == nv + 1 and nu > u.min_gpus and nv < v.max_gpus:
                assert finish(u) <= finish(v)


def test_a_split_job_moves_onto_one_node_when_one_frees():
    """2 GPUs over two nodes, and node n1 is free again: the job moves there whole."""
    devices = slots(2, nodes=2)
    split = JobDemand("a", "ana", max_gpus=2, current=("n0g0", "n1g0"))
    other = JobDemand("b", "bo", max_gpus=1, current=("n0g1",), submitted=1)
    result = allocate([split, other], devices)
    assert result == {"a": ["n1g0", "n1g1"], "b": ["n0g1"]}
    # with nowhere better to go, it stays where it is
    stay = JobDemand("c", "cy", max_gpus=1, current=("n1g1",), submitted=2)
    result = allocate([split, other, stay], devices)
    assert result["a"] == ["n0g0", "n1g0"]


def test_the_device_left_over_goes_to_the_job_that_finishes_first():
    curve = {1: 10.0, 2: 20.0}
    long = JobDemand("long", "ana", max_gpus=4, remaining_steps=9000, throughput=curve)
    short = JobDemand("short", "bo", max_gpus=4, submitted=1, remaining_steps=100, throughput=curve)
    silent = JobDemand("silent", "cy", max_gpus=4, submitted=2)
    result = allocate([long, short, silent], slots(4))
    assert [len(result[j]) for j in ("short", "long", "silent")] == [2, 1, 1]
    # without reports, submission order decides, as before
    quiet = [replace(j, remaining_steps=None) for j in (long, short)]
    result = allocate([*quiet, silent], slots(4))
    assert [len(result[j]) for j in ("short", "long", "silent")] == [1, 2, 1]


def slots(n: int, nodes: int = 1) -> list[DeviceSlot]:
    return [DeviceSlot(f"n{k}g{i}", f"n{k}") for k in range(nodes) for i in range(n)]


def test_second_user_makes_the_first_cede_half():
    devices = slots(4)
    a = JobDemand("a", "ana", max_gpus=4)
    assert allocate([a], devices) == {"a": ["n0g0", "n0g1", "n0g2", "n0g3"]}
    a = JobDemand("a", "ana", max_gpus=4, current=("n0g0", "n0g1", "n0g2", "n0g3"))
    b = JobDemand("b", "bo", max_gpus=4, submitted=1)
    result = allocate([a, b], devices)
    assert result == {"a": ["n0g0", "n0g1"], "b": ["n0g2", "n0g3"]}


def test_users_share_before_jobs():
    """Ana's two jobs together get what Bo's one job gets."""
    jobs = [
        JobDemand("a1", "ana", max_gpus=4),
        JobDemand("a2", "ana", max_gpus=4, submitted=1),
        JobDemand("b1", "bo", max_gpus=4, submitted=2),
    ]
    result = allocate(jobs, slots(4))
    assert [len(result[j]) for j in ("a1", "a2", "b1")] == [1, 1, 2]


def test_waiting_jobs_queue_in_submission_order():
    jobs = [
        JobDemand("a", "ana", min_gpus=3, max_gpus=3, current=("n0g0", "n0g1", "n0g2")),
        JobDemand("b", "bo", min_gpus=2, max_gpus=2, submitted=1),
        JobDemand("c", "cy", min_gpus=1, max_gpus=1, submitted=2),
    ]
    result = allocate(jobs, slots(4))
    assert result["b"] == [] and result["c"] == []  # c does not jump ahead of b
    assert len(result["a"]) == 3


def test_priority_suspends_low_jobs_only_when_their_min_cannot_be_met():
    low = JobDemand("low", "ana", min_gpus=1, max_gpus=4, priority=0, current=("n0g0", "n0g1"))
    high = JobDemand("high", "bo", min_gpus=1, max_gpus=3, priority=5, submitted=1)
    result = allocate([low, high], slots(4), "priority")
    assert len(result["high"]) == 3 and len(result["low"]) == 1  # low shrinks to its min
    high4 = JobDemand("high", "bo", min_gpus=4, max_gpus=4, priority=5, submitted=1)
    result = allocate([low, high4], slots(4), "priority")
    assert result["low"] == [] and len(result["high"]) == 4  # suspended


def test_rescale_interval_holds_counts_except_to_admit():
    a = JobDemand("a", "ana", max_gpus=4, current=("n0g0",), last_rescale=95.0)
    b = JobDemand("b", "bo", max_gpus=1, current=("n0g1", "n0g2", "n0g3"), min_gpus=1)
    # b is over its max (lowered by its owner): it must shrink; a grows into what is freed
    # because nothing may idle
    result = allocate([a, b], slots(4), now=100.0, min_rescale_interval=30.0)
    assert len(result["b"]) == 1 and len(result["a"]) == 3
    # a fair rebalance between two running jobs waits for the interval
    a = JobDemand("a", "ana", max_gpus=4, current=("n0g0", "n0g1", "n0g2"), last_rescale=95.0)
    c = JobDemand("c", "cy", max_gpus=4, current=("n0g3",), last_rescale=0.0)
    held = allocate([a, c], slots(4), now=100.0, min_rescale_interval=30.0)
    assert len(held["a"]) == 3 and len(held["c"]) == 1
    later = allocate([a, c], slots(4), now=200.0, min_rescale_interval=30.0)
    assert len(later["a"]) == 2 and len(later["c"]) == 2
    # a newcomer is admitted at once, interval or not
    d = JobDemand("d", "bo", max_gpus=4, submitted=3)
    admitted = allocate([a, c, d], slots(4), now=100.0, min_rescale_interval=30.0)
    assert admitted["d"] != []


def test_packs_a_job_on_one_node():
    devices = slots(2, nodes=1) + [DeviceSlot(f"n1g{i}", "n1") for i in range(4)]
    result = allocate([JobDemand("a", "ana", max_gpus=3)], devices)
    assert {d[:2] for d in result["a"]} == {"n1"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"min_gpus": 0, "max_gpus": 2}, "min_gpus must be at least 1"),
        ({"min_gpus": 3, "max_gpus": 2}, "max_gpus \\(2\\) must be at least min_gpus"),
    ],
)
def test_bad_job_is_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        JobDemand("x", "ana", **kwargs)


def test_unknown_policy_and_duplicate_ids_are_rejected():
    with pytest.raises(ValueError, match="policy must be one of"):
        allocate([], slots(1), "lottery")  # type: ignore[arg-type]
    job = JobDemand("x", "ana", max_gpus=1)
    with pytest.raises(ValueError, match="Job ids must be unique"):
        allocate([job, job], slots(1))
    with pytest.raises(ValueError, match="Device ids must be unique"):
        allocate([job], [DeviceSlot("g"), DeviceSlot("g")])


def test_stability_does_not_crash_when_a_frozen_job_no_longer_fits():
    """A frozen lower-priority job squeezed out by a higher one keeps its fair count instead."""
    devices = [DeviceSlot("n0g0", "n0")] + [DeviceSlot(f"n1g{i}", "n1") for i in range(5)]
    devices += [DeviceSlot(f"n2g{i}", "n2") for i in range(4)]
    low = JobDemand(
        "low", "bo", min_gpus=2, max_gpus=7, priority=1, submitted=2,
        current=("n0g0", "n1g0", "n1g1", "n1g2"), last_rescale=90.0,
    )  # fmt: skip
    high = JobDemand(
        "high", "bo", min_gpus=3, max_gpus=8, priority=2, submitted=1,
        current=("n1g3", "n1g4", "n2g0", "n2g1", "n2g2"), last_rescale=0.0,
    )  # fmt: skip
    result = allocate([low, high], devices, "priority", now=100.0, min_rescale_interval=30.0)
    assert len(result["high"]) == 8 and len(result["low"]) == 2


# ---- goodput -------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(goodput_clusters(), st.sampled_from([0.0, 30.0]))
def test_goodput_no_device_twice_and_min_max_respected(case, interval):
    jobs, devices = case
    result = allocate(jobs, devices, "goodput", now=100.0, min_rescale_interval=interval)
    assert set(result) == {j.id for j in jobs}
    given_out = [d for ids in result.values() for d in ids]
    assert len(given_out) == len(set(given_out))
    assert set(given_out) <= {d.id for d in devices}
    for job in jobs:
        n = len(result[job.id])
        assert n == 0 or job.min_gpus <= n <= job.max_gpus


@settings(max_examples=200, deadline=None)
@given(goodput_clusters(), st.randoms(use_true_random=False))
def test_goodput_deterministic_and_independent_of_input_order(case, rnd):
    jobs, devices = case
    first = allocate(jobs, devices, "goodput")
    shuffled = list(jobs)
    rnd.shuffle(shuffled)
    assert allocate(shuffled, devices, "goodput") == first
    assert allocate(jobs, devices, "goodput") == first


@settings(max_examples=300, deadline=None)
@given(goodput_clusters())
def test_goodput_never_grows_a_job_past_its_knee(case):
    """Rule: a job above its minimum runs faster (estimated) than at any smaller count, so it
    never holds more than its knee. Devices may idle instead: goodput is not work-conserving."""
    jobs, devices = case
    result = allocate(jobs, devices, "goodput")
    for job in jobs:
        n = len(result[job.id])
        if n > job.min_gpus:
            curve = throughput_curve(job)
            assert all(curve[n] > curve[m] for m in range(job.min_gpus, n))
            assert n <= knee(job)


@settings(max_examples=300, deadline=None)
@given(goodput_clusters())
def test_goodput_admits_while_minimums_fit_least_work_first(case):
    """Running jobs keep at least their minimum when the levels above leave room; a waiting job
    waits only when its minimum does not fit, a job with less remaining work waits, or its
    user would pass their fair share with it."""
    jobs, devices = case
    result = allocate(jobs, devices, "goodput")
    for job in jobs:
        if result[job.id]:
            continue
        above = sum(len(result[j.id]) for j in jobs if j.priority > job.priority)
        same = sum(j.min_gpus for j in jobs if j.priority == job.priority and result[j.id])
        ahead = any(
            j.priority == job.priority and not result[j.id] and not j.current
            for j in jobs
            if j is not job
        )
        assert (
            len(devices) - above - same < job.min_gpus
            or ahead
            or past_its_share(job, jobs, result, len(devices) - above)
        )


def test_goodput_gives_a_spare_device_where_it_speeds_a_job_up_most():
    linear = JobDemand("lin", "ana", max_gpus=4, remaining_steps=1000, throughput={1: 10, 2: 20})
    flat = JobDemand(
        "flat", "bo", max_gpus=4, submitted=1, remaining_steps=1000, throughput={1: 10, 2: 12}
    )
    result = allocate([linear, flat], slots(4), "goodput")
    assert len(result["lin"]) == 3 and len(result["flat"]) == 1


def test_goodput_favours_the_job_with_less_remaining_work():
    curve = {1: 10.0, 2: 19.0, 3: 27.0}
    short = JobDemand("short", "ana", max_gpus=3, remaining_steps=100, throughput=curve)
    long = JobDemand("long", "bo", max_gpus=3, remaining_steps=9000, throughput=curve)
    result = allocate([short, long], slots(4), "goodput")
    assert len(result["short"]) == 3 and len(result["long"]) == 1


def test_goodput_stops_at_the_knee_and_leaves_devices_idle():
    job = JobDemand(
        "a", "ana", max_gpus=8, remaining_steps=50, throughput={1: 10, 2: 18, 4: 20, 8: 15}
    )
    assert knee(job) == 4
    result = allocate([job], slots(8), "goodput")
    assert len(result["a"]) == 4


def test_goodput_crosses_a_dip_when_the_count_beyond_pays_off():
    """Spilling onto a second node (5 GPUs) is slower, 8 is much faster: go to 8, not 5."""
    job = JobDemand("a", "ana", max_gpus=8, remaining_steps=50, throughput={4: 40, 5: 30, 8: 70})
    assert len(allocate([job], slots(4, nodes=2), "goodput")["a"]) == 8


def test_goodput_explores_unmeasured_counts_a_doubling_at_a_time():
    fresh = JobDemand("a", "ana", min_gpus=2, max_gpus=16)
    assert throughput_curve(fresh)[4] > throughput_curve(fresh)[2]
    assert len(allocate([fresh], slots(16), "goodput")["a"]) == 4
    measured = replace(fresh, current=("n0g0", "n0g1", "n0g2", "n0g3"), throughput={4: 40.0})
    assert knee(measured) == 8
    assert throughput_curve(measured)[8] == 40.0 + 0.5 * 10.0 * 4  # half the per-GPU gain


def test_goodput_packs_a_growing_job_on_one_node():
    """A job that grows moves off a node it shares when another node holds it whole."""
    devices = slots(4, nodes=2)
    a = JobDemand(
        "a", "ana", max_gpus=4, current=("n0g0", "n0g1"), remaining_steps=10,
        throughput={1: 10.0, 2: 20.0},
    )  # fmt: skip
    b = JobDemand("b", "bo", max_gpus=1, current=("n0g2",), remaining_steps=1e6, throughput={1: 1})
    result = allocate([a, b], devices, "goodput")
    assert len(result["a"]) == 4 and {d[:2] for d in result["a"]} == {"n1"}
    assert result["b"] == ["n0g2"]


def test_orders_free_devices_before_another_job_takes_them():
    """Two split jobs are packed: "a" onto node n0, where "b" still holds a device, and "b"
    onto n2. "a" sorts first, yet its order waits for "b" to leave n0."""
    devices = [
        Device(f"n{n}g{g}", 2 * n + g, f"n{n}", f"uuid-{n}{g}", "virtual", True)
        for n in range(3)
        for g in range(2)
    ]
    jobs = [
        JobDemand(job_id, job_id, max_gpus=2, submitted=created, current=held)
        for job_id, created, held in (("a", 0.0, ("n0g0", "n1g0")), ("b", 1.0, ("n0g1", "n2g0")))
    ]
    orders = plan(jobs, devices, "fair-share", now=0.0, min_rescale_interval=0.0)
    assert [(o.job_id, o.action, o.devices) for o in orders] == [
        ("b", "resize", ("n2g0", "n2g1")),
        ("a", "resize", ("n0g0", "n0g1")),
    ]


class OneEach(FairShare):
    """A deployment's own policy: at most one device per job (for the test below)."""

    def count(self, jobs, held, capacity, frozen):
        counts = super().count(jobs, held, capacity, frozen)
        return {job_id: min(n, 1) for job_id, n in counts.items()}


def test_policies_are_classes_chosen_by_name_or_import_path():
    devices = [DeviceSlot(f"g{i}") for i in range(4)]
    jobs = [JobDemand("a", "ana", max_gpus=4), JobDemand("b", "bo", max_gpus=4, submitted=1)]
    for name, cls in POLICIES.items():
        assert allocate(jobs, devices, name) == allocate(jobs, devices, cls())
    assert load_policy("priority").__class__ is Priority
    own = load_policy(f"{__name__}.OneEach")
    assert own.allocate(jobs, devices) == {"a": ["g0"], "b": ["g1"]}
    with pytest.raises(ValueError, match=r"'os\.path' is not a Policy subclass"):
        load_policy("os.path")
    with pytest.raises(ValueError, match=r"EDTApp\.policy must be one of fair-share, priority"):
        load_policy("fairshare", "EDTApp.policy")
    with pytest.raises(ValueError, match=r"'nope\.Nope' is neither"):
        EDTApp(policy="nope.Nope")


@st.composite
def share_rules(draw):
    """Weights and quotas for the users of `clusters`, with groups that overlap."""
    weights = draw(st.dictionaries(st.sampled_from(USERS), st.sampled_from([0.5, 1.0, 2.0, 3.0])))
    user_quotas = draw(st.dictionaries(st.sampled_from(USERS), st.integers(0, 6)))
    groups = draw(
        st.dictionaries(st.sampled_from(USERS), st.lists(st.sampled_from(["ml", "cv"]), max_size=2))
    )
    group_quotas = draw(st.dictionaries(st.sampled_from(["ml", "cv"]), st.integers(0, 8)))
    return ShareRules(weights, user_quotas, group_quotas, groups)


def policy_with(name: str, rules: ShareRules):
    return POLICIES[name](rules)


@settings(max_examples=200, deadline=None)
@given(any_clusters, share_rules(), all_policies)
def test_no_user_or_group_holds_more_than_its_quota(cluster, rules, name):
    jobs, devices = cluster
    result = allocate(jobs, devices, policy_with(name, rules))
    by_user = totals(result, jobs, lambda j: j.user)
    for user, quota in rules.user_quotas.items():
        assert by_user[user] <= quota
    for group, quota in rules.group_quotas.items():
        members = [u for u, gs in rules.groups.items() if group in gs]
        assert sum(by_user[u] for u in members) <= quota
    given_out = [d for ids in result.values() for d in ids]
    assert len(given_out) == len(set(given_out))
    for job in jobs:
        assert not result[job.id] or job.min_gpus <= len(result[job.id]) <= job.max_gpus


@settings(max_examples=200, deadline=None)
@given(any_clusters, share_rules(), policies)
def test_under_quotas_a_device_idles_only_when_every_job_short_of_its_max_is_capped(
    cluster, rules, name
):
    """Work conservation, within the rules: a device is left idle only when each elastic job
    that could take it is at its max, or its user or one of its groups at its quota."""
    jobs, devices = cluster
    result = allocate(jobs, devices, policy_with(name, rules))
    if sum(len(v) for v in result.values()) == len(devices):
        return
    by_user = totals(result, jobs, lambda j: j.user)

    def capped(user: str) -> bool:
        if by_user[user] >= rules.user_quotas.get(user, math.inf):
            return True
        return any(
            sum(by_user[u] for u, gs in rules.groups.items() if g in gs)
            >= rules.group_quotas.get(g, math.inf)
            for g in set(rules.groups.get(user, ()))
        )

    for job in jobs:
        if result[job.id]:
            assert len(result[job.id]) == job.max_gpus or capped(job.user), job


def test_weights_split_devices_in_proportion_and_quotas_hold_jobs_back_without_blocking():
    devices = [DeviceSlot(f"g{i}") for i in range(6)]
    a = JobDemand("a", "ana", max_gpus=6)
    b = JobDemand("b", "bo", max_gpus=6, submitted=1)
    weighted = FairShare(ShareRules(weights={"ana": 2.0}))
    assert {k: len(v) for k, v in weighted.allocate([a, b], devices).items()} == {"a": 4, "b": 2}
    # ana may hold 2: her second job waits for her quota, and bo's later job starts anyway
    a2 = JobDemand("a2", "ana", min_gpus=2, max_gpus=2, submitted=2)
    b2 = JobDemand("b2", "bo", max_gpus=1, submitted=3)
    capped = FairShare(ShareRules(user_quotas={"ana": 2}))
    counts = {k: len(v) for k, v in capped.allocate([a, b, a2, b2], devices).items()}
    assert counts == {"a": 2, "b": 3, "a2": 0, "b2": 1}
    # one quota for a group caps its users together
    team = FairShare(ShareRules(group_quotas={"ml": 3}, groups={"ana": ["ml"], "bo": ["ml"]}))
    counts = {k: len(v) for k, v in team.allocate([a, b], devices).items()}
    assert counts["a"] + counts["b"] == 3
    with pytest.raises(ValueError, match="weight of user 'ana' must be positive"):
        ShareRules(weights={"ana": 0})


@pytest.mark.parametrize("policy", ["fair-share", "goodput"])
def test_a_user_with_three_jobs_gives_one_up_for_a_user_with_one(policy):
    """Fair between users, not jobs: ana's three running jobs hold all four devices when bo's
    job arrives; she keeps two jobs (the third waits, suspended) and, under fair-share, two
    devices, as bo does (goodput then gives the spare device where it speeds a job up most)."""
    ana = [
        JobDemand(f"a{i}", "ana", max_gpus=4, current=(f"n0g{i}",) + (("n0g3",) if i == 0 else ()))
        for i in range(3)
    ]
    bo = JobDemand("b", "bo", max_gpus=4, submitted=1)
    result = allocate([*ana, bo], slots(4), policy)
    assert result["a0"] and result["a1"] and result["a2"] == []  # the latest gives way
    if policy == "fair-share":
        assert sum(len(result[j.id]) for j in ana) == 2 and len(result["b"]) == 2
    # with bo wanting only one device, ana keeps her three jobs
    small = replace(bo, max_gpus=1)
    result = allocate([*ana, small], slots(4), policy)
    assert all(result[j.id] for j in ana) and len(result["b"]) == 1


# ---- restart jobs and allowed sizes --------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(
    kind_clusters(),
    all_policies,
    st.sampled_from([0.0, 30.0]),
    st.sampled_from([0.0, 60.0]),
)
def test_every_count_is_one_of_the_job_s_sizes(case, policy, interval, restart_interval):
    """A job is given only counts it may run at; a rigid one that runs keeps what it holds.
    Nothing is given twice, and every count is within min and max."""
    jobs, devices = case
    result = allocate(
        jobs,
        devices,
        policy,
        now=100.0,
        min_rescale_interval=interval,
        restart_interval=restart_interval,
    )
    given_out = [d for ids in result.values() for d in ids]
    assert len(given_out) == len(set(given_out))
    assert set(given_out) <= {d.id for d in devices}
    for job in jobs:
        n = len(result[job.id])
        if n and job.rigid and job.current:
            assert set(result[job.id]) == set(job.current)
        elif n:
            assert n in allowed_counts(job), (job, n)
            assert job.min_gpus <= n <= job.max_gpus


@settings(max_examples=400, deadline=None)
@given(kind_clusters(gone=False), all_policies, st.sampled_from([30.0, 60.0]), st.booleans())
def test_a_restart_job_within_its_interval_keeps_its_count_unless_a_job_is_admitted(
    case, policy, restart_interval, running_only
):
    """Within `restart_interval` of its last resize a restart job keeps its count, and its very
    devices, unless a waiting job is admitted; then it may only shrink. (One level of priority,
    one job per user, and running jobs at counts they may keep: there, keeping its count never
    suspends another job.) `running_only`: no waiting job, so any change would be a rebalance."""
    jobs, devices = case
    jobs = [replace(j, user=j.id, priority=0) for j in jobs if j.current or not running_only]
    jobs = [
        replace(j, sizes=None) if j.current and len(j.current) not in allowed_counts(j) else j
        for j in jobs
    ]
    now = 100.0
    result = allocate(jobs, devices, policy, now=now, restart_interval=restart_interval)
    admitted = any(result[j.id] and not j.current for j in jobs)
    for job in jobs:
        h = held_restart(job, devices)
        n = len(result[job.id])
        if not h:
            continue
        if recent(job, now, restart_interval):
            assert n <= h
            if not admitted:
                assert n == h and set(result[job.id]) == set(job.current)
        elif not admitted and n < h:
            # past its interval, it gives up only devices it does not use
            assert job.throughput and throughput_curve(job)[n] >= throughput_curve(job)[h]


@st.composite
def running_clusters(draw):
    """Every job running, one per user, the first a restart job; the restart jobs resized
    within the last 50 s, with reports or without: any change is a rebalance."""
    size = draw(st.integers(2, 10))
    devices = [DeviceSlot(f"n{i // 4}g{i % 4}", f"n{i // 4}") for i in range(size)]
    free = [d.id for d in devices]
    jobs = []
    for k in range(draw(st.integers(2, 4))):
        if not free:
            break
        n = draw(st.integers(1, min(8, len(free))))
        current, free = tuple(free[:n]), free[n:]
        restart = k == 0 or draw(st.booleans())
        measured = draw(st.none() | st.dictionaries(st.integers(1, 8), st.floats(0.1, 100.0)))
        jobs.append(
            JobDemand(
                f"j{k}",
                f"u{k}",
                max_gpus=draw(st.integers(n, 8)),
                current=current,
                submitted=float(k),
                last_rescale=draw(st.floats(50.0, 100.0)) if restart else None,
                restart_cost_s=draw(st.floats(0.0, 120.0)) if restart else None,
                remaining_steps=draw(st.none() | st.floats(0.0, 1e5)),
                throughput=measured or None,
            )
        )
    return jobs, devices


@settings(max_examples=300, deadline=None)
@given(running_clusters(), all_policies)
def test_running_restart_jobs_within_their_interval_are_never_rebalanced(case, policy):
    jobs, devices = case
    result = allocate(jobs, devices, policy, now=100.0, restart_interval=60.0)
    for job in jobs:
        if job.restarts:
            assert result[job.id] == list(job.current)


@settings(max_examples=400, deadline=None)
@given(kind_clusters(), all_policies, st.sampled_from([0.0, 30.0]), st.sampled_from([0.0, 60.0]))
def test_a_restart_job_grows_only_when_the_gain_pays_and_its_interval_is_over(
    case, policy, interval, restart_interval
):
    jobs, devices = case
    now = 100.0
    result = allocate(
        jobs,
        devices,
        policy,
        now=now,
        min_rescale_interval=interval,
        restart_interval=restart_interval,
    )
    for job in jobs:
        h = held_restart(job, devices)
        n = len(result[job.id])
        if h and n > h:
            assert not recent(job, now, restart_interval)
            assert pays(job, h, n)
        if h and n == h:
            assert set(result[job.id]) == set(job.current)  # a move would restart it


@settings(max_examples=200, deadline=None)
@given(kind_clusters(), all_policies, st.randoms(use_true_random=False))
def test_kinds_deterministic_and_independent_of_input_order(case, policy, rnd):
    jobs, devices = case
    first = allocate(jobs, devices, policy, now=100.0, restart_interval=60.0)
    shuffled = list(jobs)
    rnd.shuffle(shuffled)
    assert allocate(shuffled, devices, policy, now=100.0, restart_interval=60.0) == first


def test_a_restart_job_grows_only_when_the_time_saved_pays_for_the_restart():
    """Alone on 4 devices, at 10 steps/s on 2 (20 on 4): 1,000 steps left take 100 s on 2 and
    50 s on 4, which pays for a 20 s restart twice over; 300 steps (30 s against 15 s) do not,
    and it keeps its 2 devices while 2 idle. An elastic job grows either way."""
    curve = {1: 5.0, 2: 10.0, 4: 20.0}
    job = JobDemand(
        "r", "ana", max_gpus=4, current=("n0g0", "n0g1"), remaining_steps=1000,
        throughput=curve, restart_cost_s=20.0,
    )  # fmt: skip
    for name in ("fair-share", "goodput"):
        assert len(allocate([job], slots(4), name)["r"]) == 4
        short = replace(job, remaining_steps=300)
        assert allocate([short], slots(4), name)["r"] == ["n0g0", "n0g1"]
        assert len(allocate([replace(short, restart_cost_s=None)], slots(4), name)["r"]) == 4
    # growing to 3 saves 100 - 66.7 = 33 s, under 2 x 20 s: only 4 pays; sizes (1, 2, 3) stop
    three = replace(job, sizes=(1, 2, 3))
    assert len(allocate([three], slots(4))["r"]) == 2
    # a job that reported nothing yet grows as fair share says: its gain is unknown
    quiet = replace(job, remaining_steps=None, throughput=None)
    assert len(allocate([quiet], slots(4))["r"]) == 4


def test_a_restart_job_waits_out_its_interval_before_it_grows():
    job = JobDemand(
        "r", "ana", max_gpus=4, current=("n0g0",), last_rescale=90.0, restart_cost_s=10.0
    )
    assert allocate([job], slots(4), now=100.0, restart_interval=60.0)["r"] == ["n0g0"]
    assert len(allocate([job], slots(4), now=150.0, restart_interval=60.0)["r"]) == 4
    assert len(allocate([job], slots(4), now=100.0)["r"]) == 4  # no interval set


def test_a_waiting_job_takes_devices_from_a_restart_job_at_any_time():
    r = JobDemand(
        "r", "ana", max_gpus=4, current=("n0g0", "n0g1", "n0g2", "n0g3"), last_rescale=99.0,
        restart_cost_s=60.0,
    )  # fmt: skip
    b = JobDemand("b", "bo", max_gpus=4, submitted=1.0)
    result = allocate([r, b], slots(4), now=100.0, restart_interval=60.0)
    assert result == {"r": ["n0g0", "n0g1"], "b": ["n0g2", "n0g3"]}


def test_fair_share_does_not_restart_a_job_to_rebalance_running_jobs():
    """Elastic "e" holds 1 and restart "r" 3: fair share would move a device from r to e, but
    that would restart r for no newcomer. Elastic, r would give it up."""
    r = JobDemand("r", "ana", max_gpus=4, current=("n0g0", "n0g1", "n0g2"), restart_cost_s=5.0)
    e = JobDemand("e", "bo", max_gpus=4, current=("n0g3",), submitted=1.0)
    assert allocate([r, e], slots(4)) == {"r": ["n0g0", "n0g1", "n0g2"], "e": ["n0g3"]}
    elastic = allocate([replace(r, restart_cost_s=None), e], slots(4))
    assert len(elastic["r"]) == 2 and len(elastic["e"]) == 2


def test_a_restart_job_gives_up_devices_it_does_not_use_once_its_interval_is_over():
    """goodput grew "r" to 4, where it turned out no faster than on 2: past its interval it
    goes back to 2, and "e" takes the two devices. Under fair-share the two share evenly: the
    device "r" gives up is one it does not use. Had 4 been faster than 3, "r" would keep 4."""
    r = JobDemand(
        "r", "ana", max_gpus=4, current=("n0g0", "n0g1", "n0g2", "n0g3"), last_rescale=0.0,
        remaining_steps=1e4, throughput={2: 20.0, 4: 20.0}, restart_cost_s=10.0,
    )  # fmt: skip
    e = JobDemand(
        "e", "bo", max_gpus=4, current=("n1g0", "n1g1"), remaining_steps=1e4,
        throughput={1: 10.0, 2: 20.0}, submitted=1.0,
    )  # fmt: skip
    devices = slots(4) + [DeviceSlot(f"n1g{i}", "n1") for i in range(2)]
    result = allocate([r, e], devices, "goodput", now=100.0, restart_interval=60.0)
    assert len(result["r"]) == 2 and len(result["e"]) == 4
    within = allocate([r, e], devices, "goodput", now=30.0, restart_interval=60.0)
    assert within["r"] == list(r.current)
    fair = allocate([r, e], devices, "fair-share", now=100.0, restart_interval=60.0)
    assert len(fair["r"]) == 3 and len(fair["e"]) == 3
    faster = replace(r, throughput={2: 20.0, 4: 30.0})
    fair = allocate([faster, e], devices, "fair-share", now=100.0, restart_interval=60.0)
    assert fair["r"] == list(r.current) and len(fair["e"]) == 2


def test_a_higher_priority_job_still_takes_a_restart_job_s_devices():
    """Keeping r's count would suspend it: the level above takes its devices, r shrinks."""
    r = JobDemand(
        "r", "ana", max_gpus=4, current=("n0g0", "n0g1", "n0g2"), restart_cost_s=60.0,
        last_rescale=99.0,
    )  # fmt: skip
    high = JobDemand("h", "bo", max_gpus=3, priority=1, current=("n0g3",), last_rescale=0.0)
    result = allocate([r, high], slots(4), "priority", now=100.0, restart_interval=60.0)
    assert len(result["h"]) == 3 and len(result["r"]) == 1


def test_a_restart_job_that_lost_a_device_is_counted_like_a_new_one():
    """Its workers restart anyway: it takes what the policy gives, interval or not."""
    r = JobDemand(
        "r", "ana", max_gpus=4, current=("g0", "g1", "g9"), restart_cost_s=60.0, last_rescale=99.0
    )
    devices = [DeviceSlot(f"g{i}") for i in range(4)]
    result = allocate([r], devices, now=100.0, restart_interval=60.0)
    assert result["r"] == ["g0", "g1", "g2", "g3"]


def test_a_restart_job_at_the_same_count_is_not_moved():
    """Elastic, a split job moves onto the node that freed (`_place`); a restart job stays."""
    devices = slots(2, nodes=2)
    split = JobDemand("a", "ana", max_gpus=2, current=("n0g0", "n1g0"), restart_cost_s=10.0)
    other = JobDemand("b", "bo", max_gpus=1, current=("n0g1",), submitted=1)
    assert allocate([split, other], devices)["a"] == ["n0g0", "n1g0"]
    assert allocate([replace(split, restart_cost_s=None), other], devices)["a"] == ["n1g0", "n1g1"]


def test_sizes_round_down_and_the_rest_goes_elsewhere_or_idles():
    """A job that may run on 1, 2 or 4 devices gets 2 of 3; the third goes to another job."""
    sized = JobDemand("s", "ana", max_gpus=4, sizes=(1, 2, 4))
    assert len(allocate([sized], slots(3))["s"]) == 2
    other = JobDemand("e", "bo", max_gpus=1, submitted=1.0)
    result = allocate([sized, other], slots(3))
    assert len(result["s"]) == 2 and len(result["e"]) == 1
    # two sized jobs on 6 devices: 3 + 3 is not allowed; the later rounds down, the first
    # takes the freed device: 4 + 2, nothing idles
    twin = replace(sized, id="t", user="bo", submitted=1.0)
    result = allocate([sized, twin], slots(6))
    assert sorted(len(v) for v in result.values()) == [2, 4]
    # its minimum is raised to an allowed count: min 3 of (2, 4) waits for 4 devices
    big = JobDemand("b", "cy", min_gpus=3, max_gpus=4, sizes=(2, 4))
    assert allocate([big], slots(3))["b"] == []
    assert len(allocate([big], slots(4))["b"]) == 4


def test_goodput_grows_a_sized_job_only_to_its_sizes():
    job = JobDemand(
        "a", "ana", max_gpus=8, remaining_steps=1e6, throughput={1: 10.0, 2: 20.0, 3: 30.0},
        sizes=(1, 2, 4, 8),
    )  # fmt: skip
    assert len(allocate([job], slots(8), "goodput")["a"]) in (1, 2, 4, 8)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_gpus": 4, "min_gpus": 3, "sizes": (1, 2, 8)}, "hold no count between"),
        ({"max_gpus": 4, "restart_cost_s": -1.0}, "restart_cost_s must be 0 or more"),
        ({"max_gpus": 4, "restart_cost_s": math.inf}, "restart_cost_s must be 0 or more"),
    ],
)
def test_bad_restart_fields_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        JobDemand("x", "ana", **kwargs)


def test_sizes_are_stored_sorted_once_and_rigid_wins_over_restart():
    job = JobDemand("x", "ana", max_gpus=8, sizes=(4, 1, 4, 2))
    assert job.sizes == (1, 2, 4) and allowed_counts(job) == [1, 2, 4]
    assert JobDemand("x", "ana", max_gpus=2, restart_cost_s=5.0).restarts
    assert not JobDemand("x", "ana", max_gpus=2, restart_cost_s=5.0, rigid=True).restarts
