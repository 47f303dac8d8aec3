"""One way for a test to wait for something that happens in other processes or tasks."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

from jobprograms import DEADLINE_S

T = TypeVar("T")


async def eventually(
    condition: Callable[[], T], what: str, *, timeout: float = DEADLINE_S, interval: float = 0.05
) -> T:
    """Poll `condition` until it returns something true, and return that; fail, saying what
    never happened, after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"never {what} (waited {timeout:.0f} s)")
        await asyncio.sleep(interval)
    return value
