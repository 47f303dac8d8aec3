"""Who calls the shared service: a JupyterHub token, or a token from a file.

Every request must carry a token (``Authorization: token T`` or ``Bearer T``); there is no
anonymous access, not even from 127.0.0.1, since every user of the machine can reach loopback.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from traitlets import Bool, Float, List, Unicode, default
from traitlets.config import LoggingConfigurable

from ..jobs.users import Identity


class AccessDenied(Exception):
    """A known caller without the right to use the service (HTTP 403, with this sentence)."""


class Authenticator(LoggingConfigurable):
    """Turns a request's token into an `Identity`."""

    async def authenticate(self, token: str) -> Identity | None:
        """The caller the token names; None for a token nobody issued. AccessDenied for a
        valid token that does not grant the use of the service."""
        raise NotImplementedError

    async def authenticate_scraper(
        self, token: str, is_admin: Callable[[str], bool]
    ) -> Identity | None:
        """The caller, if the token may read the service's metrics (they name every user):
        here, an administrator's (as its provider says, or `is_admin`: as the service's own
        configuration does). None for a token nobody issued; AccessDenied for another."""
        identity = await self.authenticate(token)
        if identity is not None and not (identity.admin or is_admin(identity.name)):
            raise AccessDenied(f"{identity.name} may not read the metrics: administrators do.")
        return identity

    def check(self) -> None:
        """Refuse to start (ValueError, naming the option) when the configuration is incomplete."""


class HubAuthenticator(Authenticator):
    """Users are JupyterHub's: the token is checked with the Hub (``GET /hub/api/user``), which
    says whose it is, their groups, and the scopes the token holds. As in JupyterHub's own
    `HubAuth`, answers are cached for a while so that a busy client costs the Hub little."""

    api_url = Unicode(
        config=True,
        help="The Hub's API URL (default: $JUPYTERHUB_API_URL, which the Hub gives a service).",
    )
    api_token = Unicode(
        config=True,
        help="The service's own Hub token (default: $JUPYTERHUB_API_TOKEN).",
    )
    service_name = Unicode(
        config=True,
        help="The service's name in `c.JupyterHub.services` (default: $JUPYTERHUB_SERVICE_NAME, "
        "else 'edt').",
    )
    access_scope = Unicode(
        config=True,
        help="The scope a token needs to use the service (default: "
        "access:services!service=<service_name>; access:services grants it too).",
    )
    admin_scope = Unicode(
        "",
        config=True,
        help="A scope whose holders are administrators here: they see and change everyone's "
        "jobs (e.g. a custom scope 'custom:edt:admin' granted through a Hub role).",
    )
    admin_groups = List(
        Unicode(),
        config=True,
        help="Hub groups whose members are administrators here.",
    )
    metrics_scope = Unicode(
        "read:metrics",
        config=True,
        help="The scope that lets a token read the service's metrics (GET "
        "/edt/api/v1/metrics), as administrators may: JupyterHub's own, so that the token "
        "Prometheus scrapes the Hub's /hub/metrics with scrapes the service too. It need not "
        "grant the use of the service.",
    )
    hub_admins = Bool(
        True,
        config=True,
        help="Whether the Hub's own administrators are administrators here.",
    )
    cache_max_age = Float(
        60.0,
        config=True,
        help="Seconds a token's answer from the Hub is reused before it is asked again.",
    )

    @default("api_url")
    def _default_api_url(self) -> str:
        return os.environ.get("JUPYTERHUB_API_URL", "")

    @default("api_token")
    def _default_api_token(self) -> str:
        return os.environ.get("JUPYTERHUB_API_TOKEN", "")

    @default("service_name")
    def _default_service_name(self) -> str:
        return os.environ.get("JUPYTERHUB_SERVICE_NAME", "edt")

    @default("access_scope")
    def _default_access_scope(self) -> str:
        return f"access:services!service={self.service_name}"

    CACHE_SIZE = 1024

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # token hash -> (when asked, identity, may use the service, may read the metrics)
        self._cache: OrderedDict[str, tuple[float, Identity | None, bool, bool]] = OrderedDict()

    def check(self) -> None:
        if not self.api_url:
            raise ValueError(
                "HubAuthenticator.api_url is not set and $JUPYTERHUB_API_URL is empty: run the "
                "service as a JupyterHub service, or give the Hub's API URL."
            )

    async def authenticate(self, token: str) -> Identity | None:
        identity, allowed, _ = await self._judged(token)
        if identity is not None and not allowed:
            raise AccessDenied(
                f"The token of {identity.name} does not grant {self.access_scope}: ask the "
                "Hub's administrator for access to this service."
            )
        return identity

    async def authenticate_scraper(
        self, token: str, is_admin: Callable[[str], bool]
    ) -> Identity | None:
        """An administrator's token, or one with `metrics_scope` (a Prometheus service's)."""
        identity, _, scraper = await self._judged(token)
        if identity is not None and not (scraper or is_admin(identity.name)):
            raise AccessDenied(
                f"The token of {identity.name} does not grant {self.metrics_scope}, and "
                "only that scope and administrators read the metrics."
            )
        return identity

    async def _judged(self, token: str) -> tuple[Identity | None, bool, bool]:
        """Whose the token is, whether it may use the service and read its metrics: the
        Hub's answer, cached."""
        key = hashlib.sha256(token.encode()).hexdigest()
        now = time.monotonic()
        cached = self._cache.get(key)
        if cached is None or now - cached[0] > self.cache_max_age:
            model = await self._ask_hub(token)
            judged = self._judge(model) if model is not None else (None, False, False)
            cached = self._cache[key] = (now, *judged)
            while len(self._cache) > self.CACHE_SIZE:
                self._cache.popitem(last=False)
        self._cache.move_to_end(key)
        return cached[1:]

    async def _ask_hub(self, token: str) -> dict[str, Any] | None:
        request = HTTPRequest(
            self.api_url.rstrip("/") + "/user",
            headers={"Authorization": f"token {token}"},
            request_timeout=10,
        )
        try:
            response = await AsyncHTTPClient().fetch(request)
        except HTTPClientError as err:
            if err.code in (401, 403, 404):
                return None  # not a token the Hub knows
            raise
        return json.loads(response.body)

    def _judge(self, model: dict[str, Any]) -> tuple[Identity, bool, bool]:
        scopes = set(model.get("scopes", []))
        groups = tuple(model.get("groups") or ())
        admin = bool(
            (self.admin_scope and self.admin_scope in scopes)
            or set(groups) & set(self.admin_groups)
            or (self.hub_admins and model.get("admin"))
        )
        allowed = admin or bool({self.access_scope, "access:services"} & scopes)
        scraper = admin or bool(self.metrics_scope and self.metrics_scope in scopes)
        return Identity(model["name"], groups=groups, admin=admin), allowed, scraper


