"""The allocation timeline (jobs/allocations.py) from hand-made events, what prompted each
change (jobs/triggers.py), and both through the real scheduler and store over the fake runner:
each allocation event says why it happened, and the timeline reads them back."""

from __future__ import annotations

import pytest
from fakes import FakeRunner, fake_service

from jupyter_edt.jobs.allocations import (
    Change,
    Interval,
    anonymised,
    device_intervals,
    timeline,
)
from jupyter_edt.jobs.models import JobSpec
from jupyter_edt.jobs.service import JobService
from jupyter_edt.jobs.triggers import Changes, Snapshot, Trigger, changes, trigger_of
from jupyter_edt.scheduling.inventory import Device


def alloc(id_: int, job_id: str, t: float, devices: list[str], cause: str, **more) -> dict:
    user = "alice" if job_id.startswith("a") else "bob"
    return {
        "id": id_,
        "job_id": job_id,
        "user": user,
        "name": f"{job_id}-name",
        "time": t,
        "devices": devices,
        "reason": f"{cause} reason",
        "cause": cause,
        **more,
    }


# a: gpu0, gpu1 from 100; shrinks to gpu0 at 200 (b arrives, takes gpu1 until 300); grows
# back to gpu0, gpu1 at 300; ends at 400.
HISTORY = [
    alloc(1, "a", 100, ["gpu0", "gpu1"], "start", trigger="arrival"),
    alloc(2, "a", 200, ["gpu0"], "shrink", trigger="arrival"),
    alloc(3, "b", 200, ["gpu1"], "start", trigger="arrival"),
    alloc(4, "b", 300, [], "end"),
    alloc(5, "a", 300, ["gpu0", "gpu1"], "grow", trigger="departure"),
    alloc(6, "a", 400, [], "end"),
]


def spans(intervals: list[Interval]) -> list[tuple]:
    return [(i.job_id, i.start, i.end, [c.event_id for c in i.changes]) for i in intervals]


def test_each_device_has_an_interval_per_hold_with_every_change_of_its_job_meanwhile():
    by_device = device_intervals(HISTORY, since=0, until=1000)
    assert spans(by_device["gpu0"]) == [("a", 100, 400, [1, 2, 5, 6])]
    assert spans(by_device["gpu1"]) == [
        ("a", 100, 200, [1, 2]),
        ("b", 200, 300, [3, 4]),
        ("a", 300, 400, [5, 6]),
    ]
    shrink = by_device["gpu1"][0].changes[1]
    assert shrink == Change(2, 200.0, "shrink", "arrival", "shrink reason", 1)
    assert by_device["gpu1"][1].user == "bob" and by_device["gpu1"][1].name == "b-name"


def test_a_range_keeps_the_intervals_that_overlap_it_whole_and_leaves_later_events_out():
    by_device = device_intervals(HISTORY, since=250, until=350)
    # a's hold on gpu0 began before the range: it keeps its start and its earlier changes
    assert spans(by_device["gpu0"]) == [("a", 100, None, [1, 2, 5])]
    assert spans(by_device["gpu1"]) == [("b", 200, 300, [3, 4]), ("a", 300, None, [5])]
    # an interval that ended at `since` is out
    assert spans(device_intervals(HISTORY, since=400, until=500).get("gpu1", [])) == []
    assert device_intervals([], since=0, until=10) == {}
    with pytest.raises(ValueError, match="before since"):
        device_intervals(HISTORY, since=10, until=5)


def test_events_stored_before_causes_were_read_with_none():
    old = {"id": 1, "job_id": "a", "user": "u", "name": "n", "time": 5.0, "devices": ["g"]}
    (interval,) = device_intervals([old], since=0, until=10)["g"]
    assert interval.changes == [Change(1, 5.0, None, None, None, 1)]


def test_anonymised_hides_the_job_and_its_sentences_not_what_happened():
    interval = device_intervals(HISTORY, since=0, until=1000)["gpu1"][1]
    hidden = anonymised(interval)
    assert (hidden.job_id, hidden.user, hidden.name) == (None, None, None)
    assert [(c.cause, c.trigger, c.reason) for c in hidden.changes] == [
        ("start", "arrival", None),
        ("end", None, None),
    ]
    assert (hidden.start, hidden.end) == (200, 300)
    assert interval.user == "bob"  # the original is untouched


