"""The job service's lifecycle over a fake runner (no processes): the real store, the real
policies and the real scheduling loop, in under a second each. What real drivers and workers do is
tested end to end in test_job_lifecycle, test_recovery, test_driver_lost and test_rigid_jobs."""

from __future__ import annotations

import asyncio

import pytest
from fakes import FakeRunner, fake_service
from waiting import eventually

from jupyter_edt.jobs.models import JobSpec, JobState
from jupyter_edt.jobs.service import JobService, NotAllowed

pytestmark = pytest.mark.asyncio


def make_service(tmp_path, runner: FakeRunner | None = None, **options) -> JobService:
    """A service on 4 virtual GPUs over the fake runner; `options` go to JobService."""
    return fake_service(tmp_path, runner, **options)


def runner_of(service: JobService) -> FakeRunner:
    assert isinstance(service.runner, FakeRunner)
    return service.runner


def spec(max_gpus: int = 4, **fields) -> JobSpec:
    return JobSpec(code="pass", max_gpus=max_gpus, **fields)


def states(service: JobService, job_id: str) -> list[str]:
    return [e["state"] for e in service.store.events(job_id=job_id) if e["kind"] == "state"]


async def test_an_elastic_job_shares_its_gpus_with_a_newcomer_and_takes_them_back(tmp_path):
    service = make_service(tmp_path)
    runner = runner_of(service)
    a = await service.submit("ana", spec())
    assert runner.running[a.id] == ("vgpu0", "vgpu1", "vgpu2", "vgpu3")
    await runner.started(a.id)
    await runner.goes_elastic(a.id)
    b = await service.submit("bo", spec())
    assert len(runner.running[a.id]) == 2 and len(runner.running[b.id]) == 2
    assert set(runner.running[a.id]).isdisjoint(runner.running[b.id])
    # the shrink came before the start, so no device had two jobs
    assert [o[:2] for o in runner.orders] == [("start", a.id), ("resize", a.id), ("start", b.id)]
    await runner.exits(b.id)
    assert service.get("bo", b.id).state == JobState.SUCCEEDED
    assert len(runner.running[a.id]) == 4
    assert service.get("ana", a.id).reason == "processes started"


async def test_a_rigid_job_keeps_its_gpus_and_a_newcomer_waits(tmp_path):
    service = make_service(tmp_path)
    runner = runner_of(service)
    a = await service.submit("ana", spec())
    await runner.started(a.id)  # running, but its program never announced the elastic runtime
    b = await service.submit("bo", spec())
    assert service.get("bo", b.id).state == JobState.QUEUED
    assert [o[:2] for o in runner.orders] == [("start", a.id)]
    with pytest.raises(ValueError, match="max_gpus"):
        await service.update("ana", a.id, max_gpus=2)
    await runner.exits(a.id)
    assert runner.running[b.id] == ("vgpu0", "vgpu1", "vgpu2", "vgpu3")


async def test_a_preempted_job_holds_its_gpus_until_its_checkpoint_is_written(tmp_path):
    service = make_service(tmp_path, policy="priority")
    runner = runner_of(service)
    low = await service.submit("ana", spec())
    await runner.started(low.id)
    await runner.goes_elastic(low.id)
    high = await service.submit("bo", spec(min_gpus=4, priority=5))
    # the submission returns at once; low checkpoints, keeping its devices meanwhile
    assert high.state == JobState.QUEUED
    assert service.get("ana", low.id).state == JobState.SUSPENDED
    assert service.holders("root") == {f"vgpu{i}": None for i in range(4)}
    await eventually(lambda: runner.suspending(low.id), "asked low to checkpoint")
    runner.end_suspension(low.id)
    await eventually(lambda: high.id in runner.running, "started the high-priority job")
    assert service.get("ana", low.id).state == JobState.QUEUED
    assert states(service, low.id)[-2:] == ["SUSPENDED", "QUEUED"]
    await service.close()


async def test_a_cancel_during_a_suspension_stops_waiting_for_it(tmp_path):
    service = make_service(tmp_path, policy="priority")
    runner = runner_of(service)
    low = await service.submit("ana", spec())
    await runner.goes_elastic(low.id)
    await service.submit("bo", spec(min_gpus=4, priority=5))
    await eventually(lambda: runner.suspending(low.id), "asked low to checkpoint")
    cancelled = await service.cancel("ana", low.id)
    assert cancelled.state == JobState.CANCELLED and cancelled.devices == ()
    assert ("cancel", low.id, ()) in runner.orders
    with pytest.raises(NotAllowed, match="already finished"):
        await service.cancel("ana", low.id)


