"""What fuzzing the API from its contract (tests/api/test_api_fuzz.py) found in the server, each
fixed behaviour pinned here on a real Jupyter server: the served document, JSON answers for
every path under /edt/api/, 405s that name the allowed methods, integral numbers read as
integers, a missing log as a 404, and cursors of any size; WMLA's roots (/platform/rest/,
/auth/v1/) answer JSON too."""

from __future__ import annotations

import asyncio
import json

import pytest
from apidoc import DOC
from tornado.httpclient import HTTPClientError


async def api(jp_fetch, *path: str, method: str = "GET", body=None, **kw):
    if body is not None:
        kw["body"] = body if isinstance(body, str | bytes) else json.dumps(body)
    response = await jp_fetch("edt", "api", *path, method=method, **kw)
    return json.loads(response.body)


async def refused(jp_fetch, *path: str, **kw) -> tuple[int, dict, HTTPClientError]:
    with pytest.raises(HTTPClientError) as caught:
        await api(jp_fetch, *path, **kw)
    err = caught.value
    assert err.response.headers["Content-Type"].startswith("application/json")
    return err.code, json.loads(err.response.body), err


async def stranger(http_server_client, jp_base_url, path: str, method: str = "GET") -> int:
    """The status a request without credentials gets."""
    body = b"{}" if method in ("POST", "PATCH", "PUT") else None
    with pytest.raises(HTTPClientError) as caught:
        await http_server_client.fetch(f"{jp_base_url}{path}", method=method, body=body)
    return caught.value.code


SPEC = {"code": "print('hi')", "max_gpus": 2}


async def test_the_document_is_served_to_its_callers_under_the_servers_base_url(
    jp_fetch, http_server_client, jp_base_url
):
    served = await api(jp_fetch, "v1", "openapi.json")
    assert served["servers"] == [{**DOC["servers"][0], "url": f"{jp_base_url}edt/api"}]
    # a path with a server of its own (WMLA's) has it under the base URL too
    wmla = served["paths"]["/instances/{sig_id}/applications"]["servers"][0]["url"]
    assert wmla == f"{jp_base_url}platform/rest/conductor/v1"

    def without_servers(document: dict) -> dict:
        paths = {
            p: {k: v for k, v in i.items() if k != "servers"} for p, i in document["paths"].items()
        }
        return {**{k: v for k, v in document.items() if k != "servers"}, "paths": paths}

    assert without_servers(served) == without_servers(DOC)
    assert await stranger(http_server_client, jp_base_url, "edt/api/v1/openapi.json") == 403


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", ("v1", "nope")),
        ("GET", ("v1", "jobs", "0123456789ab", "nope")),
        ("POST", ("v1", "cluster", "x")),
        ("DELETE", ("wmla", "v1", "execs", "x", "y", "z")),
        ("GET", ("v2", "jobs")),
        ("GET", ()),
    ],
)
async def test_a_path_under_the_api_that_names_no_operation_answers_a_json_404(
    jp_fetch, http_server_client, jp_base_url, method, path
):
    body = {} if method == "POST" else None
    code, answer, _ = await refused(jp_fetch, *path, method=method, body=body)
    assert code == 404 and "No API operation at" in answer["message"]
    assert (
        await stranger(http_server_client, jp_base_url, "/".join(("edt/api", *path)), method) == 403
    )


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "platform/rest/deeplearning/v1/nope"),
        ("POST", "platform/rest/deeplearning/v1/execs/x/y/z"),
        ("GET", "platform/rest/conductor/v1/instances"),
        ("GET", "platform/rest"),
        ("GET", "auth/v1/nope"),
        ("DELETE", "auth/v1"),
    ],
)
async def test_a_path_under_wmlas_roots_that_names_no_operation_answers_a_json_404(
    jp_fetch, http_server_client, jp_base_url, method, path
):
    """As under /edt/api/: WMLA's clients parse JSON, never Jupyter's HTML page; a stranger is
    asked for WMLA's Basic credentials."""
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch(path, method=method, body=b"{}" if method == "POST" else None)
    err = caught.value
    assert err.code == 404 and err.response.headers["Content-Type"].startswith("application/json")
    assert "No API operation at" in json.loads(err.response.body)["message"]
    assert await stranger(http_server_client, jp_base_url, path, method) == 401


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("PUT", ("v1", "jobs"), "GET, POST"),
        ("DELETE", ("v1", "cluster"), "GET"),
        ("POST", ("v1", "jobs", "0123456789ab"), "GET, PATCH, DELETE"),
        ("GET", ("v1", "jobs", "0123456789ab", "cancel"), "POST"),
        ("PATCH", ("wmla", "v1", "execs", "x"), "GET, DELETE"),
    ],
)
async def test_a_405_names_the_methods_the_resource_has(jp_fetch, method, path, allowed):
    body = {} if method in ("POST", "PUT", "PATCH") else None
    code, _, err = await refused(jp_fetch, *path, method=method, body=body)
    assert code == 405 and err.response.headers["Allow"] == allowed


