"""The Prometheus metrics of a real job service (store, scheduler, policies) over the fake
runner, whose jobs the test plays: after two users, a quota, rescales, a restart and lost
drivers, every gauge equals what the store holds and every counter what its event log says,
in the exposition prometheus_client's parser reads."""

from __future__ import annotations

import time

import pytest
from fakes import FakeRunner, fake_service
from prometheus_client import generate_latest
from scrapes import Scrape

from jupyter_edt.jobs.models import HOLDING, RESCALES, ChangeCause, JobSpec, JobState
from jupyter_edt.jobs.service import JobService
from jupyter_edt.jobs.users import Identity
from jupyter_edt.scheduling.policy import ShareRules
from jupyter_edt.telemetry import Telemetry

pytestmark = pytest.mark.asyncio


def spec(max_gpus: int, kind: str = "elastic") -> JobSpec:
    return JobSpec(code="pass", max_gpus=max_gpus, kind=kind)


def scrape(service: JobService, telemetry: Telemetry) -> Scrape:
    service.feed.flush()  # what the store recorded is published, and counted, now
    return Scrape(generate_latest(telemetry.registry).decode())


def step(generation: int, world_size: int, at: float) -> dict:
    return {"type": "step", "global_step": generation, "generation": generation, "run": "r1",
            "world_size": world_size, "time": at}  # fmt: skip


async def test_the_metrics_match_the_store_after_two_users_a_quota_and_rescales(tmp_path):
    runner = FakeRunner(tmp_path / "jobs")
    service = fake_service(tmp_path, runner, rules=ShareRules(user_quotas={"bob": 1}))
    telemetry = Telemetry(service, service.scheduler.monitor)
    for name in ("alice", "bob"):
        service.users.note(Identity(name))

    # alice's job takes the 4 GPUs, then resizes in place
    wide = await service.submit("alice", spec(4))
    await runner.started(wide.id)
    await runner.goes_elastic(wide.id)
    service.add_metrics({wide.id: [step(1, 4, time.time())]})
    # bob comes: alice shrinks to 3, bob gets his quota's one GPU; his second job waits
    first = await service.submit("bob", spec(2))
    held = await service.submit("bob", spec(1, kind="restart"))
    shrunk = service.store.get_job(wide.id)
    assert len(shrunk.devices) == 3 and service.store.get_job(held.id).reason.startswith("quota")
    decided = shrunk.rescaled
    service.add_metrics({wide.id: [step(1, 4, decided + 0.1), step(2, 3, decided + 1.5)]})
    # bob's running job restarts its workers once, then its driver dies without a checkpoint
    await runner.started(first.id)
    await service.job_restarted(
        first.id, {"count": 1, "reason": "failure", "world_size": 1, "started": time.time()}
    )
    await runner.dies(first.id)
    # his held job starts in its place; alice's dies after a checkpoint, is requeued and
    # starts again; bob's third job waits for his quota
    await runner.started(held.id)
    runner.checkpoints(wide.id, 2)
    await runner.dies(wide.id)
    await service.submit("bob", spec(1))

    metrics = scrape(service, telemetry)
    jobs = service.store.list_jobs()
    events = service.store.events(limit=10_000)

    # gauges: what the store holds now
    holding = [j for j in jobs if j.state in HOLDING]
    running = sum(len(j.devices) for j in holding if j.state == JobState.RUNNING)
    assert metrics.value("edt_gpus", state="allocated") == running
    assert metrics.value("edt_gpus", state="held_not_used") == sum(
        len(j.devices) for j in holding if j.state != JobState.RUNNING
    )
    assert metrics.value("edt_gpus") == 4
    for user in ("alice", "bob"):
        mine = sum(len(j.devices) for j in holding if j.user == user)
        assert metrics.value("edt_user_gpus", user=user) == mine
    assert metrics.value("edt_user_gpu_quota", user="bob") == 1
    assert metrics.labels("edt_user_gpu_quota", "user") == {"bob"}
    for state in JobState:
        for kind in ("elastic", "restart", "rigid"):
            n = sum(1 for j in jobs if j.state == state and j.spec.kind == kind)
            assert metrics.value("edt_jobs", state=state.value, kind=kind) == n, (state, kind)
    queued = sum(1 for j in jobs if j.state == JobState.QUEUED)
    assert metrics.value("edt_queue_length") == queued == 1

    # counters: what the event log recorded
    def caused(kind: str, *causes: ChangeCause) -> list[dict]:
        return [e for e in events if e["kind"] == kind and e.get("cause") in causes]

    rescales = caused("allocation", *RESCALES)
    assert [e["cause"] for e in rescales] == ["shrink"]
    assert metrics.value("edt_rescales_total", kind="elastic", cause="shrink") == 1
    assert metrics.value("edt_rescales_total") == len(rescales)
    assert metrics.value("edt_restarts_total", cause="failure") == 1
    lost = caused("state", ChangeCause.LOST)
    assert [e["state"] for e in lost] == ["FAILED", "SUSPENDED"]
    assert metrics.value("edt_lost_drivers_total", outcome="failed") == 1
    assert metrics.value("edt_lost_drivers_total", outcome="requeued") == 1
    starts = [e for e in events if e["kind"] == "state" and e["state"] == "STARTING"]
    assert metrics.value("edt_queue_wait_seconds_count") == len(starts) == 4
    assert metrics.value("edt_queue_wait_seconds_count", kind="restart") == 1
    # the first step at 3 GPUs is the new group's (generation 2), not the old group's late one
    assert metrics.value("edt_resize_to_first_step_seconds_count", kind="elastic") == 1
    assert metrics.value("edt_resize_to_first_step_seconds_sum") == pytest.approx(1.5)
    assert metrics.value("edt_resize_to_first_step_seconds_bucket", le="1.0") == 0
    assert metrics.value("edt_resize_to_first_step_seconds_bucket", le="2.0") == 1
    service.store.close()


async def test_registries_are_per_service(tmp_path):
    """Two services in one process (as the tests run many servers) count apart."""
    one = fake_service(tmp_path / "one")
    two = fake_service(tmp_path / "two")
    metrics = [Telemetry(s, s.scheduler.monitor) for s in (one, two)]
    await one.submit("alice", spec(1))
    assert scrape(one, metrics[0]).value("edt_jobs") == 1
    assert scrape(two, metrics[1]).value("edt_jobs") == 0
    for s in (one, two):
        s.store.close()
