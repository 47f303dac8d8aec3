"""The shared service's Prometheus metrics, on a real `jupyter edt serve` (tests/serve's: alice;
bob, whose quota is 1 GPU; root, an administrator) with real jobs on 4 virtual GPUs: after two
users share the GPUs under bob's quota and alice's job shrinks in place, the metrics equal what
the service's store holds and its event log says. Only an administrator reads them (no token:
401; a user's: 403)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from edtservice import call
from jobprograms import program
from scrapes import Scrape
from waiting import eventually_sync

from jupyter_edt.jobs.models import HOLDING, RESCALES, Job, JobState
from jupyter_edt.jobs.store import JobStore
from jupyter_edt.notebook import EDTClient
from jupyter_edt.serve.auth import AccessDenied, TokenFileAuthenticator

#: Steps go on long after the test is done with them (the job is cancelled then).
LONG_RUN = program(200, delay=0.05)


@pytest.fixture
def store(service) -> Iterator[JobStore]:
    """The service's own store, read beside it."""
    opened = JobStore(service.settings["database_url"])
    yield opened
    opened.close()


def scrape(service, token: str) -> Scrape:
    status, body, headers = call(service.url, "GET", "edt/api/v1/metrics", token)
    assert status == 200, body
    assert headers["Content-Type"].startswith("text/plain")
    return Scrape(body.decode())


def test_only_an_administrator_reads_the_metrics(service, tokens):
    status, body, headers = call(service.url, "GET", "edt/api/v1/metrics", None)
    assert status == 401 and headers["WWW-Authenticate"].startswith("token")
    status, body, _ = call(service.url, "GET", "edt/api/v1/metrics", tokens["alice"])
    assert status == 403 and "administrators" in body["message"]
    status, body, _ = call(service.url, "GET", "edt/api/v1/metrics", "x" * 32)
    assert status == 403 and body["message"] == "The token is not valid here."
    scrape(service, tokens["root"])


@pytest.mark.asyncio
async def test_an_administrator_by_the_services_own_settings_reads_them_too(tmp_path):
    """`EDTService.admin_users` makes administrators as the token file's `admin` does."""
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"dana": {"tokens": ["d" * 16]}}))
    tokens.chmod(0o600)
    auth = TokenFileAuthenticator(tokens_file=str(tokens))
    with pytest.raises(AccessDenied, match="administrators"):
        await auth.authenticate_scraper("d" * 16, lambda name: False)
    assert (await auth.authenticate_scraper("d" * 16, {"dana"}.__contains__)).name == "dana"
    assert await auth.authenticate_scraper("e" * 16, {"dana"}.__contains__) is None


def test_the_metrics_match_the_store_after_two_users_share_the_gpus(service, tokens, store):
    alice = EDTClient(service.url, tokens["alice"])
    bob = EDTClient(service.url, tokens["bob"])
    wide = alice.submit(LONG_RUN, name="wide", max_gpus=4)
    submitted = [(alice, wide)]
    try:
        eventually_sync(
            lambda: running_on(store.get_job(wide.id), 4), "alice's job elastic on 4 GPUs"
        )
        # bob comes: alice's job shrinks to 3 GPUs in place, bob's runs on his quota's one,
        # and his second job waits for it
        first = bob.submit(LONG_RUN, name="first", max_gpus=2)
        held = bob.submit(program(1), name="held", max_gpus=1)
        submitted += [(bob, first), (bob, held)]
        eventually_sync(lambda: running_on(store.get_job(first.id), 1), "bob's job running")
        assert len(store.get_job(wide.id).devices) == 3
        assert store.get_job(held.id).reason.startswith("quota")
        resized = eventually_sync(
            lambda: scrape(service, tokens["root"]),
            "the first step of alice's job at 3 GPUs measured",
            until=lambda m: m.value("edt_resize_to_first_step_seconds_count") >= 1,
        )
        assert resized.value("edt_resize_to_first_step_seconds_count", kind="elastic") == 1
        steps = [r for r in store.metrics(wide.id) if r.get("type") == "step"]
        assert any(r["world_size"] == 3 for r in steps)
        metrics, jobs, events = eventually_sync(
            lambda: steady_scrape(service, tokens["root"], store),
            "a scrape while the store stood still",
        )
        check_against_the_store(metrics, jobs, events)
    finally:
        for client, job in submitted:
            if not client.get(job.id).done:
                client.cancel(job.id)


def running_on(job: Job, gpus: int) -> bool:
    return job.state == JobState.RUNNING and job.elastic and len(job.devices) == gpus


def steady_scrape(service, token: str, store: JobStore):
    """A scrape, with the jobs and events of the store as they stood throughout it (None
    when something changed meanwhile: a metrics record, say)."""
    before = store.last_event_id()
    metrics = scrape(service, token)
    jobs, events = store.list_jobs(), store.events(limit=100_000)
    if store.last_event_id() != before or (events and events[-1]["id"] != before):
        return None
    return metrics, jobs, events


def check_against_the_store(metrics: Scrape, jobs: list[Job], events: list[dict]) -> None:
    holding = [j for j in jobs if j.state in HOLDING]
    allocated = sum(len(j.devices) for j in holding if j.state == JobState.RUNNING)
    assert metrics.value("edt_gpus", state="allocated") == allocated == 4
    assert metrics.value("edt_gpus", state="held_not_used") == 0
    assert metrics.value("edt_gpus", state="idle") == 0
    for user, held in (("alice", 3), ("bob", 1)):
        mine = sum(len(j.devices) for j in holding if j.user == user)
        assert metrics.value("edt_user_gpus", user=user, state="allocated") == mine == held
    assert metrics.value("edt_user_gpu_quota", user="bob") == 1
    assert "alice" not in metrics.labels("edt_user_gpu_quota", "user")
    for state in JobState:
        for kind in ("elastic", "restart", "rigid"):
            n = sum(1 for j in jobs if j.state == state and j.spec.kind == kind)
            assert metrics.value("edt_jobs", state=state.value, kind=kind) == n, (state, kind)
    queued = sum(1 for j in jobs if j.state == JobState.QUEUED)
    assert metrics.value("edt_queue_length") == queued == 1
    starts = [e for e in events if e["kind"] == "state" and e["state"] == "STARTING"]
    assert metrics.value("edt_queue_wait_seconds_count") == len(starts) == 2
    rescales = [e for e in events if e["kind"] == "allocation" and e.get("cause") in RESCALES]
    assert [e["cause"] for e in rescales] == ["shrink"]
    assert metrics.value("edt_rescales_total", kind="elastic", cause="shrink") == 1
    assert metrics.value("edt_rescales_total") == len(rescales)
    assert metrics.value("edt_lost_drivers_total") == 0
    assert metrics.value("edt_restarts_total") == 0
    assert json.dumps(sorted(metrics.labels("edt_gpus", "state"))) == json.dumps(
        ["allocated", "held_not_used", "idle"]
    )
