"""GET|PATCH /edt/api/v1/admin/config: the settings that change without a restart (quotas,
weights, user groups, administrators, the policy), an administrator's only.

PATCH takes a JSON merge patch of them (RFC 7386), checked as a whole before any of it
applies; the next allocation goes by it. Both answer the settings and their latest changes
(``jobs/liverules.py``)."""

from __future__ import annotations

from typing import Any

from ..jobs.liverules import LiveRules
from .base import EDTHandler, api_errors


class AdminConfigHandler(EDTHandler):
    async def get(self) -> None:
        with api_errors():
            rules, changes = self.service.config(self.user_name)
        self.write_json(_answer(rules, changes))

    async def patch(self) -> None:
        with api_errors():
            self.service.config(self.user_name)  # a non-administrator: 403, whatever the body
            await self.service.change_config(self.user_name, self.json_body())
            rules, changes = self.service.config(self.user_name)
        self.write_json(_answer(rules, changes))


def _answer(rules: LiveRules, changes: list[dict[str, Any]]) -> dict[str, Any]:
    return {"config": rules.to_dict(), "changes": changes}
