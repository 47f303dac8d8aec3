"""GET /edt/api/v1/user: the caller's job-owner name and admin flag, on a real server."""

from __future__ import annotations

import json

import pytest
from multiuser import as_user
from tornado.httpclient import HTTPClientError

pytestmark = pytest.mark.multi_user


async def whoami(jp_fetch, token: str) -> dict:
    response = await jp_fetch("edt", "api", "v1", "user", headers=as_user(token))
    assert response.code == 200
    return json.loads(response.body)


async def test_each_user_gets_their_own_name_and_admin_flag(jp_fetch):
    assert await whoami(jp_fetch, "alice") == {"name": "alice", "admin": False}
    assert await whoami(jp_fetch, "root") == {"name": "root", "admin": True}


async def test_the_name_is_the_one_jobs_are_recorded_under(jp_fetch):
    headers = as_user("bob")
    response = await jp_fetch(
        "edt",
        "api",
        "v1",
        "jobs",
        method="POST",
        headers=headers,
        body=json.dumps({"name": "mine", "code": "print(1)", "max_gpus": 1}),
    )
    job = json.loads(response.body)
    assert job["user"] == (await whoami(jp_fetch, "bob"))["name"]


async def test_an_unauthenticated_caller_is_refused(jp_fetch):
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("edt", "api", "v1", "user", headers=as_user("mallory"))
    assert caught.value.code == 403
