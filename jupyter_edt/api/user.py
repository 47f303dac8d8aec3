"""GET /edt/api/v1/user: the name the caller's jobs are recorded under, whether the caller is
an administrator (so a front end can tell "my jobs" from everyone's it may see), their groups,
and the quotas that cap what their jobs hold at once."""

from __future__ import annotations

from .base import EDTHandler


class UserHandler(EDTHandler):
    async def get(self) -> None:
        name = self.user_name
        self.write_json(
            {
                "name": name,
                "admin": self.service.is_admin(name),
                "groups": list(self.service.users.groups_of(name)),
                "quota": self.service.quota(name).to_dict(),
            }
        )
