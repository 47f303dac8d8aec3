"""GET /edt/api/v1/usage: the GPU-seconds held and used over a time range, by user, group or
job (what the caller may see: everyone's for an administrator, their own for anyone else)."""

from __future__ import annotations

import re

from ..jobs.usage import UsageBy
from .base import APIError, EDTHandler, api_errors

# A JSON number without a sign (Python's float() also takes "nan", "1_0", "inf"...).
NUMBER = re.compile(r"(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")


class UsageHandler(EDTHandler):
    async def get(self) -> None:
        since = _seconds(self, "since")
        until = _seconds(self, "until")
        if since is not None and until is not None and until < since:
            raise APIError(400, "must not be before since", "until")
        by_name = self.get_argument("by", UsageBy.USER.value)
        try:
            by = UsageBy(by_name)
        except ValueError as err:
            names = ", ".join(b.value for b in UsageBy)
            raise APIError(400, f"must be one of {names}", "by") from err
        with api_errors():
            report = self.service.usage(self.user_name, since=since or 0.0, until=until, by=by)
        self.write_json(report.to_dict())


def _seconds(handler: EDTHandler, name: str) -> float | None:
    """A time as seconds since the epoch: a finite number, 0 or more."""
    value = handler.get_argument(name, None)
    if value is None:
        return None
    seconds = float(value) if NUMBER.fullmatch(value) else None
    if seconds is None or seconds == float("inf"):
        raise APIError(400, "must be a number of seconds since the epoch, 0 or more", name)
    return seconds
