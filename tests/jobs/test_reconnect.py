"""The retry over a lost database connection (jobs/reconnect.py), with the errors a driver
raises made by hand: which errors are retried, how long, and what the log says."""

from __future__ import annotations

import logging
import sqlite3

import pytest
from sqlalchemy.exc import IntegrityError, OperationalError

from jupyter_edt.host import JobHost
from jupyter_edt.jobs.reconnect import DatabaseUnreachable, Reconnect, lost_connection
from jupyter_edt.jobs.store import JobStore

LOG = logging.getLogger("test_reconnect")


class DriverError(Exception):
    """What psycopg raises: an SQLSTATE, None when the client itself saw the failure."""

    def __init__(self, message: str, sqlstate: str | None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


def operational(sqlstate: str | None, message: str = "connection refused") -> OperationalError:
    return OperationalError("SELECT 1", {}, DriverError(message, sqlstate))


@pytest.mark.parametrize(
    ("error", "lost"),
    [
        (operational(None), True),  # refused, closed, timed out on the client's side
        (operational("08006"), True),  # connection failure
        (operational("57P01", "terminating connection"), True),  # administrator shutdown
        (operational("57P03", "the database system is starting up"), True),
        (operational("57014", "canceling statement"), False),  # a statement cancelled
        (IntegrityError("INSERT", {}, DriverError("duplicate key", "23505")), False),
        # SQLite's errors are its file's ("database is locked" waited its busy timeout)
        (OperationalError("BEGIN", {}, sqlite3.OperationalError("database is locked")), False),
        (OperationalError("SELECT 1", {}, Exception("gone"), connection_invalidated=True), True),
    ],
)
def test_only_a_lost_or_refused_connection_is_retried(error, lost):
    assert lost_connection(error) is lost


def failing(times: int, error: Exception, calls: list[int]):
    def attempt() -> str:
        calls.append(1)
        if len(calls) <= times:
            raise error
        return "done"

    return attempt


def test_a_transaction_runs_again_until_the_database_answers_and_the_log_says_so(caplog):
    reconnect = Reconnect("postgresql+psycopg://edt@db/edt", LOG, first_delay_s=0.001)
    calls: list[int] = []
    assert reconnect.call(failing(3, operational(None), calls)) == "done"
    assert len(calls) == 4
    (lost, back) = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert lost == (
        "WARNING",
        "jupyter-edt: lost the job database postgresql+psycopg://edt@db/edt (connection "
        "refused); retrying for up to 30 s",
    )
    assert back[0] == "WARNING" and "answers again after" in back[1] and "3 retries" in back[1]


def test_it_gives_up_after_its_patience_with_the_last_error(caplog):
    reconnect = Reconnect("db", LOG, patience_s=0.05, first_delay_s=0.01)
    error = operational("57P03", "the database system is shutting down")
    with pytest.raises(
        DatabaseUnreachable, match=r"^The job database db cannot be reached "
    ) as raised:
        reconnect.call(failing(10**6, error, []))
    assert raised.value.__cause__ is error
    assert "the database system is shutting down" in str(raised.value)
    assert caplog.records[-1].levelname == "ERROR"
    assert "gave up on the job database db after" in caplog.records[-1].getMessage()


def test_any_other_error_is_raised_at_once_and_nothing_is_logged(caplog):
    reconnect = Reconnect("db", LOG, first_delay_s=0.001)
    calls: list[int] = []
    error = IntegrityError("INSERT", {}, DriverError("duplicate key", "23505"))
    with pytest.raises(IntegrityError):
        reconnect.call(failing(1, error, calls))
    assert len(calls) == 1 and caplog.records == []


def test_a_retried_call_within_another_is_retried_by_the_outer_one_only():
    reconnect = Reconnect("db", LOG, first_delay_s=0.001)
    inner: list[int] = []
    outer: list[int] = []

    def transaction() -> str:
        outer.append(1)
        return reconnect.call(failing(1 if len(outer) == 1 else 0, operational(None), inner))

    assert reconnect.call(transaction) == "done"
    assert (len(outer), len(inner)) == (2, 2)  # the inner failure ran the outer one again


#: Public methods of the store that are no transaction of their own, and why.
NOT_RETRIED = {
    "on_change": "no database",
    "close": "no transaction",
    "create_job": "draws the job's id, then records it in `_add_job`, which is retried",
    "add_metrics": "`add_metrics_many`, which is retried",
}


def test_every_transaction_of_the_store_is_retried():
    """A query added to the store without `@retried` would fail at a database's restart."""
    methods = {n: f for n, f in vars(JobStore).items() if callable(f) and not n.startswith("_")}
    unretried = {n for n, f in methods.items() if not getattr(f, "retried", False)}
    assert unretried == set(NOT_RETRIED)
    assert vars(JobStore)["_add_job"].retried


def test_a_negative_patience_names_the_setting() -> None:
    with pytest.raises(ValueError, match=r"JobHost.database_patience must be 0 or more seconds"):
        JobHost(database_patience=-1)
    assert JobHost(database_patience=0).database_patience == 0