async def test_a_lost_driver_requeues_its_job_from_a_checkpoint_or_fails_it(tmp_path):
    service = make_service(tmp_path, max_restarts=1)
    runner = runner_of(service)
    job = await service.submit("ana", spec())
    await runner.started(job.id)
    await runner.dies(job.id)  # no checkpoint yet
    failed = service.get("ana", job.id)
    assert failed.state == JobState.FAILED
    assert failed.reason == "driver killed by SIGKILL; no checkpoint to resume from"

    job = await service.submit("ana", spec())
    await runner.started(job.id)
    runner.checkpoints(job.id, step=7)
    await runner.dies(job.id)
    again = service.get("ana", job.id)
    assert again.state == JobState.STARTING and again.restarts == 1  # requeued, started again
    assert states(service, job.id)[-3:] == ["SUSPENDED", "QUEUED", "STARTING"]
    await runner.started(job.id)
    await runner.dies(job.id)
    last = service.get("ana", job.id).reason
    assert last.endswith("restarted 1 time(s) already, the most allowed")


async def test_a_restart_follows_running_jobs_and_requeues_lost_ones(tmp_path, database_url):
    runner = FakeRunner(tmp_path / "jobs")
    first = make_service(tmp_path, runner, database_url=database_url)
    kept = await first.submit("ana", spec(max_gpus=2))
    lost = await first.submit("bo", spec(max_gpus=2))
    await runner.started(kept.id)
    await runner.started(lost.id)
    runner.running.pop(lost.id)  # its processes died while no server ran
    await first.close()
    first.store.close()

    second = make_service(tmp_path, runner, database_url=database_url)
    outcome = await second.recover()
    assert outcome == {"reattached": [kept.id], "resumed": [lost.id], "failed": []}
    assert second.get("bo", lost.id).state == JobState.STARTING  # back in line, started again
    assert second.get("ana", kept.id).state == JobState.RUNNING


async def test_only_the_owner_or_an_admin_sees_a_job(tmp_path):
    service = make_service(tmp_path, admin_users=["root"])
    job = await service.submit("ana", spec())
    assert service.get("root", job.id) == service.get("ana", job.id)
    with pytest.raises(KeyError):
        service.get("bo", job.id)
    assert service.list("bo") == [] and [j.id for j in service.list("root")] == [job.id]
    with pytest.raises(NotAllowed):
        service.list("bo", owner="ana")


async def test_a_user_with_three_jobs_gives_one_up_when_another_user_comes(tmp_path):
    service = make_service(tmp_path)
    runner = runner_of(service)
    ana = [await service.submit("ana", spec()) for _ in range(3)]
    for job in ana:
        await runner.started(job.id)
        await runner.goes_elastic(job.id)
    assert sum(len(runner.running[j.id]) for j in ana) == 4
    bo = await service.submit("bo", spec())
    # ana's latest job checkpoints and leaves; bo starts once its GPU is free
    await eventually(lambda: runner.suspending(ana[2].id), "ana's latest job checkpointing")
    assert bo.id not in runner.running
    runner.end_suspension(ana[2].id)
    await eventually(lambda: bo.id in runner.running, "bo's job starting")
    await runner.started(bo.id)
    await runner.goes_elastic(bo.id)
    await service.reschedule()
    assert sum(len(runner.running.get(j.id, ())) for j in ana) == 2
    assert len(runner.running[bo.id]) == 2
    assert service.get("ana", ana[2].id).state == JobState.QUEUED


