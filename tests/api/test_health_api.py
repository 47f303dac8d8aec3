"""GET /edt/api/health on the embedded server (issue 28): 200, as on the shared service, so
that one API document holds for both, but behind Jupyter's authentication, as every path of
the extension is; a method it lacks is 405 naming GET. The service's, without a token:
tests/serve/test_serve.py."""

from __future__ import annotations

import asyncio

import requests
from apidoc import check


async def test_the_health_answers_a_caller_jupyter_authenticates(server_url, jp_serverapp):
    url = f"{server_url}edt/api/health"
    token = {"Authorization": f"token {jp_serverapp.identity_provider.token}"}
    ok = await asyncio.to_thread(requests.get, url, headers=token)
    assert ok.status_code == 200
    check("/health", "get", 200, ok.json())
    assert ok.json() == {"status": "ok"}
    assert (await asyncio.to_thread(requests.get, url)).status_code == 403
    bad_basic = await asyncio.to_thread(requests.get, url, auth=("someone", "not-a-token"))
    assert bad_basic.status_code == 401
    put = await asyncio.to_thread(requests.put, url, headers=token)
    assert (put.status_code, put.headers["Allow"]) == (405, "GET")
    check("/health", "get", 401, bad_basic.json())
