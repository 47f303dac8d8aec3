"""One way for a test to wait for something that happens in other processes, threads or tasks:
`eventually` on an event loop, `eventually_sync` where there is none. Both poll, return what
they waited for, and fail saying what never happened."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from jobprograms import DEADLINE_S

T = TypeVar("T")

_UNSEEN: Any = object()


async def eventually(
    probe: Callable[[], T | Awaitable[T]],
    what: str,
    *,
    until: Callable[[T], object] | None = None,
    timeout: float = DEADLINE_S,
    interval: float = 0.05,
) -> T:
    """Poll `probe` (a function or a coroutine function) until what it returns is true, or
    satisfies `until` when given, and return that; fail after `timeout` seconds, saying what
    never happened and, with `until`, the last value seen."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if inspect.isawaitable(value):
            value = await value
        if _done(value, until):
            return value  # type: ignore[return-value]
        if time.monotonic() > deadline:
            raise AssertionError(_never(what, timeout, value if until else _UNSEEN))
        await asyncio.sleep(interval)


def eventually_sync(
    probe: Callable[[], T],
    what: str,
    *,
    until: Callable[[T], object] | None = None,
    timeout: float = DEADLINE_S,
    interval: float = 0.05,
) -> T:
    """`eventually` for a test with no event loop: the same polls, asleep in between."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if _done(value, until):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(_never(what, timeout, value if until else _UNSEEN))
        time.sleep(interval)


def _done(value, until) -> bool:
    return bool(until(value) if until is not None else value)


def _never(what: str, timeout: float, last) -> str:
    said = f"never {what} (waited {timeout:g} s)"
    return said if last is _UNSEEN else f"{said}; last seen: {last}"
