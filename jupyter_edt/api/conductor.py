"""/platform/rest/conductor/v1: WMLA's Conductor monitoring, as its client notebooks call it.

``GET instances/{sigId}/applications[?state=RUNNING]`` lists the caller's execs (an
administrator's: everyone's) with their GPUs and executors; ``.../applications/{driverId}/logs/
stdout|stderr/download`` gives the driver's output and ``.../{driverId}/{executorId}/logs/...``
one worker's. The sigId is this server's one instance group's (``compat.wmla``); another is a
404 naming both. The logic is in ``compat/conductor.py``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO

from ..compat.conductor import Conductor, UnknownExecutor, UnknownInstanceGroup
from .artifacts import send_file
from .base import APIError, EDTHandler, api_errors

CONDUCTOR_PREFIX = "/platform/rest/conductor/v1"


@contextmanager
def conductor_errors() -> Iterator[None]:
    with api_errors():
        try:
            yield
        except UnknownInstanceGroup as err:
            raise APIError(404, str(err), "sig_id") from err
        except UnknownExecutor as err:
            raise APIError(404, str(err), "executor_id") from err


class ConductorHandler(EDTHandler):
    @functools.cached_property
    def conductor(self) -> Conductor:
        return Conductor(self.service, self.host.monitor.devices)


class ApplicationsHandler(ConductorHandler):
    async def get(self, sig_id: str) -> None:
        states = [s for value in self.get_arguments("state") for s in value.split(",") if s]
        with conductor_errors():
            self.conductor.check_group(sig_id)
            try:
                found = self.conductor.applications(self.user_name, states)
            except ValueError as err:
                raise APIError(400, str(err), "state") from err
        self.write_json(found)


class _LogDownload(ConductorHandler):
    async def send(self, opened: tuple[BinaryIO, int] | None, name: str) -> None:
        """The file as it is now, streamed: its size when opened, no more (it may grow)."""
        self.set_header("Content-Type", "application/octet-stream")
        self.set_header("Content-Disposition", f"attachment; filename={name}")
        if opened is None:
            await self.flush()  # the headers as set: Jupyter's `finish` would make it JSON
            self.finish()
            return
        f, size = opened
        with f:
            await send_file(self, f, size)


class DriverLogHandler(_LogDownload):
    async def get(self, sig_id: str, driver_id: str, stream: str) -> None:
        with conductor_errors():
            self.conductor.check_group(sig_id)
            opened = self.conductor.driver_log(self.user_name, driver_id, stream)
        await self.send(opened, f"{driver_id}.driver.{stream}")


class ExecutorLogHandler(_LogDownload):
    async def get(self, sig_id: str, driver_id: str, executor_id: str, stream: str) -> None:
        with conductor_errors():
            self.conductor.check_group(sig_id)
            opened = self.conductor.executor_log(self.user_name, driver_id, executor_id, stream)
        await self.send(opened, f"{driver_id}.{executor_id}.{stream}")


SIG = r"(?P<sig_id>[^/]+)"
DRIVER = r"(?P<driver_id>[^/]+)"
STREAM = r"(?P<stream>stdout|stderr)"
conductor_handlers = [
    (rf"{CONDUCTOR_PREFIX}/instances/{SIG}/applications/?", ApplicationsHandler),
    (
        rf"{CONDUCTOR_PREFIX}/instances/{SIG}/applications/{DRIVER}/logs/{STREAM}/download",
        DriverLogHandler,
    ),
    (
        rf"{CONDUCTOR_PREFIX}/instances/{SIG}/applications/{DRIVER}/(?P<executor_id>[^/]+)"
        rf"/logs/{STREAM}/download",
        ExecutorLogHandler,
    ),
]
