"""Query arguments that several handlers read the same way."""

from __future__ import annotations

import re

from tornado import web

from .base import APIError

# A JSON number without a sign (Python's float() also takes "nan", "1_0", "inf"...).
NUMBER = re.compile(r"(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")


def seconds_argument(handler: web.RequestHandler, name: str) -> float | None:
    """A time as seconds since the epoch: a finite number, 0 or more; None when not given.
    Anything else is a 400 naming the argument."""
    value = handler.get_argument(name, None)
    if value is None:
        return None
    seconds = float(value) if NUMBER.fullmatch(value) else None
    if seconds is None or seconds == float("inf"):
        raise APIError(400, "must be a number of seconds since the epoch, 0 or more", name)
    return seconds


def time_range(handler: web.RequestHandler) -> tuple[float | None, float | None]:
    """`since` and `until` (each optional, see `seconds_argument`); an `until` before `since`
    is a 400 naming `until`."""
    since = seconds_argument(handler, "since")
    until = seconds_argument(handler, "until")
    if since is not None and until is not None and until < since:
        raise APIError(400, "must not be before since", "until")
    return since, until