async def test_quotas_hold_jobs_back_with_a_reason_until_they_no_longer_do(tmp_path):
    from jupyter_edt.jobs.users import Identity
    from jupyter_edt.scheduling.policy import ShareRules

    rules = ShareRules(user_quotas={"bo": 1}, group_quotas={"ml": 2})
    service = make_service(tmp_path, rules=rules)
    runner = runner_of(service)
    service.users.note(Identity("ana", groups=("ml",)))
    service.users.note(Identity("cy", groups=("ml",)))
    ana = await service.submit("ana", spec(min_gpus=2, max_gpus=2))
    bo = await service.submit("bo", spec())
    assert len(runner.running[ana.id]) == 2 and len(runner.running[bo.id]) == 1  # bo's quota
    bo2 = await service.submit("bo", spec())
    waiting = service.get("bo", bo2.id)
    assert waiting.state == JobState.QUEUED
    assert waiting.reason == "quota: bo holds 1 of their 1 GPU(s), and this job needs 1"
    cy = await service.submit("cy", spec())
    assert service.get("cy", cy.id).reason == (
        "quota: group ml holds 2 of its 2 GPU(s), and this job needs 1"
    )
    # a reason goes once its quota no longer holds the job back
    await runner.exits(bo.id)
    assert runner.running[bo2.id]
    assert not service.get("bo", bo2.id).reason.startswith("quota")
    await runner.exits(ana.id)
    assert runner.running[cy.id]
    # the groups heard from identities are kept across a restart
    service.store.close()
    again = make_service(tmp_path)
    assert again.users.groups_of("cy") == ("ml",)
    assert not again.is_admin("cy")
    again.users.note(Identity("cy", groups=("ml",), admin=True))
    assert again.is_admin("cy")


class SlowStart(FakeRunner):
    """Its first start after `gate` is set waits on it: the reschedule that gave the order
    stands still between its orders, as a real start's directory and driver make it."""

    def __init__(self, jobs_dir) -> None:
        super().__init__(jobs_dir)
        self.gate: asyncio.Event | None = None
        self.waiting: asyncio.Future[str] | None = None

    async def start(self, job, devices) -> None:
        if self.gate is not None and self.waiting is not None and not self.waiting.done():
            self.waiting.set_result(job.id)
            await self.gate.wait()
        await super().start(job, devices)


async def test_an_order_planned_before_a_cancel_is_not_carried_out_after_it(tmp_path):
    """Two queued jobs are to start in one reschedule; the second is cancelled while the first
    starts. Its start, planned before the cancel, must not happen: it would set the cancelled
    job going again, its driver running for a job whose record and files are being deleted."""
    runner = SlowStart(tmp_path / "jobs")
    service = make_service(tmp_path, runner)
    holder = await service.submit("ana", spec())
    await runner.started(holder.id)  # rigid, on all 4: the others wait
    first = await service.submit("bo", spec(2))
    second = await service.submit("cy", spec(2))
    assert {service.get(u, j.id).state for u, j in (("bo", first), ("cy", second))} == {
        JobState.QUEUED
    }
    runner.gate, runner.waiting = asyncio.Event(), asyncio.get_running_loop().create_future()
    ending = asyncio.create_task(runner.exits(holder.id))  # its reschedule starts both
    starting = await asyncio.wait_for(runner.waiting, 10)
    user, other = ("cy", second.id) if starting == first.id else ("bo", first.id)
    cancelling = asyncio.create_task(service.cancel(user, other))
    await eventually(lambda: service.get(user, other).state == JobState.CANCELLED, "cancelled")
    runner.gate.set()
    await asyncio.wait_for(asyncio.gather(ending, cancelling), 10)
    assert service.get(user, other).state == JobState.CANCELLED
    assert ("start", other) not in [o[:2] for o in runner.orders]
    assert other not in runner.running


async def test_a_reschedule_whose_caller_is_cancelled_is_carried_out_whole(tmp_path):
    """A job's report asks for a reschedule, and the report's task is cancelled meanwhile (the
    runner cancels a job's watcher when the job is cancelled). The reschedule goes on to its
    end: stopped at a start, it left a driver running that the service did not know, which
    no later cancel could reach."""
    runner = SlowStart(tmp_path / "jobs")
    service = make_service(tmp_path, runner)
    holder = await service.submit("ana", spec())
    await runner.started(holder.id)
    first = await service.submit("bo", spec(2))
    second = await service.submit("cy", spec(2))
    runner.gate, runner.waiting = asyncio.Event(), asyncio.get_running_loop().create_future()
    report = asyncio.create_task(runner.exits(holder.id))  # its reschedule starts both
    await asyncio.wait_for(runner.waiting, 10)
    report.cancel()
    runner.gate.set()
    await eventually(
        lambda: {first.id, second.id} <= set(runner.running), "both jobs started", timeout=10
    )
    assert [o[:2] for o in runner.orders if o[0] == "start"][-2:] in (
        [("start", first.id), ("start", second.id)],
        [("start", second.id), ("start", first.id)],
    )
