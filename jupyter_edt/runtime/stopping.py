"""How a driver stops on SIGTERM (a cancel, a suspension forced, the service's shutdown).

It stops at once, through its ``finally``, which stops its workers and waits for their end.
The one moment it must not stop is the middle of starting workers: a start cut in half leaves
a process the driver holds no handle on, which outlives the driver's stop and writes into the
job directory that its service may be deleting by then. There the stop waits until the
started workers have their handles (`Stop.held`), and happens right after."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from types import FrameType


class Stop:
    """The SIGTERM handler: ``SystemExit(128 + signal)``, now or at the end of `held`."""

    def __init__(self) -> None:
        self._held = 0
        self._pending: int | None = None

    def __call__(self, signum: int, _frame: FrameType | None) -> None:
        if self._held:
            self._pending = signum
            return
        raise SystemExit(128 + signum)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """A stop that comes meanwhile happens when this ends. Signal handlers run in the main
        thread only, so only there is anything held."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        self._held += 1
        try:
            yield
        finally:
            self._held -= 1
            if not self._held and self._pending is not None:
                signum, self._pending = self._pending, None
                raise SystemExit(128 + signum)
