"""The live change feed: recent events kept in memory, serialised once, so that many
subscribers (WebSockets) read them without querying the database or encoding JSON each, and
are woken once per burst of changes.

The store stays the source of truth: a subscriber whose cursor is older than what memory holds
reads from the store, so resuming after a reconnect loses nothing.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from .reconnect import DatabaseUnreachable
from .store import JobStore

# Changes within this many seconds wake subscribers once.
COALESCE_S = 0.02
# How soon a publication the job database missed is tried again.
RETRY_S = 1.0

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Published:
    id: int
    user: str  # the job's owner: who may see the event
    event: dict[str, Any]
    text: str  # the event as JSON, encoded once for every subscriber
    #: When the feed published it (`time.monotonic()`); None for one read back from the store.
    at: float | None = None


class EventFeed:
    def __init__(self, store: JobStore, *, keep: int = 20_000) -> None:
        self.store = store
        self.keep = keep
        self._recent: list[Published] = []
        self._last_id = store.last_event_id()  # memory holds what is published from now on
        self._changed = asyncio.Event()
        self._pending: asyncio.Handle | None = None
        self._readers: list[Callable[[Sequence[Published]], None]] = []
        store.on_change(self.notify)  # every committed change is published

    def on_publish(self, reader: Callable[[Sequence[Published]], None]) -> None:
        """Hand `reader` every event as it is published, oldest first, in the batch it came
        in: what counts events (the Prometheus metrics) reads them once, with nobody's
        cursor and no query of its own."""
        self._readers.append(reader)

    def changed(self) -> asyncio.Event:
        """Set at the next publication. Take it before reading, then wait on it, so a change
        between the read and the wait is never missed."""
        return self._changed

    def notify(self) -> None:
        """Something was recorded: publish it soon, once for the whole burst."""
        if self._pending is None:
            loop = asyncio.get_running_loop()
            self._pending = loop.call_later(COALESCE_S, self._publish)

    def flush(self) -> None:
        """Publish what is pending now (before its records are deleted, say)."""
        if self._pending is not None:
            self._pending.cancel()
            self._publish()

    def _publish(self) -> None:
        self._pending = None
        try:
            self._read_new()
        except DatabaseUnreachable as err:  # read again soon: nothing recorded is skipped
            log.warning("jupyter-edt: the event feed waits for the job database: %s", err)
            self._pending = asyncio.get_running_loop().call_later(RETRY_S, self._publish)

    def _read_new(self) -> None:
        while batch := self.store.events(after=self._last_id, limit=5000):
            now = time.monotonic()
            published = [_published(e, now) for e in batch]
            self._recent.extend(published)
            self._last_id = batch[-1]["id"]
            for reader in self._readers:
                try:
                    reader(published)
                except Exception:  # a reader's fault must not stop the feed
                    log.exception("A reader of the event feed failed")
        if len(self._recent) > 2 * self.keep:
            del self._recent[: len(self._recent) - self.keep]
        self._changed.set()
        self._changed = asyncio.Event()

    def forget(self, job_id: str) -> None:
        """Drop a deleted job's events from memory, as the store drops them from its reads: a
        subscriber that connects later must not be told of a job that no read finds."""
        self._recent = [item for item in self._recent if item.event["job_id"] != job_id]

    def read(
        self, *, after: int, owner: str | None, limit: int, job_id: str | None = None
    ) -> list[Published]:
        """Events after the cursor, of `owner`'s jobs (None: everyone's), or of one job; from
        memory when it holds everything after the cursor, else from the store."""
        if after >= self._last_id:
            return []  # nothing newer has been published
        recent = self._recent
        if recent and recent[0].id <= after + 1:
            start = bisect.bisect_right(recent, after, key=attrgetter("id"))
            out = []
            for item in recent[start:]:
                if (owner is None or item.user == owner) and (
                    job_id is None or item.event["job_id"] == job_id
                ):
                    out.append(item)
                    if len(out) == limit:
                        break
            return out
        stored = self.store.events(after=after, user=owner, job_id=job_id, limit=limit)
        return [_published(e) for e in stored]


def _published(event: dict[str, Any], at: float | None = None) -> Published:
    return Published(event["id"], event["user"], event, json.dumps(event), at)
