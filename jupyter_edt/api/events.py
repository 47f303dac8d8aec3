"""WebSocket /edt/api/v1/events?after=<cursor>: the user's job, allocation and metric events.

Each message is one JSON event carrying its `id`; a client that reconnects passes the last id
it saw as `after` and receives everything since, then live events. With `batch=1`, each message
is instead a JSON array of the events ready at once (up to `BATCH_EVENTS`): a busy feed then
costs one frame per subscriber per burst instead of one per event, which is what lets one
service feed many browsers (bench/events.py). Keepalives stay single objects.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

from tornado import websocket

from ..jobs.service import JobService
from ..jobs.users import Identity
from .base import APIError, write_api_error

if TYPE_CHECKING:
    from ..host import JobHost

# Sent at least this often, so proxies keep the connection and clients notice a dead server.
KEEPALIVE_S = 20.0
# The most events one batched message carries (a replay of a long history comes in several).
BATCH_EVENTS = 250


class EventsHandler(websocket.WebSocketHandler):
    """The feed over a WebSocket. As with `EDTHandler`, a front says who is calling."""

    identity: Identity

    if TYPE_CHECKING:  # a front's, as for EDTHandler

        async def identify(self) -> Identity: ...

    async def get(self, *args: Any, **kwargs: Any) -> None:
        self.identity = await self.identify()  # before the upgrade: 401/403 stay HTTP answers
        self.service.users.note(self.identity)
        try:
            self.cursor = int(self.get_argument("after", "0"))
        except ValueError as err:
            raise APIError(400, "after must be an integer event id", "after") from err
        self.job_id = self.get_argument("job_id", None)  # one job's events only
        batch = self.get_argument("batch", "0")
        if batch not in ("0", "1"):
            raise APIError(400, f"batch must be 0 or 1, not {batch!r}", "batch")
        self.batch = batch == "1"
        res = super().get(*args, **kwargs)
        if res is not None:
            await res

    @property
    def host(self) -> JobHost:
        return self.settings["edt"]

    @property
    def service(self) -> JobService:
        return self.host.job_service

    def open(self, *args: Any, **kwargs: Any) -> None:
        self.host.telemetry.subscribers.inc()
        self._pump = asyncio.ensure_future(self._send_events())

    async def _send_events(self) -> None:
        user = self.identity.name
        while True:
            changed = self.service.changed()
            limit = BATCH_EVENTS if self.batch else 1000
            batch = self.service.events(user, after=self.cursor, job_id=self.job_id, limit=limit)
            try:
                if batch and self.batch:
                    await self.write_message("[" + ",".join(item.text for item in batch) + "]")
                    self.cursor = batch[-1].id
                elif batch:
                    for item in batch[:-1]:
                        self.write_message(item.text)
                    await self.write_message(batch[-1].text)  # one flush for the batch
                    self.cursor = batch[-1].id
                if batch:
                    self.host.telemetry.delivered(batch)
                else:
                    try:
                        await asyncio.wait_for(changed.wait(), KEEPALIVE_S)
                    except asyncio.TimeoutError:
                        await self.write_message(json.dumps({"kind": "keepalive"}))
            except websocket.WebSocketClosedError:
                return

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        if not write_api_error(self, **kwargs):  # a refusal before the upgrade, as JSON
            super().write_error(status_code, **kwargs)

    def on_message(self, message: str | bytes) -> None:
        pass  # the feed is one-way; the cursor travels in the URL

    def on_close(self) -> None:
        pump: asyncio.Future[None] | None = getattr(self, "_pump", None)
        if pump is not None:  # it was open (a client may leave before the upgrade)
            self.host.telemetry.subscribers.dec()
            pump.cancel()
