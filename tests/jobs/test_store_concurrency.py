"""The job store under what a shared service meets: writers at once on one database (SQLite
and PostgreSQL), and, on PostgreSQL, connections lost mid-transaction and a server that does
not answer. The outage of a running service is tested in tests/serve/test_serve_postgresql."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psycopg
import pytest
from edtservice import free_port
from sqlalchemy import event

from jupyter_edt.jobs.models import JobSpec, JobState
from jupyter_edt.jobs.store import JobStore, StoreError

WRITERS, JOBS = 4, 8
SPEC = JobSpec(code="pass", max_gpus=1)
#: The store's own logger, where it tells of a lost database when given no other.
STORE_LOG = "jupyter_edt.jobs.store"


def run_threads(targets: list[Callable[[], None]], timeout: float = 120) -> list[BaseException]:
    """Run each target in a thread of its own; the errors they raised."""
    errors: list[BaseException] = []

    def guarded(target: Callable[[], None]) -> None:
        try:
            target()
        except BaseException as err:  # reported by the test, not lost in a thread
            errors.append(err)

    threads = [threading.Thread(target=guarded, args=(t,)) for t in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
        assert not thread.is_alive(), f"a thread still runs after {timeout} s"
    return errors


def test_writers_at_once_lose_nothing_and_the_feed_skips_no_event(database_url):
    """Four stores (as four processes would have) take jobs through their lifecycle at once,
    and note the same new users (an insert-or-update each), while a fifth follows the event
    feed from its cursor as a client does. PostgreSQL draws event ids from a sequence and
    would commit them out of order, so that a follower skips one for ever, but for the store's
    write lock; SQLite's writers would fail with "database is locked" but for theirs."""
    stores = [JobStore(database_url) for _ in range(WRITERS + 1)]
    start = threading.Barrier(WRITERS + 1, timeout=60)
    written = threading.Event()
    seen: list[int] = []

    def write(store: JobStore, n: int) -> Callable[[], None]:
        def run() -> None:
            start.wait()
            for i in range(JOBS):
                store.note_user(f"user{i}", ["team"], False)
                job = store.create_job(f"writer{n}", SPEC)
                store.set_state(job.id, JobState.STARTING, "given 1 GPU(s)")
                store.set_devices(job.id, [f"gpu{n}"], "admitted")
                store.set_state(job.id, JobState.RUNNING, "processes started")
                store.add_metrics(job.id, [{"type": "step", "global_step": 0}])
                store.set_state(job.id, JobState.SUCCEEDED, "finished")

        return run

    def follow() -> None:
        start.wait()
        cursor = 0
        while True:
            last_round = written.is_set()  # then one more read takes what came before it
            batch = stores[-1].events(after=cursor)
            seen.extend(e["id"] for e in batch)
            cursor = batch[-1]["id"] if batch else cursor
            if last_round and not batch:
                return
            written.wait(0.01)

    follower = threading.Thread(target=lambda: errors.extend(run_threads([follow])))
    errors: list[BaseException] = []
    follower.start()
    errors += run_threads([write(store, n) for n, store in enumerate(stores[:-1])])
    written.set()
    follower.join(60)
    assert not follower.is_alive()
    assert errors == []

    store = stores[-1]
    every = store.events(limit=100_000)
    assert seen == [e["id"] for e in every]  # each event once, in order, none skipped
    jobs = store.list_jobs()
    assert len(jobs) == WRITERS * JOBS and {j.state for j in jobs} == {JobState.SUCCEEDED}
    for job in jobs:
        kinds = [e["kind"] for e in store.events(job_id=job.id)]
        assert kinds == ["state", "state", "allocation", "state", "metrics", "allocation", "state"]
    assert store.users() == {f"user{i}": (["team"], False) for i in range(JOBS)}
    for s in stores:
        s.close()


@contextmanager
def cut_connection(store: JobStore, conninfo: str, before: str) -> Iterator[list[int]]:
    """End the server process of the store's connection (as a restarting server would) once,
    just before it runs a statement that starts with `before`. Yields the pids ended."""
    ended: list[int] = []

    def cut(conn, cursor, statement, parameters, context, executemany) -> None:
        if ended or not statement.startswith(before):
            return
        pid = conn.connection.dbapi_connection.info.backend_pid
        with psycopg.connect(conninfo, autocommit=True) as admin:
            # waits (up to 10 s) until that server process has exited
            gone = admin.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,)).fetchone()
        assert gone == (True,)
        ended.append(pid)

    event.listen(store.engine, "before_cursor_execute", cut)
    try:
        yield ended
    finally:
        event.remove(store.engine, "before_cursor_execute", cut)


def test_a_transaction_whose_connection_is_lost_runs_again_and_the_log_says_so(postgresql, caplog):
    """The transaction is rolled back with its connection, and run again whole on a new one:
    the job is recorded once, its state change once, and the log names the database (not its
    password) and the retry, then its return."""
    url = postgresql.database().replace("://edt@", "://edt:not-for-logs@")  # trust: ignored
    store = JobStore(url)
    admin = postgresql.conninfo("postgres")
    with cut_connection(store, admin, "INSERT INTO edt_events") as ended:
        job = store.create_job("ana", SPEC)  # its row was written, its event was not
    assert len(ended) == 1
    with cut_connection(store, admin, "UPDATE edt_jobs") as ended:
        store.set_state(job.id, JobState.STARTING, "given 1 GPU(s)")
    assert len(ended) == 1

    assert [j.id for j in store.list_jobs()] == [job.id]
    states = [e["state"] for e in store.events(job_id=job.id)]
    assert states == ["QUEUED", "STARTING"]
    said = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == STORE_LOG]
    shown = url.replace("not-for-logs", "***")
    assert [level for level, _ in said] == ["WARNING"] * 4
    lost, back = said[0][1], said[1][1]
    assert f"lost the job database {shown}" in lost and "retrying for up to 30 s" in lost
    assert f"the job database {shown} answers again" in back
    assert "not-for-logs" not in caplog.text
    store.close()


def test_a_database_that_does_not_answer_is_given_up_on_saying_why(caplog):
    url = f"postgresql+psycopg://edt:not-for-logs@127.0.0.1:{free_port()}/edt"
    with pytest.raises(StoreError, match=r"cannot be reached \(tried for 0\.\d s: .*refused"):
        JobStore(url, reconnect_s=0.3)
    assert "gave up on the job database postgresql+psycopg://edt:***@" in caplog.text
    assert "not-for-logs" not in caplog.text


def test_a_url_whose_driver_is_missing_says_what_to_install():
    with pytest.raises(StoreError, match=r"install psycopg .*postgresql\+psycopg://"):
        JobStore("postgresql+nosuchdriver://edt@127.0.0.1/edt")
