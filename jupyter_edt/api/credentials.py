"""How WMLA's clients authenticate, in both fronts: HTTP Basic ``user:password`` on any call,
where the password is a token the server already accepts and the user is its owner; or
``X-Auth-Token``, the access token that ``GET /auth/v1/logon`` gives for Basic credentials.

An access token is signed, not stored: ``edt1.<claims>.<HMAC-SHA256>``, the claims (who, until
when, what the front needs to know of them) in base64url JSON, signed with a per-server key,
so nothing is kept per token and a holder can neither make one nor extend it. The embedded
server's key derives from its cookie secret (its tokens outlive a restart); ``jupyter edt
serve`` makes one at start (its clients log on again after a restart). Neither Basic nor an
access token is a cookie, which a browser would send along with a forged cross-site request,
so the fronts skip the XSRF check for them (the Basic one keeps Jupyter's origin check: a
browser may cache Basic credentials).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: How long an access token is good for (WMLA's own tokens last hours: a notebook's session).
ACCESS_TOKEN_LIFETIME_S = 8 * 3600
ACCESS_HEADER = "X-Auth-Token"
REALM = "jupyter-edt"
BASIC_CHALLENGE = f'Basic realm="{REALM}"'
TOKEN_CHALLENGE = f'token realm="{REALM}"'
#: Paths WMLA's clients call (below the server's base URL): a 401 there asks for Basic.
WMLA_PATHS = ("platform/rest", "auth/v1")
_VERSION = "edt1"


class BadCredentials(ValueError):
    """Credentials that cannot be read or are not valid here (HTTP 401, with this sentence)."""


@dataclass(frozen=True)
class Credentials:
    """What a WMLA client sent: ``basic`` (user and password) or ``access`` (the token)."""

    scheme: str
    user: str
    secret: str


def wmla_credentials(request: Any) -> Credentials | None:
    """The request's Basic credentials or access token; None when it has neither (it may
    still carry Jupyter's or the service's own credentials). APIError 401 for a Basic header
    that cannot be read (BadCredentials), so a typo is not taken for anonymity."""
    kind, _, value = request.headers.get("Authorization", "").partition(" ")
    if kind.lower() == "basic":
        try:
            text = base64.b64decode(value.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError) as err:
            raise BadCredentials("The Basic credentials are not base64 of user:password.") from err
        user, colon, password = text.partition(":")
        if not colon or not user or not password:
            raise BadCredentials("The Basic credentials are not user:password.")
        return Credentials("basic", user, password)
    token = request.headers.get(ACCESS_HEADER, "").strip()
    if token:
        return Credentials("access", "", token)
    return None


def is_wmla_path(request: Any, base_url: str) -> bool:
    """Whether the request is for one of WMLA's paths, whose clients expect a Basic challenge."""
    path = request.path.removeprefix(base_url.rstrip("/")).lstrip("/")
    return any(path == root or path.startswith(root + "/") for root in WMLA_PATHS)


def challenge(request: Any, base_url: str, credentials: Credentials | None = None) -> str:
    """The 401's ``WWW-Authenticate``: Basic for a WMLA client (its path, or it sent Basic or
    an access token: `credentials`, once a front read them), else the token scheme of Jupyter
    and JupyterHub (a browser that saw Basic there would prompt for a password in the middle
    of JupyterLab)."""
    try:
        wmla = credentials is not None or wmla_credentials(request) is not None
    except BadCredentials:
        wmla = True
    return BASIC_CHALLENGE if wmla or is_wmla_path(request, base_url) else TOKEN_CHALLENGE


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class AccessTokens:
    """Issues and checks access tokens with one key (per server: see the fronts)."""

    def __init__(self, key: bytes, lifetime_s: float = ACCESS_TOKEN_LIFETIME_S) -> None:
        self._key = hashlib.sha256(b"jupyter-edt access token\0" + key).digest()
        self.lifetime_s = lifetime_s

    def _sign(self, body: str) -> str:
        return _b64(hmac.new(self._key, f"{_VERSION}.{body}".encode(), hashlib.sha256).digest())

    def issue(
        self, user: str, claims: dict[str, Any], *, lifetime_s: float | None = None
    ) -> tuple[str, int]:
        """A token for `user` with `claims`, and when it expires (Unix seconds)."""
        life = self.lifetime_s if lifetime_s is None else lifetime_s
        expiry = int(time.time() + life)
        body = _b64(json.dumps({**claims, "sub": user, "exp": expiry}).encode())
        return f"{_VERSION}.{body}.{self._sign(body)}", expiry

    def verify(self, token: str) -> dict[str, Any] | None:
        """The claims of a token this key signed and that has not expired; else None."""
        version, _, rest = token.partition(".")
        body, _, signature = rest.partition(".")
        if version != _VERSION or not hmac.compare_digest(signature, self._sign(body)):
            return None
        try:
            claims = json.loads(_unb64(body))
        except (ValueError, binascii.Error):
            return None
        if not isinstance(claims, dict) or not isinstance(claims.get("sub"), str):
            return None
        if not isinstance(claims.get("exp"), int) or claims["exp"] <= time.time():
            return None
        return claims


def access_tokens(
    settings: dict[str, Any], key: Callable[[], bytes], lifetime_s: float = ACCESS_TOKEN_LIFETIME_S
) -> AccessTokens:
    """The application's `AccessTokens`, made on first use with the key `key()` gives."""
    if "edt_access_tokens" not in settings:
        settings["edt_access_tokens"] = AccessTokens(key(), lifetime_s)
    return settings["edt_access_tokens"]


# a query argument whose name holds one of these is a secret: ?token= (a WebSocket's)
SECRET_ARGUMENT = re.compile(r"(^|&)([^=&]*(?:token|auth|key)[^=&]*)=[^&]*", re.IGNORECASE)


def scrubbed_uri(request: Any) -> str:
    """The request's path and query for a log, secret arguments' values replaced (headers,
    Authorization and X-Auth-Token included, are never logged)."""
    if not request.query:
        return request.path
    query = SECRET_ARGUMENT.sub(r"\1\2=[secret]", request.query)
    return f"{request.path}?{query}"


def request_summary(handler: Any) -> str:
    """Tornado's `_request_summary` (what its warnings of refused requests say), scrubbed."""
    request = handler.request
    return f"{request.method} {scrubbed_uri(request)} ({request.remote_ip})"
