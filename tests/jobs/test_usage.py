"""Accounting (jobs/usage.py): GPU-seconds held and used, from a hand-made event history whose
sums are worked out below, then through the real store and service over the fake runner (with
a clock the test sets), and across a reopening of the store."""

from __future__ import annotations

import pytest
from fakes import FakeRunner, fake_service

from jupyter_edt.jobs.models import JobSpec, JobState
from jupyter_edt.jobs.service import JobService
from jupyter_edt.jobs.store import JobStore
from jupyter_edt.jobs.usage import (
    JobUsage,
    Quota,
    UsageBy,
    aggregate,
    job_usage,
    quota_of,
    total,
)
from jupyter_edt.jobs.users import Identity
from jupyter_edt.scheduling.policy import ShareRules


def state(job_id: str, user: str, t: float, name: str) -> dict:
    return {"job_id": job_id, "user": user, "time": t, "kind": "state", "state": name}


def alloc(job_id: str, user: str, t: float, n: int) -> dict:
    devices = [f"gpu{i}" for i in range(n)]
    return {"job_id": job_id, "user": user, "time": t, "kind": "allocation", "devices": devices}


# Job a (alice): starts on 2 GPUs at 110, runs from 120, grows to 4 at 150, is suspended at
# 200 and gives its GPUs back at 210 (its checkpoint written), starts again on 1 GPU at 300,
# runs from 305 and ends at 400.
#   held: 2 x 40 (110-150) + 4 x 60 (150-210) + 1 x 100 (300-400)  = 80 + 240 + 100 = 420
#   used: 2 x 30 (120-150) + 4 x 50 (150-200) + 1 x 95 (305-400)   = 60 + 200 + 95  = 355
A = [
    state("a", "alice", 100, "QUEUED"),
    state("a", "alice", 110, "STARTING"),
    alloc("a", "alice", 110, 2),
    state("a", "alice", 120, "RUNNING"),
    alloc("a", "alice", 150, 4),
    state("a", "alice", 200, "SUSPENDED"),
    alloc("a", "alice", 210, 0),
    state("a", "alice", 210, "QUEUED"),
    state("a", "alice", 300, "STARTING"),
    alloc("a", "alice", 300, 1),
    state("a", "alice", 305, "RUNNING"),
    alloc("a", "alice", 400, 0),
    state("a", "alice", 400, "SUCCEEDED"),
]
# Job b (bob): starts on 3 GPUs at 500, runs from 510, still holds them.
#   up to 600: held 3 x 100 = 300, used 3 x 90 = 270
B = [
    state("b", "bob", 500, "QUEUED"),
    state("b", "bob", 500, "STARTING"),
    alloc("b", "bob", 500, 3),
    state("b", "bob", 510, "RUNNING"),
]
# Job c (alice): waited, and was cancelled without ever holding a GPU.
C = [state("c", "alice", 120, "QUEUED"), state("c", "alice", 130, "CANCELLED")]
HISTORY = A + C + B  # each job's events in the order recorded


def sums(usage: dict[str, JobUsage]) -> dict[str, tuple[float, float]]:
    return {job_id: (u.held, u.used) for job_id, u in usage.items()}


def test_held_and_used_over_all_of_history():
    usage = job_usage(HISTORY, since=0, until=600)
    assert sums(usage) == {"a": (420, 355), "b": (300, 270), "c": (0, 0)}
    assert usage["a"].user == "alice" and usage["b"].user == "bob"


def test_a_range_clips_what_was_held_across_its_ends():
    # a from 130: 2 x 20 (130-150) + 240 + 1 x 20 (300-320) = 300 held;
    #             2 x 20 + 200 + 1 x 15 (305-320) = 255 used
    assert sums(job_usage(A, since=130, until=320)) == {"a": (300, 255)}
    # a held nothing between its suspension and its restart
    assert sums(job_usage(A, since=220, until=290)) == {"a": (0, 0)}
    # b up to 550 (say, now): 3 x 50 held, 3 x 40 used
    assert sums(job_usage(B, since=0, until=550)) == {"b": (150, 120)}
    assert sums(job_usage(B, since=550, until=550)) == {"b": (0, 0)}


def test_only_the_last_events_before_the_range_matter():
    since, until = 160, 600
    before = [e for e in A if e["time"] <= since]
    last = [
        max((e for e in before if e["kind"] == kind), key=before.index)
        for kind in ("state", "allocation")
    ]
    within = [e for e in A if since < e["time"] <= until]
    assert sums(job_usage(last + within, since=since, until=until)) == sums(
        job_usage(A, since=since, until=until)
    )


