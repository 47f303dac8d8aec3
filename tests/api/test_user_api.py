"""GET /edt/api/v1/user: the caller's job-owner name, admin flag, groups and quotas, on a real
server."""

from __future__ import annotations

import json

import pytest
from apidoc import check
from multiuser import as_user
from tornado.httpclient import HTTPClientError

pytestmark = pytest.mark.multi_user


async def whoami(jp_fetch, token: str) -> dict:
    response = await jp_fetch("edt", "api", "v1", "user", headers=as_user(token))
    assert response.code == 200
    return json.loads(response.body)


NO_QUOTA = {"gpus": None, "user": None, "groups": {}}


async def test_each_user_gets_their_own_name_and_admin_flag(jp_fetch):
    assert await whoami(jp_fetch, "alice") == {
        "name": "alice",
        "admin": False,
        "groups": [],
        "quota": NO_QUOTA,
    }
    root = await whoami(jp_fetch, "root")
    assert root == {"name": "root", "admin": True, "groups": [], "quota": NO_QUOTA}
    check("/v1/user", "get", 200, root)


@pytest.mark.parametrize(
    "edt_config",
    [
        {
            "virtual_gpus": 4,
            "user_quotas": {"alice": 3, "bob": 1},
            "group_quotas": {"vision": 2, "nlp": 4},
            "user_groups": {"alice": ["vision", "nlp", "no-quota"]},
        }
    ],
)
async def test_a_user_learns_their_groups_and_the_least_of_their_quotas(jp_fetch):
    alice = await whoami(jp_fetch, "alice")
    assert alice["groups"] == ["vision", "nlp", "no-quota"]
    assert alice["quota"] == {"gpus": 2, "user": 3, "groups": {"vision": 2, "nlp": 4}}
    check("/v1/user", "get", 200, alice)
    bob = await whoami(jp_fetch, "bob")
    assert (bob["groups"], bob["quota"]) == ([], {"gpus": 1, "user": 1, "groups": {}})


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
