"""WebSocket /edt/api/v1/events?after=<cursor>: the user's job, allocation and metric events.

Each message is one JSON event carrying its `id`; a client that reconnects passes the last id
it saw as `after` and receives everything since, then live events.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from jupyter_core.utils import ensure_async
from jupyter_server.auth.decorator import ws_authenticated
from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin
from tornado import web, websocket

from ..jobs.service import JobService

# Sent at least this often, so proxies keep the connection and clients notice a dead server.
KEEPALIVE_S = 20.0


class EventsHandler(ExtensionHandlerMixin, JupyterHandler, websocket.WebSocketHandler):
    auth_resource = "edt"

    @ws_authenticated
    async def get(self, *args: Any, **kwargs: Any) -> None:
        if not await ensure_async(
            self.authorizer.is_authorized(self, self.current_user, "read", "edt")
        ):
            raise web.HTTPError(403)
        try:
            self.cursor = int(self.get_argument("after", "0"))
        except ValueError as err:
            raise web.HTTPError(400, "after must be an integer event id") from err
        self.job_id = self.get_argument("job_id", None)  # one job's events only
        res = super().get(*args, **kwargs)
        if res is not None:
            await res

    @property
    def service(self) -> JobService:
        return self.extensionapp.job_service

    def open(self, *args: Any, **kwargs: Any) -> None:
        self._pump = asyncio.ensure_future(self._send_events())

    async def _send_events(self) -> None:
        user = self.extensionapp.user_name(self.current_user)
        while True:
            changed = self.service.changed()
            batch = self.service.events(user, after=self.cursor, job_id=self.job_id)
            try:
                if batch:
                    for item in batch[:-1]:
                        self.write_message(item.text)
                    await self.write_message(batch[-1].text)  # one flush for the batch
                    self.cursor = batch[-1].id
                else:
                    try:
                        await asyncio.wait_for(changed.wait(), KEEPALIVE_S)
                    except asyncio.TimeoutError:
                        await self.write_message(json.dumps({"kind": "keepalive"}))
            except websocket.WebSocketClosedError:
                return

    def on_message(self, message: str | bytes) -> None:
        pass  # the feed is one-way; the cursor travels in the URL

    def on_close(self) -> None:
        self._pump.cancel()
