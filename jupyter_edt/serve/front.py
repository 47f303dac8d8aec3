"""The shared service's front: every request identified by its token (or, from a WMLA client,
by Basic credentials whose password is such a token, or by an access token), errors as JSON."""

from __future__ import annotations

import json
import secrets
from typing import Any

from tornado import web, websocket

from ..api.base import APIError
from ..api.credentials import (
    BadCredentials,
    Credentials,
    access_tokens,
    request_summary,
    wmla_credentials,
)
from ..api.health import HEALTHY
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


def _token(request: Any) -> str:
    """The request's token; 401 without one."""
    token = request_token(request)
    if token is None:
        raise APIError(401, "A token is needed: send 'Authorization: token <your token>'.")
    return token


class _TokenIdentity:
    credentials: Credentials | None = None

    async def identify(self: Any) -> Identity:
        try:
            self.credentials = wmla_credentials(self.request)
        except BadCredentials as err:
            raise APIError(401, str(err)) from err
        if self.credentials is not None:
            return await self._wmla_identity(self.credentials)
        identity = await self._token_owner(_token(self.request))
        if identity is None:
            raise APIError(403, "The token is not valid here.")
        return identity

    async def identify_scraper(self: Any) -> Identity:
        """Who may read the metrics: the authenticator says (`authenticate_scraper`), with
        the service's own administrators (`admin_users`)."""
        auth: Authenticator = self.settings["edt_auth"]
        admin = self.service.is_admin
        try:
            identity = await auth.authenticate_scraper(_token(self.request), admin)
        except AccessDenied as err:
            raise APIError(403, str(err)) from err
        if identity is None:
            raise APIError(403, "The token is not valid here.")
        return identity

    async def _token_owner(self: Any, token: str) -> Identity | None:
        auth: Authenticator = self.settings["edt_auth"]
        try:
            return await auth.authenticate(token)
        except AccessDenied as err:
            raise APIError(403, str(err)) from err

    async def _wmla_identity(self: Any, credentials: Credentials) -> Identity:
        """Basic: the password is a token, and the user its owner; an access token: the
        caller its logon named (with the groups and role they had then)."""
        if credentials.scheme == "basic":
            identity = await self._token_owner(credentials.secret)
            if identity is None or identity.name != credentials.user:
                raise APIError(401, "The user name and token do not match a user here.")
            return identity
        claims = access_tokens(self.settings, _no_key).verify(credentials.secret)
        if claims is None:
            raise APIError(401, "The access token is not valid here, or has expired: log on again.")
        return Identity(claims["sub"], tuple(claims.get("groups", ())), bool(claims.get("admin")))

    async def issue_access_token(self: Any) -> tuple[str, int]:
        identity = self.identity
        claims = {"groups": list(identity.groups), "admin": identity.admin}
        return access_tokens(self.settings, _no_key).issue(identity.name, claims)


def _no_key() -> bytes:
    """The key of a service made without one (its app sets `edt_access_tokens`): a random one."""
    return secrets.token_bytes(32)


class _JSONErrors:
    def _request_summary(self: Any) -> str:
        return request_summary(self)  # what tornado logs of a refusal: no ?token= value

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


class HealthHandler(_JSONErrors, web.RequestHandler):
    """GET /edt/api/health without a token (``api/health.py``; it says nothing else)."""

    def get(self) -> None:
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(HEALTHY))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        if status_code == 405:  # RFC 9110: a 405 names the methods the resource has
            self.set_header("Allow", "GET")
        super().write_error(status_code, **kwargs)


#: What the service serves before the API's routes: its health without a token, where the
#: API's own health route (``api/health.py``, behind the front) would ask for one.
service_handlers: list[tuple[str, type[web.RequestHandler]]] = [
    (r"/edt/api/health", HealthHandler),
]
