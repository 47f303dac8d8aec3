"""The OpenAPI document (docs/openapi.yaml) matches what the server serves."""

from __future__ import annotations

import io
import json
import re
import tarfile

import pytest
from apidoc import DOC, check
from jsonschema import Draft202012Validator
from tornado.httpclient import HTTPClientError
from tornado.websocket import WebSocketHandler

from jupyter_edt.api import conductor_handlers, default_handlers, logon_handlers
from jupyter_edt.api.wmla import wmla_handlers
from jupyter_edt.serve.front import service_handlers

METHODS = ("get", "post", "put", "patch", "delete")


def template(pattern: str) -> str:
    """`/edt/api/v1/jobs/(?P<job_id>[^/]+)/logs` -> `/edt/api/v1/jobs/{job_id}/logs`: a served
    route as a full path, an alias prefix (the document's `x-path-aliases`) named by the prefix
    it stands for."""
    path = re.sub(r"\(\?P<(\w+)>[^)]*\)", r"{\1}", pattern)
    path = path.removesuffix("/?").replace("\\.", ".")
    for alias, prefix in DOC.get("x-path-aliases", {}).items():
        if path.startswith(f"{alias}/"):
            path = prefix + path.removeprefix(alias)
    return path


def documented_path(path: str, item: dict) -> str:
    """A documented path in full: below its own server, or the document's."""
    return (item.get("servers") or DOC["servers"])[0]["url"] + path


def served_methods(handler: type) -> set[str]:
    return {
        m
        for m in METHODS
        if getattr(getattr(handler, m), "__module__", "").startswith("jupyter_edt")
    }


def test_every_served_route_and_method_is_documented_and_nothing_more():
    """Both modes' routes: the API's, and what only the service serves (its health). A
    WebSocket, which OpenAPI cannot describe, is documented as `x-websocket` on a path that
    declares no operation (a fuzzer would send it plain GETs)."""
    api = default_handlers + wmla_handlers + logon_handlers + conductor_handlers
    served = {
        template(p): {"websocket"} if issubclass(h, WebSocketHandler) else served_methods(h)
        for p, h in api + service_handlers
    }
    documented = {
        documented_path(path, item): {m for m in item if m in METHODS}
        | ({"websocket"} if "x-websocket" in item else set())
        for path, item in DOC["paths"].items()
    }
    assert served == documented


def test_the_examples_match_their_schemas():
    examples = [
        (media["schema"], media["example"])
        for item in DOC["paths"].values()
        for op in item.values()
        if isinstance(op, dict)
        for media in op.get("requestBody", {}).get("content", {}).values()
        if "example" in media
    ]
    assert examples
    for schema, example in examples:
        Draft202012Validator({**schema, "components": DOC["components"]}).validate(example)


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

    await call("/v1/cluster", "cluster")
    job = await call(
        "/v1/jobs", "jobs", method="POST", body={"code": "x", "max_gpus": 2}, status=201
    )
    await call("/v1/jobs", "jobs", method="POST", body={"code": "x"}, status=400)
    await call("/v1/jobs", "jobs")
    await call("/v1/jobs", "jobs", params={"state": "nope"}, status=400)
    await call("/v1/jobs/{job_id}", "jobs", job["id"])
    await call("/v1/jobs/{job_id}", "jobs", "missing", status=404)
    await call("/v1/jobs/{job_id}", "jobs", job["id"], method="PATCH", body={"priority": 2})
    await call("/v1/jobs/{job_id}/metrics", "jobs", job["id"], "metrics")
    await call("/v1/jobs/{job_id}/logs", "jobs", job["id"], "logs")
    await call(
        "/v1/jobs/{job_id}/logs",
        "jobs",
        job["id"],
        "logs",
        params={"name": "driver.stdout", "tail": "x"},
        status=400,
    )
    await call("/v1/jobs/{job_id}/artifacts", "jobs", job["id"], "artifacts")
    await call("/v1/jobs/{job_id}/artifacts", "jobs", "missing", "artifacts", status=404)
    await call(
        "/v1/jobs/{job_id}/artifacts/{path}", "jobs", job["id"], "artifacts", "x.pt", status=404
    )
    await call(
        "/v1/jobs/{job_id}/artifacts/{path}", "jobs", job["id"], "artifacts", "..", status=400
    )
    await call("/v1/jobs/{job_id}/result.zip", "jobs", "missing", "result.zip", status=404)
    zipped = await jp_fetch("edt", "api", "v1", "jobs", job["id"], "result.zip")
    assert (
        zipped.headers["Content-Type"]
        in DOC["paths"]["/v1/jobs/{job_id}/result.zip"]["get"]["responses"]["200"]["content"]
    )
    await call("/v1/jobs/{job_id}", "jobs", job["id"], method="DELETE")


def multipart(spec: dict, archive: bytes) -> dict:
    boundary = "openapi-test-boundary"
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="spec"\r\n\r\n'
        f"{json.dumps(spec)}\r\n"
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="c.tgz"\r\n\r\n'
    ).encode()
    body += archive + f"\r\n--{boundary}--\r\n".encode()
    return {"body": body, "headers": {"Content-Type": f"multipart/form-data; boundary={boundary}"}}


def tar_gz(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


@pytest.mark.parametrize(
    "edt_config", [{"devices": "virtual", "virtual_gpus": 0, "max_upload_bytes": 1024}]
)
async def test_upload_responses_match_their_schemas(jp_fetch):
    async def post(status: int, **kwargs) -> None:
        try:
            response = await jp_fetch("edt", "api", "v1", "jobs", method="POST", **kwargs)
            code, data = response.code, json.loads(response.body)
        except HTTPClientError as err:
            code, data = err.code, json.loads(err.response.body)
        assert code == status, data
        check("/v1/jobs", "post", code, data)

    await post(201, **multipart({"max_gpus": 1}, tar_gz({"main.py": b"print(1)"})))
    await post(400, **multipart({"max_gpus": 1}, b"no archive"))
    await post(413, **multipart({"max_gpus": 1}, bytes(4096)))
