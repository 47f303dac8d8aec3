"""A bounded retry of the store's transactions over a lost database connection: a PostgreSQL
server that restarts or fails over costs the service a pause of its event loop, not a
submitted job nor a job's record.

Only a lost or refused connection is retried, the whole transaction again: it was rolled back
with its connection (a commit cut off mid-way may have taken, which is why `JobStore` draws a
new job's id before the first attempt). A failed statement is raised at once. A database still
unreachable when the patience is spent raises `DatabaseUnreachable`, which the API answers as
503: the service is there, its database is not, and the call may be made again.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Concatenate, ParamSpec, Protocol, TypeVar

from sqlalchemy.exc import DBAPIError, OperationalError

from .database import said

P = ParamSpec("P")
R = TypeVar("R")

#: SQLSTATEs of a connection that went or cannot be made yet: class 08 (connection
#: exception), and a server that shuts down, crashed, or is still starting.
LOST_STATES = ("08", "57P01", "57P02", "57P03")
_NO_STATE = object()


#: What a 503 for an unreachable database tells a client (HTTP's Retry-After), in seconds.
RETRY_AFTER_S = 5


class DatabaseUnreachable(Exception):
    """The job database could not be reached within the patience; `__cause__` is the last
    driver error."""

    def __init__(self, database: str, waited_s: float, why: str) -> None:
        super().__init__(
            f"The job database {database} cannot be reached (tried for {waited_s:.1f} s: "
            f"{why}); try again shortly."
        )


def lost_connection(err: DBAPIError) -> bool:
    """Whether `err` says the connection was lost or could not be made (the transaction may
    succeed on a new one), not that a statement failed."""
    if err.connection_invalidated:
        return True
    if not isinstance(err, OperationalError):
        return False
    state = getattr(err.orig, "sqlstate", _NO_STATE)
    if state is _NO_STATE:
        return False  # a driver without SQLSTATEs (sqlite3): its errors are its file's
    # psycopg gives none for what happened on the client's side: refused, closed, timed out
    return state is None or str(state).startswith(LOST_STATES)


class Reconnect:
    """Runs transactions again while their database cannot be reached, for up to
    `patience_s` seconds from the first failure, and says so in `log`: a warning naming the
    database at the first failure, another when it answers again, an error when it gives up
    (then the last error is raised)."""

    def __init__(
        self,
        database: str,
        log: logging.Logger,
        *,
        patience_s: float = 30.0,
        first_delay_s: float = 0.05,
        max_delay_s: float = 1.0,
    ) -> None:
        if patience_s < 0:
            raise ValueError(f"patience_s must be 0 or more, got {patience_s}.")
        self.database = database
        self.log = log
        self.patience_s = patience_s
        self.first_delay_s = first_delay_s
        self.max_delay_s = max_delay_s
        self._running = threading.local()  # a retried call within one: the outer one retries

    def call(self, attempt: Callable[[], R]) -> R:
        """`attempt()`, again after each lost connection, within the patience."""
        if getattr(self._running, "depth", 0):
            return attempt()
        self._running.depth = 1
        try:
            return self._retry(attempt)
        finally:
            self._running.depth = 0

    def _retry(self, attempt: Callable[[], R]) -> R:
        since: float | None = None
        delay, tries = self.first_delay_s, 0
        while True:
            try:
                result = attempt()
            except DBAPIError as err:
                if not lost_connection(err):
                    raise
                now = time.monotonic()
                why = said(err)
                if since is None:
                    since = now
                    self.log.warning(
                        "jupyter-edt: lost the job database %s (%s); retrying for up to %g s",
                        self.database,
                        why,
                        self.patience_s,
                    )
                elif now - since >= self.patience_s:
                    self.log.error(
                        "jupyter-edt: gave up on the job database %s after %.1f s and %d "
                        "retries (%s)",
                        self.database,
                        now - since,
                        tries,
                        why,
                    )
                    raise DatabaseUnreachable(self.database, now - since, why) from err
                tries += 1
                time.sleep(min(delay, max(0.0, since + self.patience_s - now)))
                delay = min(delay * 2, self.max_delay_s)
                continue
            if since is not None:  # a warning too: it closes the warning above, at any log level
                self.log.warning(
                    "jupyter-edt: the job database %s answers again after %.1f s and %d "
                    "retries; the interrupted transaction went through",
                    self.database,
                    time.monotonic() - since,
                    tries,
                )
            return result


class Retrying(Protocol):
    reconnect: Reconnect


S = TypeVar("S", bound=Retrying)


def retried(method: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], R]:
    """The method (one transaction of an object with a `reconnect`) run by its `Reconnect`."""

    @functools.wraps(method)
    def run(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.reconnect.call(lambda: method(self, *args, **kwargs))

    run.retried = True  # type: ignore[attr-defined]
    return run