async def test_an_integral_number_is_an_integer_as_json_schema_says(jp_fetch):
    job = await api(
        jp_fetch, "v1", "jobs", method="POST",
        body='{"code": "x", "max_gpus": 4.0, "min_gpus": 1e0, "priority": -3.00}',
    )  # fmt: skip
    assert (job["max_gpus"], job["min_gpus"], job["priority"]) == (4, 1, -3)
    assert type(job["max_gpus"]) is int and type(job["spec"]["max_gpus"]) is int
    patched = await api(jp_fetch, "v1", "jobs", job["id"], method="PATCH", body='{"max_gpus": 2e0}')
    assert patched["max_gpus"] == 2
    for bad in ('{"max_gpus": 2.5}', '{"max_gpus": 1e400}', '{"max_gpus": true}'):
        code, answer, _ = await refused(jp_fetch, "v1", "jobs", job["id"], method="PATCH", body=bad)
        assert (code, answer["field"]) == (400, "max_gpus")


async def test_an_unknown_log_is_a_404_naming_it_and_tail_or_offset_is_always_checked(jp_fetch):
    job = await api(jp_fetch, "v1", "jobs", method="POST", body=SPEC)
    logs = ("v1", "jobs", job["id"], "logs")
    code, answer, _ = await refused(jp_fetch, *logs, params={"name": "driver.stdout"})
    assert (code, answer["field"]) == (404, "name") and "driver.stdout" in answer["message"]
    code, answer, _ = await refused(jp_fetch, *logs, params={"tail": "1", "offset": "0"})
    assert (code, answer["field"]) == (400, "tail")
    code, answer, _ = await refused(jp_fetch, *logs, params={"offset": "-1"})
    assert (code, answer["field"]) == (400, "offset")
    assert await api(jp_fetch, *logs, params={"tail": "5"}) == {"logs": []}


async def test_a_metrics_cursor_past_the_largest_id_asks_for_nothing(jp_fetch):
    job = await api(jp_fetch, "v1", "jobs", method="POST", body=SPEC)
    after = str(2**64)
    page = await api(jp_fetch, "v1", "jobs", job["id"], "metrics", params={"after": after})
    assert page == {"metrics": [], "cursor": 2**64}


async def test_an_uploaded_spec_that_is_no_object_is_refused_naming_the_spec_part(jp_fetch):
    boundary = "contract-test"
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="spec"\r\n\r\n[1]\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="c.tar"\r\n\r\n'
        f"x\r\n--{boundary}--\r\n"
    )
    headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
    code, answer, _ = await refused(
        jp_fetch, "v1", "jobs", method="POST", body=body, headers=headers
    )
    assert (code, answer["field"]) == (400, "spec")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "edt/api/v1/jobs"),
        ("POST", "edt/api/v1/jobs"),
        ("GET", "platform/rest/deeplearning/v1/execs"),
        ("POST", "platform/rest/deeplearning/v1/execs"),
    ],
)
async def test_an_error_before_an_uploads_body_is_read_says_the_connection_closes(
    http_server_client, jp_http_port, jp_base_url, method, path
):
    """Tornado closes such a connection after the answer, sent as keep-alive: a proxy that
    keeps connections (JupyterHub's) sent its next request on it and answered that one 503."""
    reader, writer = await asyncio.open_connection("127.0.0.1", jp_http_port)
    try:
        writer.write(
            f"{method} {jp_base_url}{path} HTTP/1.1\r\nHost: 127.0.0.1:{jp_http_port}\r\n"
            "Connection: keep-alive\r\nContent-Length: 0\r\n\r\n".encode()
        )
        await writer.drain()
        head = (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)).decode()
    finally:
        writer.close()
    status, *lines = head.split("\r\n")
    headers = {k.lower(): v for k, _, v in (line.partition(": ") for line in lines if line)}
    assert status.split()[1] in ("401", "403")  # a POST without a token fails Jupyter's XSRF
    assert headers.get("connection") == "close"