def test_the_timeline_has_every_present_device_then_those_gone():
    devices = [Device(f"gpu{i}", i, "node-a", f"uuid{i}", f"GPU {i}", True) for i in (0, 2)]
    by_device = device_intervals(HISTORY, since=0, until=1000)
    rows = timeline(devices, by_device)
    assert [(r.id, r.node, r.present, len(r.intervals)) for r in rows] == [
        ("gpu0", "node-a", True, 1),
        ("gpu2", "node-a", True, 0),
        ("gpu1", None, False, 3),
    ]
    assert rows[0].to_dict()["intervals"][0]["changes"][0]["trigger"] == "arrival"


# triggers ---------------------------------------------------------------------------------


def snapshot(jobs: dict, devices=("g0", "g1"), dealable=None, rules=None) -> Snapshot:
    return Snapshot(jobs, frozenset(devices), frozenset(dealable or devices), rules)


def test_changes_between_snapshots():
    before = snapshot({"a": (0, 4), "b": (0, 2)})
    assert not changes(before, before)
    after = snapshot({"a": (5, 4), "c": (0, 1)}, rules="other")
    assert changes(before, after) == Changes(
        arrived=frozenset({"c"}),
        departed=frozenset({"b"}),
        priority=frozenset({"a"}),
        quota=True,
    )
    assert changes(before, snapshot({"a": (0, 3), "b": (0, 2)})).limits == {"a"}
    assert changes(before, snapshot(before.jobs, devices=("g0",))).devices
    releasing = snapshot(before.jobs, dealable=("g0",))
    assert changes(releasing, before) == Changes(released=True)


def test_a_job_s_own_change_comes_first_then_a_shrink_blames_an_arrival_a_grow_a_departure():
    both = Changes(arrived=frozenset({"b"}), departed=frozenset({"c"}))
    assert trigger_of("b", 2, both) is Trigger.ARRIVAL
    assert trigger_of("a", -1, both) is Trigger.ARRIVAL
    assert trigger_of("a", 1, both) is Trigger.DEPARTURE
    assert trigger_of("a", 1, Changes(arrived=frozenset({"b"}))) is Trigger.ARRIVAL
    assert trigger_of("a", 1, Changes(released=True)) is Trigger.DEPARTURE
    assert trigger_of("a", -1, Changes(priority=frozenset({"b"}))) is Trigger.PRIORITY
    assert trigger_of("a", 2, Changes(limits=frozenset({"a"}))) is Trigger.LIMITS
    assert trigger_of("a", -1, Changes(devices=True, arrived=frozenset({"b"}))) is Trigger.DEVICES
    assert trigger_of("a", 1, Changes(quota=True)) is Trigger.QUOTA
    assert trigger_of("a", 1, Changes()) is None


# through the scheduler ----------------------------------------------------------------------


def allocations(service: JobService, job_id: str) -> list[tuple]:
    return [
        (len(e["devices"]), e.get("cause"), e.get("trigger"))
        for e in service.store.events(job_id=job_id)
        if e["kind"] == "allocation"
    ]


def spec(max_gpus: int = 4, **fields) -> JobSpec:
    return JobSpec(code="pass", max_gpus=max_gpus, **fields)


@pytest.mark.asyncio
async def test_every_allocation_event_says_what_prompted_it(tmp_path):
    service = fake_service(tmp_path)
    runner = service.runner
    assert isinstance(runner, FakeRunner)
    a = await service.submit("alice", spec())
    await runner.started(a.id)
    await runner.goes_elastic(a.id)
    b = await service.submit("bob", spec(2))
    await runner.started(b.id)
    await runner.goes_elastic(b.id)
    await service.update("bob", b.id, max_gpus=1)  # b gives one back, a takes it
    await runner.exits(b.id)
    assert allocations(service, b.id) == [
        (2, "start", "arrival"),
        (1, "shrink", "limits"),
        (0, "end", None),
    ]
    assert allocations(service, a.id) == [
        (4, "start", "arrival"),
        (2, "shrink", "arrival"),
        (3, "grow", "limits"),
        (4, "grow", "departure"),
    ]
    # and the timeline of the whole history reads them back, as bob sees it (via queries)
    until, last_id, by_device = service.allocations("bob", since=0)
    assert until >= 0
    assert last_id == service.store.last_event_id()
    mine = [i for held in by_device.values() for i in held if i.job_id == b.id]
    others = [i for held in by_device.values() for i in held if i.job_id != b.id]
    assert len(mine) == 2 and all(i.user == "bob" and i.end is not None for i in mine)
    assert others and all(i.job_id is i.user is i.name is None for i in others)
    assert all(c.reason is None for i in others for c in i.changes)
    assert any(i.end is None for i in others)  # a still holds its GPUs
