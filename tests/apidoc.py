"""The API's contract, docs/openapi.yaml, as the tests read it: the document itself (read
strictly: no mapping names a key twice), and a check of an answer against the document's schema
for it (used by the api/ and compat/ tests)."""

from __future__ import annotations

from pathlib import Path

import yaml
from jsonschema import Draft202012Validator
from yaml.constructor import ConstructorError

DOC_PATH = Path(__file__).parents[1] / "docs" / "openapi.yaml"


class StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, but a mapping that names a key twice is an error (PyYAML keeps the
    last value and says nothing)."""

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node)
            except TypeError:  # an unhashable key: the base constructor refuses it
                continue
            if first is not key_node:
                raise ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"found duplicate key {key!r} (first at line {first.start_mark.line + 1})",
                    key_node.start_mark,
                )
        return super().construct_mapping(node, deep)


DOC = yaml.load(DOC_PATH.read_text(), Loader=StrictLoader)


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
