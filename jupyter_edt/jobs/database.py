"""Opening the job database: what differs between SQLite and PostgreSQL stays here, so the
store's queries are the same on both.

- Writers take the database's write lock when their transaction begins (SQLite's `BEGIN
  IMMEDIATE`, a PostgreSQL advisory lock): event ids then commit in the order they were
  drawn, so a client resuming from the last id it saw never skips one that another writer
  committed late, and a read-then-write (a state change checked against the lifecycle) is
  never interleaved with another.
- What one database refuses is stored alike on every one: a non-finite float (a loss that
  overflowed) as null in JSON, as the runtime writes it (runtime/events.py), and a NUL
  character as U+FFFD, in JSON (PostgreSQL cannot read a field of a `json` value that holds
  one, so one job's name would break the queries of all) and in free text.
- PostgreSQL's pooled connections are pinged before use: one that a restarted server dropped
  is replaced rather than failing the next transaction.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from sqlalchemy import String, create_engine, event
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import DBAPIError, NoSuchModuleError
from sqlalchemy.types import TypeDecorator


class StoreError(RuntimeError):
    """The database cannot be used as it is; the message says what to do."""


#: An execution option: the engine's transactions write, so they take the write lock first.
WRITES = "edt_writes"
#: The PostgreSQL advisory lock every writer of the store holds until it commits (a constant
#: of its own, b"jupyedt" as a number, so it meets no other application's lock).
WRITE_LOCK = int.from_bytes(b"jupyedt", "big")
#: Seconds a new PostgreSQL connection may take (the URL's `?connect_timeout=` overrides it).
CONNECT_TIMEOUT_S = 10


def shown(url: str) -> str:
    """The URL as logs and errors may show it: without its password."""
    return make_url(url).render_as_string(hide_password=True)


def said(err: DBAPIError) -> str:
    """What the database (or its driver) said, on one line: the first of its message."""
    text = str(err.orig).strip() or type(err.orig).__name__
    return text.splitlines()[0]


def writer(engine: Engine) -> Engine:
    """The same engine (and pool) whose transactions take the write lock first."""
    return engine.execution_options(**{WRITES: True})


def open_engine(url: str) -> Engine:
    """The engine of the job database at `url`, with its backend's settings (see the module).
    StoreError for an SQLite path that holds something else, or a driver not installed."""
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        _check_sqlite_file(parsed.database)
    options: dict[str, Any] = {"json_serializer": strict_json}
    if backend != "sqlite":
        options["pool_pre_ping"] = True
    if backend == "postgresql" and "connect_timeout" not in parsed.query:
        # an unreachable host fails in seconds, within the retries' patience (reconnect.py),
        # not after the system's TCP timeout of minutes
        options["connect_args"] = {"connect_timeout": CONNECT_TIMEOUT_S}
    try:
        engine = create_engine(url, **options)
    except (ImportError, NoSuchModuleError) as err:
        raise StoreError(
            f"The job database {shown(url)} needs a driver that is not installed ({err}). "
            "For PostgreSQL, install psycopg (pip install 'jupyter-edt[postgresql]') and give "
            "a postgresql+psycopg://user@host/database URL."
        ) from err
    if backend == "sqlite":
        _sqlite_settings(engine)
    elif backend == "postgresql":
        _postgresql_settings(engine)
    return engine


def strict_json(value: Any) -> str:
    """JSON every database and reader takes: non-finite floats (NaN, inf) become null, NUL
    characters U+FFFD."""
    try:
        text = json.dumps(value, allow_nan=False)
    except ValueError:
        return json.dumps(_storable(value))
    return json.dumps(_storable(value)) if "\\u0000" in text else text


def _storable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, str):
        return _no_nul(value)
    if isinstance(value, dict):
        return {_storable(k): _storable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_storable(v) for v in value]
    return value


def _no_nul(text: str) -> str:
    return text.replace("\x00", "\ufffd")


class FreeText(TypeDecorator[str]):
    """Free text (a job's name, a reason quoting a log): PostgreSQL refuses a NUL character
    in text, so it is stored as U+FFFD on every backend alike."""

    impl = String
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Any) -> str | None:
        return _no_nul(value) if value is not None else None


def _check_sqlite_file(database: str | None) -> None:
    if database in (None, "", ":memory:"):
        return
    path = Path(database)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and path.stat().st_size > 0:
        with path.open("rb") as f:
            if f.read(16) != b"SQLite format 3\x00":
                raise StoreError(
                    f"The job database {path} is not an SQLite database. It is left "
                    "untouched: move it aside to start with an empty one, or restore a backup."
                )


def _sqlite_settings(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA journal_mode=WAL")
        # With WAL, NORMAL cannot corrupt the database; only a power loss may undo the
        # last commits (metrics of a fraction of a second). FULL would fsync every commit,
        # on the event loop, several times a second.
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()
        # The transactions begin below, not where Python's sqlite3 would (before the first
        # write, too late to wait for the lock: a second writer then fails with "database is
        # locked" at once instead of waiting its turn).
        dbapi_connection.isolation_level = None

    @event.listens_for(engine, "begin")
    def _begin(connection: Connection) -> None:
        writes = connection.get_execution_options().get(WRITES, False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if writes else "BEGIN")


def _postgresql_settings(engine: Engine) -> None:
    @event.listens_for(engine, "begin")
    def _begin(connection: Connection) -> None:
        if connection.get_execution_options().get(WRITES, False):
            connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({WRITE_LOCK})")