def test_until_before_since_is_refused():
    with pytest.raises(ValueError, match="before"):
        job_usage(A, since=10, until=5)


def test_rows_by_user_group_and_job_and_a_total_that_counts_each_job_once():
    jobs = job_usage(HISTORY, since=0, until=600).values()
    groups = {"alice": ("vision", "nlp"), "bob": ()}
    quotas = {"alice": 2, "vision": 4}

    def rows(by: UsageBy) -> list[dict]:
        return [
            r.to_dict()
            for r in aggregate(jobs, by, groups_of=lambda u: groups[u], quota=quotas.get)
        ]

    assert rows(UsageBy.USER) == [
        {"key": "alice", "held_gpu_seconds": 420, "used_gpu_seconds": 355, "jobs": 1, "quota": 2},
        {"key": "bob", "held_gpu_seconds": 300, "used_gpu_seconds": 270, "jobs": 1, "quota": None},
    ]
    # alice counts in both her groups; bob, in none, in the row keyed None
    assert [(r["key"], r["held_gpu_seconds"], r["quota"]) for r in rows(UsageBy.GROUP)] == [
        ("nlp", 420, None),
        ("vision", 420, 4),
        (None, 300, None),
    ]
    by_job = rows(UsageBy.JOB)
    assert [(r["key"], r["user"], r["quota"]) for r in by_job] == [
        ("a", "alice", None),
        ("b", "bob", None),
    ]  # c never held a GPU
    everyone = total(jobs)
    assert (everyone.held, everyone.used, everyone.jobs) == (720, 625, 2)
    for by in (UsageBy.USER, UsageBy.JOB):
        assert sum(r["held_gpu_seconds"] for r in rows(by)) == everyone.held
        assert sum(r["used_gpu_seconds"] for r in rows(by)) == everyone.used


def test_a_users_quota_is_the_least_of_theirs_and_their_groups():
    assert quota_of("ana", ("a", "b", "c"), {"ana": 3}, {"a": 2, "b": 5}) == Quota(
        user=3, groups={"a": 2, "b": 5}
    )
    assert quota_of("ana", ("a", "b"), {"ana": 3}, {"a": 2, "b": 5}).gpus == 2
    nothing = {"gpus": None, "user": None, "groups": {}}
    assert quota_of("bo", (), {"ana": 3}, {}).to_dict() == nothing
    assert quota_of("bo", ("x",), {}, {"x": 0}).gpus == 0


# Through the store and the service ---------------------------------------------------------


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def make_service(
    tmp_path, clock: Clock, runner: FakeRunner | None = None, database_url: str | None = None
) -> JobService:
    """A service on 4 virtual GPUs over the fake runner, whose time is `clock`'s."""
    return fake_service(
        tmp_path,
        runner,
        database_url=database_url,
        admin_users=["root"],
        rules=ShareRules(user_quotas={"ana": 4}, group_quotas={"ml": 4}),
        clock=clock,
    )


def report(service: JobService, user: str, by: UsageBy, **range_) -> dict:
    return service.usage(user, by=by, **range_).to_dict()


def held_used(row: dict) -> tuple[float, float]:
    return row["held_gpu_seconds"], row["used_gpu_seconds"]


async def play(service: JobService, clock: Clock) -> tuple[str, str]:
    """ana's elastic job takes the 4 GPUs at 1000 and runs from 1010; bo's comes at 1100 and
    takes 2 of them (ana's shrinks to 2), runs from 1120 and ends at 1200, when ana's grows
    back to 4.
        ana: held 4 x 100 + 2 x 100 + 4 x (now - 1200),  used the same less 4 x 10
        bo:  held 2 x 100,                                 used 2 x 80
    """
    runner = service.runner
    assert isinstance(runner, FakeRunner)
    service.users.note(Identity("ana", groups=("ml",)))
    clock.now = 1000
    ana = await service.submit("ana", JobSpec(code="pass", max_gpus=4))
    assert len(runner.running[ana.id]) == 4
    clock.now = 1010
    await runner.started(ana.id)
    await runner.goes_elastic(ana.id)
    clock.now = 1100
    bo = await service.submit("bo", JobSpec(code="pass", max_gpus=2))
    assert len(runner.running[ana.id]) == len(runner.running[bo.id]) == 2
    clock.now = 1120
    await runner.started(bo.id)
    clock.now = 1200
    await runner.exits(bo.id)
    assert len(runner.running[ana.id]) == 4
    return ana.id, bo.id


