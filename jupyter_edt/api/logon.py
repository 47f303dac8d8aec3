"""The logons of WMLA's clients: ``GET /platform/rest/conductor/v1/auth/logon`` (Basic: is it
good?) and ``GET /auth/v1/logon`` (Basic: an access token for ``X-Auth-Token``). How the
credentials are read and the tokens signed is in ``credentials.py``; the fronts check them."""

from __future__ import annotations

import time

from .base import APIError, EDTHandler
from .credentials import ACCESS_HEADER


class ConductorLogonHandler(EDTHandler):
    """GET /platform/rest/conductor/v1/auth/logon: 200 when the credentials are good (WMLA's
    1.2.x notebooks read only that)."""

    notes_caller = False

    async def get(self) -> None:
        self.write_json({"user": self.user_name, "logon": True})


class LogonHandler(EDTHandler):
    """GET /auth/v1/logon: an access token for the caller, good as ``X-Auth-Token`` until it
    expires. Not for a caller who sent an access token itself: a token's holder cannot renew
    it forever without the credentials it was given for."""

    notes_caller = False

    async def get(self) -> None:
        if self.credentials is not None and self.credentials.scheme == "access":
            raise APIError(401, "Log on with Basic user:token, not an access token.")
        token, expiry = await self.issue_access_token()
        self.set_header("Cache-Control", "no-store")
        self.write_json(
            {
                "accessToken": token,
                "tokenType": ACCESS_HEADER,
                "user": self.user_name,
                "expiresIn": max(0, int(expiry - time.time())),
                "expiry": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expiry)),
            }
        )
