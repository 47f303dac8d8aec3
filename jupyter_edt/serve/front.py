"""The shared service's front: every request identified by its token, errors as JSON."""

from __future__ import annotations

import json
from typing import Any

from tornado import web, websocket

from ..api.base import APIError
from ..jobs.users import Identity
from .auth import AccessDenied, Authenticator


def request_token(request: Any) -> str | None:
    """The token of ``Authorization: token T`` (JupyterHub's form) or ``Bearer T``; else of a
    ``token`` query argument (a browser's WebSocket cannot set headers)."""
    kind, _, value = request.headers.get("Authorization", "").partition(" ")
    if kind.lower() in ("token", "bearer") and value.strip():
        return value.strip()
    values = request.query_arguments.get("token")
    return values[-1].decode("utf-8", "replace") if values else None


class _TokenIdentity:
    async def identify(self: Any) -> Identity:
        token = request_token(self.request)
        if token is None:
            raise APIError(401, "A token is needed: send 'Authorization: token <your token>'.")
        auth: Authenticator = self.settings["edt_auth"]
        try:
            identity = await auth.authenticate(token)
        except AccessDenied as err:
            raise APIError(403, str(err)) from err
        if identity is None:
            raise APIError(403, "The token is not valid here.")
        return identity


class _JSONErrors:
    def write_error(self: Any, status_code: int, **kwargs: Any) -> None:
        """Every error a JSON body, as the API's clients expect (the handlers' own APIErrors
        are written before this is reached)."""
        exc = kwargs.get("exc_info", (None, None, None))[1]
        message = exc.message if isinstance(exc, APIError) else self._reason
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"message": message}))


class ServiceFront(_TokenIdentity, _JSONErrors, web.RequestHandler):
    def check_xsrf_cookie(self) -> None:
        """Tokens travel in headers, never in cookies: no cross-site request can carry one."""


class ServiceSocketFront(_TokenIdentity, _JSONErrors, websocket.WebSocketHandler):
    pass


class HealthHandler(web.RequestHandler):
    """GET /edt/api/health: that the service answers (no token; it says nothing else)."""

    def get(self) -> None:
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"status": "ok"}))
