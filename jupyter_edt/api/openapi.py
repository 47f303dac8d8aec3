"""GET /edt/api/v1/openapi.json: the API's own contract (docs/openapi.yaml) as JSON; and a JSON
404 for every other path under the API's roots (/edt/api/, WMLA's /platform/rest/ and
/auth/v1/), so that a client of the API never gets an HTML page.

The document is served as written, except that its server URLs are put under the Jupyter
server's base URL (`/user/alice/` behind JupyterHub): a tool that reads the document from a
server then reaches that server.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import yaml

from .base import APIError, EDTHandler

DOCUMENT = "openapi.yaml"
# An installed wheel carries the document beside this module (pyproject's force-include); a
# source checkout, the editable install included, has it in docs/.
LOCATIONS = (Path(__file__).with_name(DOCUMENT), Path(__file__).parents[2] / "docs" / DOCUMENT)


@functools.cache
def load_document() -> dict[str, Any]:
    for path in LOCATIONS:
        if path.is_file():
            return yaml.safe_load(path.read_text(encoding="utf-8"))
    raise FileNotFoundError(f"The OpenAPI document is in none of {[str(p) for p in LOCATIONS]}")


def served_document(base_url: str) -> dict[str, Any]:
    """The document with every absolute-path server URL under `base_url`."""
    document = copy.deepcopy(load_document())
    prefix = base_url.rstrip("/")
    holders = [document, *document.get("paths", {}).values()]
    holders += [op for item in document.get("paths", {}).values() for op in item.values()]
    for holder in holders:
        for server in holder.get("servers", []) if isinstance(holder, dict) else []:
            if server["url"].startswith("/"):
                server["url"] = prefix + server["url"]
    return document


class OpenAPIHandler(EDTHandler):
    async def get(self) -> None:
        self.write_json(served_document(self.settings.get("base_url", "/")))


class NotFoundHandler(EDTHandler):
    """Any other path under the API's roots (registered after every operation's route): a 404
    with the API's error body, for an identified caller (a stranger learns nothing of which
    paths exist: 401 or 403 as anywhere else)."""

    notes_caller = False  # nothing to tell the service (a forwarding server has none)

    async def get(self, *args: str) -> None:
        raise APIError(404, f"No API operation at {self.request.path}")

    post = put = patch = delete = head = get
