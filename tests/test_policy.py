"""Properties of the pure allocation policy, checked over generated clusters and job sets."""

from __future__ import annotations

from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jupyter_edt.scheduling.policy import DeviceSlot, JobDemand, allocate

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


policies = st.sampled_from(["fair-share", "priority"])


def totals(result, jobs, key):
    out: dict = defaultdict(int)
    for job in jobs:
        out[key(job)] += len(result[job.id])
    return out


@settings(max_examples=300, deadline=None)
@given(clusters(), policies, st.sampled_from([0.0, 30.0]))
def test_no_device_twice_and_min_max_respected(case, policy, interval):
    jobs, devices = case
    result = allocate(jobs, devices, policy, now=100.0, min_rescale_interval=interval)
    assert set(result) == {j.id for j in jobs}
    given_out = [d for ids in result.values() for d in ids]
    assert len(given_out) == len(set(given_out))
    assert set(given_out) <= {d.id for d in devices}
    for job in jobs:
        n = len(result[job.id])
        assert n == 0 or job.min_gpus <= n <= job.max_gpus


@settings(max_examples=300, deadline=None)
@given(clusters(), policies, st.sampled_from([0.0, 30.0]))
def test_work_conserving(case, policy, interval):
    """No device idles while an admitted job is below its max."""
    jobs, devices = case
    result = allocate(jobs, devices, policy, now=100.0, min_rescale_interval=interval)
    idle = len(devices) - sum(len(ids) for ids in result.values())
    if idle > 0:
        for job in jobs:
            if result[job.id]:
                assert len(result[job.id]) == job.max_gpus


@settings(max_examples=300, deadline=None)
@given(clusters())
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


@settings(max_examples=300, deadline=None)
@given(clusters())
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
            assert len(devices) - above - same < high.min_gpus or blocked


@settings(max_examples=200, deadline=None)
@given(clusters(), policies, st.randoms(use_true_random=False))
def test_deterministic_and_independent_of_input_order(case, policy, rnd):
    jobs, devices = case
    first = allocate(jobs, devices, policy)
    shuffled = list(jobs)
    rnd.shuffle(shuffled)
    assert allocate(shuffled, devices, policy) == first
    assert allocate(jobs, devices, policy) == first


@settings(max_examples=300, deadline=None)
@given(clusters(), policies)
def test_jobs_keep_their_devices_when_their_count_does_not_drop(case, policy):
    jobs, devices = case
    result = allocate(jobs, devices, policy)
    for job in jobs:
        if job.current and len(result[job.id]) >= len(job.current):
            assert set(job.current) <= set(result[job.id])


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
