"""Live configuration on a real `jupyter edt serve` (tests/serve's: alice, in group ml; bob,
whose quota is 1 GPU; root, an administrator) with real jobs on 4 virtual GPUs: a SIGHUP that
lowers a quota shrinks the job over it in place, with the same driver, and the store records
the change; a file that does not load keeps the running settings; the admin API refuses
others (401, 403) and bad values (400 naming the field), and a raised quota grows a job."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

import pytest
from edtservice import call
from jobprograms import program
from scrapes import Scrape
from waiting import eventually_sync

from jupyter_edt.jobs.models import Job, JobState
from jupyter_edt.jobs.store import JobStore
from jupyter_edt.notebook import EDTClient
from jupyter_edt.runtime.jobdir import JobDir, process_start_time

#: Steps go on long after the test is done with them (the job is cancelled then).
LONG_RUN = program(200, delay=0.05)
CONFIG = "edt/api/v1/admin/config"


@pytest.fixture
def store(service) -> Iterator[JobStore]:
    """The service's own store, read beside it."""
    opened = JobStore(service.settings["database_url"])
    yield opened
    opened.close()


def running_on(job: Job, gpus: int) -> bool:
    return job.state == JobState.RUNNING and job.elastic and len(job.devices) == gpus


def driver_of(service, job_id: str) -> int:
    return JobDir(service.root / "jobs" / job_id).read_status()["pid"]


def last_allocation(store: JobStore, job_id: str) -> dict[str, Any]:
    events = store.events(job_id=job_id, limit=1_000_000)
    return [e for e in events if e["kind"] == "allocation"][-1]


def settings(service, token: str) -> dict[str, Any]:
    status, body, _ = call(service.url, "GET", CONFIG, token)
    assert status == 200, body
    return body


def test_a_sighup_that_lowers_a_quota_shrinks_the_job_in_place(service, tokens, store):
    alice = EDTClient(service.url, tokens["alice"])
    job = alice.submit(LONG_RUN, name="wide", max_gpus=4)
    try:
        eventually_sync(lambda: running_on(store.get_job(job.id), 4), "alice's job on 4 GPUs")
        driver = driver_of(service, job.id)
        service.settings["user_quotas"] = {"bob": 1, "alice": 2}
        service.reload()
        eventually_sync(
            lambda: running_on(store.get_job(job.id), 2), "alice's job shrunk to her new quota"
        )
        assert driver_of(service, job.id) == driver and process_start_time(driver) is not None
        shrunk = last_allocation(store, job.id)
        assert (shrunk["cause"], shrunk["trigger"]) == ("shrink", "quota")
        (change, *_) = store.config_changes()
        assert (change["kind"], change["user"], change["source"]) == ("config", None, "reload")
        assert change["changes"] == [
            {"setting": "user_quotas", "key": "alice", "old": None, "new": 2}
        ]
        assert call(service.url, "GET", "edt/api/v1/user", tokens["alice"])[1]["quota"] == {
            "gpus": 2,
            "user": 2,
            "groups": {},
        }
    finally:
        alice.cancel(job.id)


def test_a_config_file_that_does_not_load_keeps_the_running_settings(service, tokens):
    before = settings(service, tokens["root"])["config"]
    quotas = service.settings["user_quotas"]
    try:
        service.settings["user_quotas"] = {**quotas, "alice": "two"}
        service.reload()
        eventually_sync(
            lambda: "has a bad user_quotas: user_quotas['alice'] must be" in service.log(),
            "the bad value logged",
        )
        path = service.write_config()
        path.write_text(path.read_text() + "c.EDTService.user_quotas = {\n")
        service.process.send_signal(signal.SIGHUP)
        eventually_sync(lambda: "does not load (SyntaxError" in service.log(), "the error logged")
        assert settings(service, tokens["root"])["config"] == before
    finally:
        service.settings["user_quotas"] = quotas
        service.write_config()


def test_the_admin_config_api_refuses_others_and_bad_values_and_applies_a_change(
    service, tokens, store
):
    assert call(service.url, "GET", CONFIG, None)[0] == 401
    for method, body in (("GET", None), ("PATCH", {"user_quotas": {"alice": 4}})):
        status, answer, _ = call(service.url, method, CONFIG, tokens["alice"], body)
        assert status == 403 and "administrator" in answer["message"], answer
    before = settings(service, tokens["root"])
    assert before["config"]["user_quotas"]["bob"] == 1
    for body, field in [
        ({"user_quotas": {"bob": -1}}, "user_quotas"),
        ({"user_weights": {"bob": 0}}, "user_weights"),
        ({"user_groups": {"bob": "ml"}}, "user_groups"),
        ({"quotas": {"bob": 2}}, "quotas"),
        # checked as a whole: the good part is not applied either
        ({"user_quotas": {"bob": 2}, "policy": "no.such.Policy"}, "policy"),
        ([{"user_quotas": {"bob": 2}}], "body"),
    ]:
        status, answer, _ = call(service.url, "PATCH", CONFIG, tokens["root"], body)
        assert (status, answer.get("field")) == (400, field), answer
    assert settings(service, tokens["root"]) == before

    bob = EDTClient(service.url, tokens["bob"])
    job = bob.submit(LONG_RUN, name="narrow", max_gpus=2)
    try:
        eventually_sync(lambda: running_on(store.get_job(job.id), 1), "bob's job on his 1 GPU")
        driver = driver_of(service, job.id)
        raised = {"user_quotas": {"bob": 2}, "user_weights": {"bob": 2}}
        status, after, _ = call(service.url, "PATCH", CONFIG, tokens["root"], raised)
        assert status == 200, after
        assert after["config"]["user_quotas"] == {**before["config"]["user_quotas"], "bob": 2}
        assert after["config"]["user_weights"] == {"bob": 2.0}
        change = after["changes"][0]
        assert (change["user"], change["source"]) == ("root", "api")
        assert change["changes"] == [
            {"setting": "user_quotas", "key": "bob", "old": 1, "new": 2},
            {"setting": "user_weights", "key": "bob", "old": None, "new": 2.0},
        ]
        eventually_sync(
            lambda: running_on(store.get_job(job.id), 2), "bob's job grown to his raised quota"
        )
        assert driver_of(service, job.id) == driver
        assert last_allocation(store, job.id)["trigger"] == "quota"
        status, body, _ = call(service.url, "GET", "edt/api/v1/metrics", tokens["root"])
        assert Scrape(body.decode()).value("edt_user_gpu_quota", user="bob") == 2
    finally:
        bob.cancel(job.id)
        call(service.url, "PATCH", CONFIG, tokens["root"], {"user_quotas": {"bob": 1}})
