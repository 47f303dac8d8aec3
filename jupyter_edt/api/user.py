"""GET /edt/api/v1/user: the name the caller's jobs are recorded under, and whether the caller
is an administrator, so a front end can tell "my jobs" from everyone's it may see."""

from __future__ import annotations

from .base import EDTHandler


class UserHandler(EDTHandler):
    async def get(self) -> None:
        name = self.user_name
        self.write_json({"name": name, "admin": self.service.is_admin(name)})
