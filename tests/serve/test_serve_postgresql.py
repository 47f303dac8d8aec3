"""`jupyter edt serve` on a real PostgreSQL that goes away for a moment (a fast shutdown, as a
restart or a failover does) while users submit jobs, and comes back: the service retries,
recovers, loses no job it acknowledged, and its log says so. Then the service itself restarts
on the same database and finds every job again.

The jobs wait behind a quota of 0 GPUs, so that only the service and its database work: the
store's side of running jobs on PostgreSQL is tested in tests/jobs (`database_url`)."""

from __future__ import annotations

import http.client
import json
import secrets
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from edtservice import ServiceProcess, call, token_file_service
from jobprograms import DEADLINE_S, program
from pgserver import ENABLED_ENV, PostgresServer, enabled
from waiting import eventually_sync

from jupyter_edt.jobs.store import JobStore

TOKENS = {name: secrets.token_hex(16) for name in ("alice", "root")}
BOB = secrets.token_hex(16)
JOB = {"code": "pass", "max_gpus": 1, "name": "waits"}
#: How long a submission may wait for its answer: across the outage.
ANSWER_S = 60.0


@pytest.fixture(scope="module")
def database() -> Iterator[PostgresServer]:
    """A PostgreSQL of this module's own: its test stops it."""
    if not enabled():
        pytest.skip(f"{ENABLED_ENV}=0: no PostgreSQL runs")
    server = PostgresServer()
    server.start()
    yield server
    server.remove()


@pytest.fixture(scope="module")
def service(tmp_path_factory, database) -> Iterator[ServiceProcess]:
    process = token_file_service(
        tmp_path_factory.mktemp("serve-postgresql"),
        {
            "alice": {"tokens": [TOKENS["alice"]]},
            "root": {"tokens": [TOKENS["root"]], "admin": True},
        },
        {
            "database_url": database.database(),
            "virtual_gpus": 2,
            "user_quotas": {"alice": 0},  # her jobs wait: nothing runs
            "refresh_interval": 0.2,  # the scheduling loop reads the store five times a second
            "warm_workers": False,
        },
    )
    yield process
    process.stop()


class Submitters:
    """Threads that submit alice's jobs one after another until stopped, noting each answer
    with the phase of the test it was sent in."""

    def __init__(self, service: ServiceProcess, threads: int = 2) -> None:
        self.service = service
        self.phase = "before"
        self.answers: list[tuple[str, int, dict]] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._submit) for _ in range(threads)]

    def __enter__(self) -> Submitters:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(ANSWER_S)
        assert not any(t.is_alive() for t in self._threads), "a submission never returned"

    def _submit(self) -> None:
        while not self._stop.is_set():
            phase = self.phase
            try:
                status, body, _ = call(
                    self.service.url, "POST", "edt/api/v1/jobs", TOKENS["alice"], JOB
                )
            except OSError as err:  # no answer at all: the test shows it with the others
                status, body = 0, {"error": repr(err)}
            self.answers.append((phase, status, body if isinstance(body, dict) else {"raw": body}))

    def acknowledged(self, phase: str) -> int:
        return sum(1 for sent, status, _ in self.answers if sent == phase and status == 201)


def send_submission(service: ServiceProcess) -> http.client.HTTPConnection:
    """Send a submission and return without its answer (read it with `answer`): the request
    is in the service's socket whatever the service is doing."""
    connection = http.client.HTTPConnection("127.0.0.1", service.port, timeout=ANSWER_S)
    headers = {"Authorization": f"token {TOKENS['alice']}", "Content-Type": "application/json"}
    connection.request("POST", "/edt/api/v1/jobs", json.dumps(JOB), headers)
    return connection


def answer(connection: http.client.HTTPConnection) -> tuple[int, dict]:
    try:
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def test_a_database_gone_for_a_moment_costs_no_job_and_the_log_says_so(service, database):
    log_before = service.log_path.read_text()
    with Submitters(service) as submitters:
        eventually_sync(
            lambda: submitters.acknowledged("before") >= 5, "5 jobs acknowledged", timeout=60
        )
        submitters.phase = "during"
        database.stop()  # fast: every session ends now, and no new one is let in
        eventually_sync(
            lambda: "lost the job database" in new_log(service, log_before),
            "the service saying it lost its database",
            timeout=30,
        )
        during = [send_submission(service) for _ in range(3)]
        assert "answers again" not in new_log(service, log_before)  # still retrying
        database.start()
        answered = [answer(connection) for connection in during]
        submitters.phase = "after"
        eventually_sync(
            lambda: submitters.acknowledged("after") >= 5, "5 jobs acknowledged after", timeout=60
        )

    # every submission was acknowledged, the ones sent while the database was gone too
    assert [status for status, _ in answered] == [201] * 3
    assert {status for _, status, _ in submitters.answers} == {201}, submitters.answers
    acknowledged = [body["id"] for _, _, body in submitters.answers] + [
        b["id"] for _, b in answered
    ]
    # and each is there, once: in the API and in the database
    status, listed, _ = call(service.url, "GET", "edt/api/v1/jobs", TOKENS["root"])
    assert status == 200
    assert sorted(j["id"] for j in listed["jobs"]) == sorted(acknowledged)
    store = JobStore(service.settings["database_url"])
    stored = store.list_jobs(user="alice")
    store.close()
    assert sorted(j.id for j in stored) == sorted(acknowledged)
    assert {j.reason for j in stored} == {
        "quota: alice holds 0 of their 0 GPU(s), and this job needs 1"
    }

    said = new_log(service, log_before)
    shown = service.settings["database_url"]  # no password to hide
    lost = said.index(f"lost the job database {shown}")
    assert "retrying for up to 30 s" in said[lost:].splitlines()[0]
    assert said.index(f"the job database {shown} answers again", lost) > lost
    assert "gave up" not in said


