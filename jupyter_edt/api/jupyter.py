"""The embedded mode's front: Jupyter's own authentication and authoriser in front of the API.

A request is the Jupyter server's (its token, its cookie, JupyterHub's OAuth for a single-user
server); the authoriser is asked for "read" (GET, HEAD) or "write" on the resource "edt", so a
deployment's `Authorizer` can gate jupyter-edt like any other part of the server.
"""

from __future__ import annotations

from typing import Any

from jupyter_core.utils import ensure_async
from jupyter_server.base.handlers import APIHandler, JupyterHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin
from tornado import web, websocket

from ..jobs.users import Identity

AUTH_RESOURCE = "edt"


class _JupyterIdentity:
    """`identify` through Jupyter's identity provider and authoriser."""

    async def identify(self: Any) -> Identity:
        user = self.current_user
        if not user:
            raise web.HTTPError(403)  # as Jupyter's API handlers answer an unknown caller
        action = "read" if self.request.method in ("GET", "HEAD") else "write"
        if not await ensure_async(self.authorizer.is_authorized(self, user, action, AUTH_RESOURCE)):
            raise web.HTTPError(403)
        return self.extensionapp.identity(user)


class JupyterFront(_JupyterIdentity, ExtensionHandlerMixin, APIHandler):
    auth_resource = AUTH_RESOURCE


class JupyterSocketFront(
    _JupyterIdentity, ExtensionHandlerMixin, JupyterHandler, websocket.WebSocketHandler
):
    auth_resource = AUTH_RESOURCE
