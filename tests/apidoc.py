"""The API's contract, docs/openapi.yaml, as the tests read it: the document itself, and a check
of an answer against the document's schema for it (used by the api/ and compat/ tests)."""

from __future__ import annotations

from pathlib import Path

import yaml
from jsonschema import Draft202012Validator

DOC = yaml.safe_load((Path(__file__).parents[1] / "docs" / "openapi.yaml").read_text())


def doc_path(path: str) -> str:
    """A documented path; `/execs` (a path under its own API's base) names `/wmla/v1/execs`."""
    if path in DOC["paths"]:
        return path
    (found,) = (p for p in (f"/v1{path}", f"/wmla/v1{path}") if p in DOC["paths"])
    return found


def check(path: str, method: str, status: int, body) -> None:
    """Validate a response body against the document's schema for it."""
    response = DOC["paths"][doc_path(path)][method]["responses"][str(status)]
    if "$ref" in response:
        response = DOC["components"]["responses"][response["$ref"].rsplit("/", 1)[1]]
    schema = response["content"]["application/json"]["schema"]
    Draft202012Validator({**schema, "components": DOC["components"]}).validate(body)