@pytest.mark.asyncio
async def test_the_service_accounts_a_shared_run_and_keeps_it_across_a_restart(
    tmp_path, database_url
):
    clock = Clock(0)
    runner = FakeRunner(tmp_path / "jobs")
    service = make_service(tmp_path, clock, runner, database_url)
    ana, bo = await play(service, clock)
    clock.now = 1300

    by_user = report(service, "root", UsageBy.USER)
    assert by_user["since"] == 0 and by_user["until"] == 1300
    rows = {r["key"]: r for r in by_user["rows"]}
    assert held_used(rows["ana"]) == (1000, 960) and rows["ana"]["quota"] == 4
    assert held_used(rows["bo"]) == (200, 160) and rows["bo"]["quota"] is None
    assert by_user["total"] == {"held_gpu_seconds": 1200, "used_gpu_seconds": 1120, "jobs": 2}
    by_job = {r["key"]: r for r in report(service, "root", UsageBy.JOB)["rows"]}
    assert held_used(by_job[ana]) == (1000, 960) and held_used(by_job[bo]) == (200, 160)
    group_rows = report(service, "root", UsageBy.GROUP)["rows"]
    by_group = {r["key"]: r for r in group_rows}
    assert held_used(by_group["ml"]) == (1000, 960) and by_group["ml"]["quota"] == 4
    assert held_used(by_group[None]) == (200, 160)

    # a range: [1150, 1250] has ana's 2 x 50 + 4 x 50 and bo's 2 x 50, all running
    ranged = report(service, "root", UsageBy.USER, since=1150, until=1250)
    assert {r["key"]: held_used(r) for r in ranged["rows"]} == {
        "ana": (300, 300),
        "bo": (100, 100),
    }
    # a range beyond now counts up to now only
    ahead = report(service, "root", UsageBy.USER, since=1250, until=5000)
    assert ahead["until"] == 5000 and held_used(ahead["rows"][0]) == (200, 200)
    # a non-admin sees their own usage only, whatever the rows are
    assert [r["key"] for r in report(service, "bo", UsageBy.USER)["rows"]] == ["bo"]
    assert [r["key"] for r in report(service, "bo", UsageBy.JOB)["rows"]] == [bo]
    assert report(service, "bo", UsageBy.USER)["total"]["held_gpu_seconds"] == 200
    assert [r["key"] for r in report(service, "ana", UsageBy.GROUP)["rows"]] == ["ml"]
    with pytest.raises(ValueError, match="before"):
        service.usage("root", since=10, until=5, by=UsageBy.USER)

    # the same after a restart, at the same moment: the store keeps the history
    await service.close()
    service.store.close()
    again = make_service(tmp_path, clock, runner, database_url)
    assert report(again, "root", UsageBy.USER) == by_user
    assert report(again, "root", UsageBy.GROUP)["rows"] == group_rows
    again.store.close()


def test_the_store_reads_the_events_before_the_range_and_within_it_only(database_url):
    store = JobStore(database_url)
    early = store.create_job("ana", JobSpec(code="pass", max_gpus=2), now=10).id
    store.set_state(early, JobState.STARTING, "given", now=20)
    store.set_devices(early, ["gpu0", "gpu1"], "admitted", now=20)
    store.set_state(early, JobState.RUNNING, "started", now=30)
    store.set_devices(early, ["gpu0"], "shrunk", now=40)
    store.add_metrics(early, [{"loss": 1.0}], now=45)
    done = store.create_job("bo", JobSpec(code="pass", max_gpus=1), now=11).id
    store.set_state(done, JobState.CANCELLED, "cancelled", now=12)
    late = store.create_job("bo", JobSpec(code="pass", max_gpus=1), now=200).id

    read = store.usage_events(50, 300)
    # early's last state (RUNNING) and allocation (1 GPU) before 50; done ended before the
    # range; late's submission is within it; no metrics
    assert [(e["job_id"], e["kind"], e["time"]) for e in read] == [
        (early, "state", 30),
        (early, "allocation", 40),
        (late, "state", 200),
    ]
    assert read[0]["user"] == "ana" and read[0]["name"] == "job"
    assert [e["job_id"] for e in store.usage_events(50, 300, user="bo")] == [late]
    assert sums(job_usage(read, since=50, until=100)) == {early: (50, 50), late: (0, 0)}
    store.close()
