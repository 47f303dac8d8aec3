"""GET|PATCH /edt/api/v1/admin/config in the embedded mode, on a real Jupyter server (users
named by their tokens; root an administrator): answers as the document says, others refused,
a bad value named. The shared service's, with real jobs and SIGHUP, is
tests/serve/test_live_config.py."""

from __future__ import annotations

import json

import pytest
from apidoc import check
from multiuser import api, as_user
from tornado.httpclient import HTTPClientError

pytestmark = pytest.mark.multi_user


async def refused(jp_fetch, user: str, method: str, body=None) -> tuple[int, dict]:
    with pytest.raises(HTTPClientError) as caught:
        await api(jp_fetch, user, "admin", "config", method=method, body=body)
    return caught.value.code, json.loads(caught.value.response.body)


@pytest.mark.parametrize("edt_config", [{"virtual_gpus": 2, "user_quotas": {"bob": 1}}])
async def test_an_administrator_reads_and_changes_the_live_settings(jp_fetch):
    before = await api(jp_fetch, "root", "admin", "config")
    check("/v1/admin/config", "get", 200, before)
    assert before["config"]["user_quotas"] == {"bob": 1}
    assert before["config"]["admin_users"] == ["root"] and before["changes"] == []
    patch = {"user_quotas": {"bob": None, "alice": 2}, "policy": "priority"}
    after = await api(jp_fetch, "root", "admin", "config", method="PATCH", body=patch)
    check("/v1/admin/config", "patch", 200, after)
    assert after["config"]["user_quotas"] == {"alice": 2}
    assert after["config"]["policy"] == "priority"
    assert [c["user"] for c in after["changes"]] == ["root"]
    me = await jp_fetch("edt", "api", "v1", "user", headers=as_user("alice"))
    assert json.loads(me.body)["quota"]["gpus"] == 2


async def test_others_are_refused_and_a_bad_value_is_named(jp_fetch):
    for method, body in (("GET", None), ("PATCH", {"policy": "priority"})):
        code, answer = await refused(jp_fetch, "alice", method, body)
        assert code == 403 and "administrator" in answer["message"]
        check("/v1/admin/config", method.lower(), 403, answer)
    code, answer = await refused(jp_fetch, "root", "PATCH", {"group_quotas": {"ml": -2}})
    assert (code, answer["field"]) == (400, "group_quotas")
    assert "group_quotas['ml']" in answer["message"]
    check("/v1/admin/config", "patch", 400, answer)
    code, answer = await refused(jp_fetch, "root", "PATCH", "{not json")
    assert (code, answer["field"]) == (400, "body")
