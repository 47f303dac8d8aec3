"""GET /edt/api/v1/usage: the GPU-seconds held and used over a time range, by user, group or
job (what the caller may see: everyone's for an administrator, their own for anyone else)."""

from __future__ import annotations

from ..jobs.usage import UsageBy
from .arguments import time_range
from .base import APIError, EDTHandler, api_errors


class UsageHandler(EDTHandler):
    async def get(self) -> None:
        since, until = time_range(self)
        by_name = self.get_argument("by", UsageBy.USER.value)
        try:
            by = UsageBy(by_name)
        except ValueError as err:
            names = ", ".join(b.value for b in UsageBy)
            raise APIError(400, f"must be one of {names}", "by") from err
        with api_errors():
            report = self.service.usage(self.user_name, since=since or 0.0, until=until, by=by)
        self.write_json(report.to_dict())