class TokenFileAuthenticator(Authenticator):
    """Users and their tokens in a JSON file, for a small team without a Hub::

        {"alice": {"tokens": ["<secret>"], "groups": ["ml"]},
         "root": {"tokens": ["<secret>"], "admin": true}}

    The file is read again when it changes. It should be readable by the service's account
    only (a warning says so otherwise)."""

    tokens_file = Unicode(config=True, help="The JSON file of users and their tokens.")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._read_at: float | None = None
        self._by_hash: dict[str, Identity] = {}

    def check(self) -> None:
        if not self.tokens_file:
            raise ValueError("TokenFileAuthenticator.tokens_file is not set.")
        self._load()

    def _load(self) -> None:
        path = Path(self.tokens_file)
        stat = path.stat()
        if stat.st_mtime == self._read_at:
            return
        try:
            users = json.loads(path.read_text(encoding="utf-8"))
            by_hash = {}
            for name, entry in users.items():
                identity = Identity(
                    name, tuple(entry.get("groups", ())), bool(entry.get("admin", False))
                )
                for token in entry["tokens"]:
                    if len(token) < 16:
                        raise ValueError(f"a token of {name} is shorter than 16 characters")
                    by_hash[hashlib.sha256(token.encode()).hexdigest()] = identity
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise ValueError(
                f"TokenFileAuthenticator.tokens_file {path} is not a JSON object of users, "
                f'each {{"tokens": [...], "groups": [...], "admin": false}}: {err!r}'
            ) from err
        if stat.st_mode & 0o077:
            self.log.warning("jupyter-edt: %s is readable by others; chmod 600 it.", path)
        self._by_hash, self._read_at = by_hash, stat.st_mtime

    async def authenticate(self, token: str) -> Identity | None:
        try:
            self._load()
        except (OSError, ValueError):
            self.log.exception("jupyter-edt: the tokens file could not be read; keeping the last")
        return self._by_hash.get(hashlib.sha256(token.encode()).hexdigest())
