"""The OpenAPI document (docs/openapi.yaml) matches what the server serves."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft202012Validator
from tornado.httpclient import HTTPClientError

from jupyter_edt.api import API_PREFIX, default_handlers

DOC = yaml.safe_load((Path(__file__).parents[1] / "docs" / "openapi.yaml").read_text())
METHODS = ("get", "post", "put", "patch", "delete")


def template(pattern: str) -> str:
    """`/edt/api/v1/jobs/(?P<job_id>[^/]+)/logs` -> `/jobs/{job_id}/logs`."""
    path = pattern.removeprefix(API_PREFIX)
    path = re.sub(r"\(\?P<(\w+)>[^)]*\)", r"{\1}", path)
    return path.removesuffix("/?")


def served_methods(handler: type) -> set[str]:
    return {
        m
        for m in METHODS
        if getattr(getattr(handler, m), "__module__", "").startswith("jupyter_edt")
    }


def test_every_served_route_and_method_is_documented_and_nothing_more():
    served = {template(p): served_methods(h) for p, h in default_handlers}
    documented = {path: {m for m in item if m in METHODS} for path, item in DOC["paths"].items()}
    assert served == documented


def check(path: str, method: str, status: int, body) -> None:
    """Validate a response body against the document's schema for it."""
    response = DOC["paths"][path][method]["responses"][str(status)]
    if "$ref" in response:
        response = DOC["components"]["responses"][response["$ref"].rsplit("/", 1)[1]]
    schema = response["content"]["application/json"]["schema"]
    Draft202012Validator({**schema, "components": DOC["components"]}).validate(body)


@pytest.fixture
def edt_config():
    return {"devices": "virtual", "virtual_gpus": 0}


async def test_responses_match_their_schemas(jp_fetch):
    async def call(path, *parts, method="GET", body=None, status=200, **kw):
        kwargs = {"method": method, **kw}
        if body is not None:
            kwargs["body"] = json.dumps(body)
        try:
            response = await jp_fetch("edt", "api", "v1", *parts, **kwargs)
            code, data = response.code, json.loads(response.body)
        except HTTPClientError as err:
            code, data = err.code, json.loads(err.response.body)
        assert code == status, data
        check(path, method.lower(), code, data)
        return data

    await call("/cluster", "cluster")
    job = await call("/jobs", "jobs", method="POST", body={"code": "x", "max_gpus": 2}, status=201)
    await call("/jobs", "jobs", method="POST", body={"code": "x"}, status=400)
    await call("/jobs", "jobs")
    await call("/jobs", "jobs", params={"state": "nope"}, status=400)
    await call("/jobs/{job_id}", "jobs", job["id"])
    await call("/jobs/{job_id}", "jobs", "missing", status=404)
    await call("/jobs/{job_id}", "jobs", job["id"], method="PATCH", body={"priority": 2})
    await call("/jobs/{job_id}/metrics", "jobs", job["id"], "metrics")
    await call("/jobs/{job_id}/logs", "jobs", job["id"], "logs")
    await call(
        "/jobs/{job_id}/logs",
        "jobs",
        job["id"],
        "logs",
        params={"name": "driver.stdout", "tail": "x"},
        status=400,
    )
    await call("/jobs/{job_id}", "jobs", job["id"], method="DELETE")
