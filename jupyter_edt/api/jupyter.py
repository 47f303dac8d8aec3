"""The embedded mode's front: Jupyter's own authentication and authoriser in front of the API.

A request is the Jupyter server's (its token, its cookie, JupyterHub's OAuth for a single-user
server); the authoriser is asked for "read" (GET, HEAD) or "write" on the resource "edt", so a
deployment's `Authorizer` can gate jupyter-edt like any other part of the server.

WMLA's clients authenticate their own way (``credentials.py``), and Jupyter's machinery checks
them too:

- Basic ``user:password``: the password goes to Jupyter's identity provider as the token it
  is (the server's token; under JupyterHub a Hub token the server accepts), cookies aside, and
  the user must be the one the jobs are recorded under (`EDTApp.user_name`: the server's owner,
  `EDTApp.owner`, on a server of Jupyter's own token login; the Hub user under JupyterHub).
- ``X-Auth-Token``: an access token from ``/auth/v1/logon``, signed with a key derived from
  the server's cookie secret. It names the Jupyter user and the actions the authoriser granted
  at the logon; the request is that user's, with those actions.

Both are refused with 401 and a Basic challenge, and neither is a cookie, so Jupyter's XSRF
check, which protects cookies, is skipped for them; the origin check stays for Basic, which a
browser may remember and send cross-site.
"""

from __future__ import annotations

import secrets
from typing import Any

from jupyter_core.utils import ensure_async
from jupyter_server.auth.identity import User
from jupyter_server.base.handlers import APIHandler, JupyterHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin
from tornado import web, websocket

from ..jobs.users import Identity
from .base import APIError
from .credentials import (
    BadCredentials,
    Credentials,
    access_tokens,
    is_wmla_path,
    request_summary,
    wmla_credentials,
)

AUTH_RESOURCE = "edt"
ACTIONS = ("read", "write")


class _AccessTokenProvider:
    """Jupyter's identity provider for one request whose access token checked out: it names
    the token's user, token-authenticated (no cookie, so no XSRF check); the rest is the
    server's provider."""

    def __init__(self, provider: Any, user: User) -> None:
        self._provider = provider
        self._user = user

    def __getattr__(self, name: str) -> Any:
        return getattr(self._provider, name)

    def get_user(self, handler: web.RequestHandler) -> User:
        return self._user

    def is_token_authenticated(self, handler: web.RequestHandler) -> bool:
        return True

    def should_check_origin(self, handler: web.RequestHandler) -> bool:
        return False


class _JupyterIdentity:
    """`identify` through Jupyter's identity provider and authoriser."""

    credentials: Credentials | None = None
    _access: dict[str, Any] | None = None  # an access token's claims

    def _action(self: Any) -> str:
        return "read" if self.request.method in ("GET", "HEAD") else "write"

    def _wmla(self: Any) -> Credentials | None:
        """What a WMLA client sent (Basic, or an access token), read once."""
        if not hasattr(self, "_wmla_read"):
            self._wmla_read = True
            try:
                self.credentials = wmla_credentials(self.request)
            except BadCredentials as err:
                raise APIError(401, str(err)) from err
        return self.credentials

    def _tokens(self: Any) -> Any:
        lifetime = self.extensionapp.access_token_lifetime
        return access_tokens(self.settings, lambda: _key(self.settings), lifetime)

    async def prepare(self: Any) -> Any:
        credentials = self._wmla()
        if credentials is not None:
            # these credentials alone say who calls: a cookie of the browser's does not
            self.request.headers.pop("Cookie", None)
            self.request.__dict__.pop("_cookies", None)
            if credentials.scheme == "basic":  # Jupyter's provider checks the token
                self.request.headers["Authorization"] = f"token {credentials.secret}"
            else:
                self._access = self._tokens().verify(credentials.secret)
                if self._access is None:
                    raise APIError(401, "The access token is not valid or has expired: log on.")
        try:
            return await super().prepare()
        except web.HTTPError as err:
            unknown = getattr(self, "_jupyter_current_user", None) is None
            if err.status_code == 403 and unknown and self._asks_basic():
                raise APIError(401, "Log on with Basic user:token credentials.") from err
            raise

    def _asks_basic(self: Any) -> bool:
        """Whether a refused caller is a WMLA client, told to log on with Basic (401)."""
        return self.credentials is not None or is_wmla_path(self.request, self.base_url)

    @property
    def identity_provider(self: Any) -> Any:
        provider = super().identity_provider
        if self._access is not None:
            return _AccessTokenProvider(provider, User(username=self._access["jupyter"]))
        return provider

    def _request_summary(self: Any) -> str:
        return request_summary(self)  # what tornado logs of a refusal: no ?token= value

    def check_xsrf_cookie(self: Any) -> None:
        """Not for Basic or an access token: they are no cookies (and `prepare` drops the
        cookies of such a request), so a cross-site form cannot make a browser send them."""
        if self._wmla() is not None:
            return None
        return super().check_xsrf_cookie()

    def skip_check_origin(self: Any) -> bool:
        if self.credentials is not None and self.credentials.scheme == "basic":
            return self.request.method == "OPTIONS"  # a browser may have cached Basic
        return super().skip_check_origin()

    async def identify(self: Any) -> Identity:
        user = self.current_user
        if not user:
            if self._asks_basic():
                raise APIError(401, "Log on with Basic user:token credentials.")
            raise web.HTTPError(403)  # as Jupyter's API handlers answer an unknown caller
        action = self._action()
        if self._access is not None:
            if action not in self._access.get("act", ()):
                raise web.HTTPError(403)
            return self.extensionapp.identity(user)
        if not await ensure_async(self.authorizer.is_authorized(self, user, action, AUTH_RESOURCE)):
            raise web.HTTPError(403)
        identity = self.extensionapp.identity(user)
        if self.credentials is not None and identity.name != self.credentials.user:
            raise APIError(
                401, "The user name and token do not match: the token is another user's."
            )
        return identity

    async def identify_scraper(self: Any) -> Identity:
        """Who may read the metrics (they name every user): the server's owner
        (`EDTApp.owner`; on a server of Jupyter's own token login, every caller is), or an
        administrator (`EDTApp.admin_users`)."""
        identity = await _JupyterIdentity.identify(self)  # not the metrics handler's own
        app = self.extensionapp
        if identity.name != app.owner and not app.job_service.is_admin(identity.name):
            raise APIError(403, "Only the server's owner and administrators read its metrics.")
        return identity

    async def issue_access_token(self: Any) -> tuple[str, int]:
        """A token naming the Jupyter user, with the actions the authoriser grants them now."""
        user = self.current_user
        granted = [
            a
            for a in ACTIONS
            if await ensure_async(self.authorizer.is_authorized(self, user, a, AUTH_RESOURCE))
        ]
        return self._tokens().issue(self.identity.name, {"jupyter": user.username, "act": granted})


def _key(settings: dict[str, Any]) -> bytes:
    """The access tokens' key: the server's cookie secret (a restart keeps it where Jupyter
    keeps that), else, for a server without one, a random one."""
    secret = settings.get("cookie_secret")
    if isinstance(secret, str):
        secret = secret.encode()
    return secret or secrets.token_bytes(32)


class JupyterFront(_JupyterIdentity, ExtensionHandlerMixin, APIHandler):
    auth_resource = AUTH_RESOURCE


class JupyterSocketFront(
    _JupyterIdentity, ExtensionHandlerMixin, JupyterHandler, websocket.WebSocketHandler
):
    auth_resource = AUTH_RESOURCE
