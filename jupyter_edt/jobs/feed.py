"""The live change feed: recent events kept in memory, so that many subscribers (WebSockets)
read them without each querying the database, and one wake-up per burst of changes.

The store stays the source of truth: a subscriber whose cursor is older than what memory holds
reads from the store, so resuming after a reconnect loses nothing.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any

from .store import JobStore

# Changes within this many seconds wake subscribers once.
COALESCE_S = 0.02


class EventFeed:
    def __init__(self, store: JobStore, *, keep: int = 20_000) -> None:
        self.store = store
        self._recent: deque[dict[str, Any]] = deque(maxlen=keep)
        self._last_id = store.last_event_id()  # memory holds what is published from now on
        self._changed = asyncio.Event()
        self._pending: asyncio.Handle | None = None

    def changed(self) -> asyncio.Event:
        """Set at the next publication. Take it before reading, then wait on it, so a change
        between the read and the wait is never missed."""
        return self._changed

    def notify(self) -> None:
        """Something was recorded: publish it soon, once for the whole burst."""
        if self._pending is None:
            loop = asyncio.get_running_loop()
            self._pending = loop.call_later(COALESCE_S, self._publish)

    def _publish(self) -> None:
        self._pending = None
        while batch := self.store.events(after=self._last_id, limit=5000):
            self._recent.extend(batch)
            self._last_id = batch[-1]["id"]
        self._changed.set()
        self._changed = asyncio.Event()

    def read(
        self,
        *,
        after: int,
        visible: Callable[[dict[str, Any]], bool],
        owner: str | None,
        limit: int,
    ) -> list[dict[str, Any]]:
        """Events after the cursor that `visible` lets through; from memory when it holds
        everything after the cursor, else from the store (`owner` narrows that query)."""
        if after >= self._last_id:
            return []  # nothing newer has been published
        if self._recent and self._recent[0]["id"] <= after + 1:
            out = []
            for event in self._recent:
                if event["id"] > after and visible(event):
                    out.append(event)
                    if len(out) == limit:
                        break
            return out
        return self.store.events(after=after, user=owner, limit=limit)