def test_a_restarted_service_finds_every_job_in_the_database(service):
    status, before, _ = call(service.url, "GET", "edt/api/v1/jobs", TOKENS["root"])
    assert status == 200 and before["jobs"]  # the jobs the test above left
    service.stop()
    service.start()
    status, after, _ = call(service.url, "GET", "edt/api/v1/jobs", TOKENS["root"])
    assert status == 200
    assert [(j["id"], j["state"]) for j in after["jobs"]] == [
        (j["id"], j["state"]) for j in before["jobs"]
    ]


def new_log(service: ServiceProcess, before: str) -> str:
    """What the service logged since `before` was read."""
    return service.log_path.read_text(errors="replace")[len(before) :]


@pytest.fixture(scope="module")
def impatient(tmp_path_factory, database) -> Iterator[ServiceProcess]:
    """A service that gives up on its database after 1 s (`database_patience`), on a database
    of its own; bob has no quota, so his jobs run."""
    process = token_file_service(
        tmp_path_factory.mktemp("serve-postgresql-impatient"),
        {"alice": {"tokens": [TOKENS["alice"]]}, "bob": {"tokens": [BOB]}},
        {
            "database_url": database.database(),
            "database_patience": 1.0,
            "virtual_gpus": 2,
            "user_quotas": {"alice": 0},
            "refresh_interval": 0.2,
        },
    )
    yield process
    process.stop()


def test_a_database_gone_past_the_patience_is_503_and_the_service_carries_on(impatient, database):
    """Past `database_patience`, a call answers 503 saying why, with a Retry-After, and the
    scheduling loop logs a line per attempt, not a traceback; once the database is back, the
    same service answers and takes jobs again."""
    status, first, _ = call(impatient.url, "POST", "edt/api/v1/jobs", TOKENS["alice"], JOB)
    assert status == 201
    log_before = impatient.log_path.read_text()
    database.stop()
    try:
        status, body, headers = call(impatient.url, "GET", "edt/api/v1/jobs", TOKENS["alice"])
        assert status == 503, body
        assert body["message"].startswith(f"The job database {database.url('')}")
        assert "cannot be reached" in body["message"] and "try again" in body["message"]
        assert headers["Retry-After"] == "5"
        status, body, _ = call(impatient.url, "POST", "edt/api/v1/jobs", TOKENS["alice"], JOB)
        assert status == 503 and "cannot be reached" in body["message"]
        eventually_sync(
            lambda: "rescheduling waits for the job database" in new_log(impatient, log_before),
            "the scheduling loop saying it waits",
            timeout=30,
        )
    finally:
        database.start()
    eventually_sync(lambda: answers(impatient, TOKENS["alice"]), "answering again", timeout=60)
    status, second, _ = call(impatient.url, "POST", "edt/api/v1/jobs", TOKENS["alice"], JOB)
    assert status == 201
    status, listed, _ = call(impatient.url, "GET", "edt/api/v1/jobs", TOKENS["alice"])
    assert {j["id"] for j in listed["jobs"]} >= {first["id"], second["id"]}
    said = new_log(impatient, log_before)
    assert "Traceback" not in said, said[-3000:]


def test_a_job_that_trains_and_ends_while_the_database_is_gone_keeps_every_step(
    impatient, database, tmp_path
):
    """The job's steps are kept in memory while the store cannot take them, and its end is
    recorded once it can, however long past the patience that is."""
    go = tmp_path / "go"
    job = {"code": program(2, hold=go), "max_gpus": 1, "name": "trains-through"}
    status, submitted, _ = call(impatient.url, "POST", "edt/api/v1/jobs", BOB, job)
    assert status == 201, submitted
    job_id = submitted["id"]
    eventually_sync(
        lambda: state(impatient, job_id) == "RUNNING", "the job running", timeout=DEADLINE_S
    )
    log_before = impatient.log_path.read_text()
    job_dir = Path(impatient.settings["jobs_dir"]) / job_id
    database.stop()
    try:
        eventually_sync(
            lambda: "gave up on the job database" in new_log(impatient, log_before),
            "the service giving up on its database",
            timeout=30,
        )
        go.touch()  # it trains its 12 steps and ends, all while the database is gone
        eventually_sync(
            lambda: f"job {job_id} waits for the job database" in new_log(impatient, log_before),
            "the job's end waiting for the database",
            timeout=DEADLINE_S,
        )
        assert (json.loads((job_dir / "status.json").read_text()) or {}).get("state") == "exited"
    finally:
        database.start()
    eventually_sync(
        lambda: state(impatient, job_id) == "SUCCEEDED", "the job's end recorded", timeout=60
    )
    status, body, _ = call(impatient.url, "GET", f"edt/api/v1/jobs/{job_id}/metrics", BOB)
    assert status == 200
    steps = sorted(r["global_step"] for r in body["metrics"] if r.get("type") == "step")
    assert steps == list(range(12))  # 2 epochs of 48 samples, 8 a step: none lost


def answers(service: ServiceProcess, token: str) -> bool:
    return call(service.url, "GET", "edt/api/v1/jobs", token)[0] == 200


def state(service: ServiceProcess, job_id: str) -> str | None:
    status, body, _ = call(service.url, "GET", f"edt/api/v1/jobs/{job_id}", BOB)
    return body.get("state") if status == 200 else None
