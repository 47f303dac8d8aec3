"""What every jupyter-edt handler shares: authentication, authorisation, JSON answers."""

from __future__ import annotations

import json
from typing import Any

from jupyter_server.base.handlers import APIHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin


class EDTHandler(ExtensionHandlerMixin, APIHandler):
    """Base of the REST handlers. `auth_resource` lets Jupyter's authorizer gate them."""

    auth_resource = "edt"

    def write_json(self, body: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(body))
