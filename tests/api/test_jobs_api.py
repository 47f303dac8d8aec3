"""The jobs REST API and the events WebSocket on a real Jupyter server.

These tests run with no devices (virtual_gpus=0), so every job stays QUEUED: they check the
API's contract (validation, ownership, the change feed) without starting any process.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from multiuser import api, as_user, cancel
from tornado.httpclient import HTTPClientError
from tornado.websocket import websocket_connect

pytestmark = pytest.mark.multi_user


async def error(jp_fetch, user: str, *path: str, **kw) -> tuple[int, dict]:
    with pytest.raises(HTTPClientError) as caught:
        await api(jp_fetch, user, *path, **kw)
    return caught.value.code, json.loads(caught.value.response.body)


SPEC = {"name": "mnist", "code": "print('hi')", "max_gpus": 2}


async def test_submit_then_read_list_patch_and_cancel(jp_fetch):
    job = await api(jp_fetch, "alice", "jobs", method="POST", body=SPEC)
    assert job["state"] == "QUEUED" and job["user"] == "alice" and job["name"] == "mnist"
    assert job["spec"]["code"] == "print('hi')" and job["devices"] == []

    assert await api(jp_fetch, "alice", "jobs", job["id"]) == job
    listed = await api(jp_fetch, "alice", "jobs", params={"state": "QUEUED"})
    assert [j["id"] for j in listed["jobs"]] == [job["id"]]
    assert (await api(jp_fetch, "alice", "jobs", params={"state": "RUNNING"}))["jobs"] == []

    patched = await api(
        jp_fetch, "alice", "jobs", job["id"], method="PATCH", body={"priority": 7, "max_gpus": 3}
    )
    assert (patched["priority"], patched["max_gpus"]) == (7, 3)

    cancelled = await cancel(jp_fetch, "alice", job["id"])
    assert cancelled["state"] == "CANCELLED" and cancelled["finished"] is not None
    code, body = await error(jp_fetch, "alice", "jobs", job["id"], "cancel", method="POST", body="")
    assert code == 403 and "already finished" in body["message"]
    assert (await api(jp_fetch, "alice", "jobs", job["id"]))["state"] == "CANCELLED"  # kept


async def test_delete_removes_a_job_and_a_second_delete_finds_none(
    jp_fetch, jp_http_port, jp_base_url
):
    kept = await api(jp_fetch, "alice", "jobs", method="POST", body=SPEC)
    job = await api(jp_fetch, "alice", "jobs", method="POST", body=SPEC)
    url = f"ws://localhost:{jp_http_port}{jp_base_url}edt/api/v1/events?token=alice&batch=1"
    ws = await websocket_connect(url)
    seen: set[str] = set()
    while seen != {kept["id"], job["id"]}:  # published within COALESCE_S: maybe one by one
        seen |= {e["job_id"] for e in json.loads(await asyncio.wait_for(ws.read_message(), 10))}
    ws.close()
    last = await api(jp_fetch, "alice", "jobs", job["id"], method="DELETE")
    assert last["id"] == job["id"] and last["state"] == "CANCELLED"  # stopped, then removed
    for path in ((job["id"],), (job["id"], "logs")):
        code, answer = await error(jp_fetch, "alice", "jobs", *path)
        assert code == 404 and job["id"] in answer["message"]
    assert [j["id"] for j in (await api(jp_fetch, "alice", "jobs"))["jobs"]] == [kept["id"]]
    # a client that connects now is told of no event of it (it would ask for the job: 404);
    # the delete published everything first, so the first message is the whole backlog
    ws = await websocket_connect(url)
    backlog = json.loads(await ws.read_message())
    ws.close()
    assert [e["job_id"] for e in backlog] == [kept["id"]]
    code, _ = await error(jp_fetch, "alice", "jobs", job["id"], method="DELETE")
    assert code == 404


async def test_users_see_and_change_only_their_own_jobs(jp_fetch):
    mine = await api(jp_fetch, "alice", "jobs", method="POST", body=SPEC)
    theirs = await api(jp_fetch, "bob", "jobs", method="POST", body=SPEC)
    assert [j["id"] for j in (await api(jp_fetch, "alice", "jobs"))["jobs"]] == [mine["id"]]
    for method, body, more in (
        ("GET", None, ()),
        ("PATCH", {"priority": 1}, ()),
        ("DELETE", None, ()),
        ("POST", "", ("cancel",)),
    ):
        code, answer = await error(
            jp_fetch, "alice", "jobs", theirs["id"], *more, method=method, body=body
        )
        assert code == 404 and theirs["id"] in answer["message"]
    code, _ = await error(jp_fetch, "alice", "jobs", params={"user": "bob"})
    assert code == 403
    assert (await api(jp_fetch, "bob", "jobs", theirs["id"]))["state"] == "QUEUED"
    # an administrator sees everyone's
    everyone = await api(jp_fetch, "root", "jobs")
    assert {j["id"] for j in everyone["jobs"]} == {mine["id"], theirs["id"]}
    only_bob = await api(jp_fetch, "root", "jobs", params={"user": "bob"})
    assert [j["id"] for j in only_bob["jobs"]] == [theirs["id"]]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ("{not json", "body"),
        ({"code": "x"}, "max_gpus"),
        ({"code": "x", "max_gpus": -1}, "max_gpus"),
        ({"code": "x", "max_gpus": 2, "min_gpus": 3}, "min_gpus"),
        ({"max_gpus": 2}, "code"),
        ({"code": "x", "max_gpus": 2, "colour": "red"}, "colour"),
        ({"code": "x", "max_gpus": 2, "env": {"LOG_DIR": "/tmp"}}, "env"),
    ],
)
async def test_a_bad_submission_names_the_field_and_stores_nothing(jp_fetch, body, field):
    code, answer = await error(jp_fetch, "alice", "jobs", method="POST", body=body)
    assert code == 400
    assert answer["field"] == field and answer["message"]
    assert (await api(jp_fetch, "alice", "jobs"))["jobs"] == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"max_gpus": 0}, "max_gpus"),
        ({"priority": "high"}, "priority"),
        ({"name": "x"}, "name"),
        ({}, "body"),
    ],
)
async def test_a_bad_patch_names_the_field_and_changes_nothing(jp_fetch, body, field):
    job = await api(jp_fetch, "alice", "jobs", method="POST", body=SPEC)
    code, answer = await error(jp_fetch, "alice", "jobs", job["id"], method="PATCH", body=body)
    assert code == 400 and answer["field"] == field
    assert await api(jp_fetch, "alice", "jobs", job["id"]) == job


async def test_unknown_state_filter_and_unknown_job(jp_fetch):
    code, answer = await error(jp_fetch, "alice", "jobs", params={"state": "DONE"})
    assert code == 400 and answer["field"] == "state"
    code, answer = await error(jp_fetch, "alice", "jobs", "0123456789ab")
    assert code == 404 and "No job with id" in answer["message"]


async def test_requests_without_credentials_are_refused(http_server_client, jp_base_url):
    for path, method, body in (
        ("jobs", "GET", None),
        ("jobs", "POST", json.dumps(SPEC)),
        ("jobs/0123456789ab", "DELETE", None),
        ("jobs/0123456789ab/cancel", "POST", ""),
    ):
        with pytest.raises(HTTPClientError) as caught:
            await http_server_client.fetch(
                f"{jp_base_url}edt/api/v1/{path}", method=method, body=body
            )
        assert caught.value.code in (401, 403)


async def test_events_stream_backlog_then_live_and_resume_from_a_cursor(
    jp_fetch, jp_http_port, jp_base_url
):
    first = await api(jp_fetch, "alice", "jobs", method="POST", body=SPEC)
    await api(jp_fetch, "bob", "jobs", method="POST", body=SPEC)  # not alice's to see
    url = f"ws://localhost:{jp_http_port}{jp_base_url}edt/api/v1/events"
    ws = await websocket_connect(f"{url}?token=alice")
    backlog = json.loads(await ws.read_message())
    assert backlog["job_id"] == first["id"] and backlog["state"] == "QUEUED"
    second = await api(jp_fetch, "alice", "jobs", method="POST", body=SPEC)
    live = json.loads(await ws.read_message())
    assert live["job_id"] == second["id"] and live["id"] > backlog["id"]
    ws.close()

    await cancel(jp_fetch, "alice", first["id"])
    ws = await websocket_connect(f"{url}?token=alice&after={live['id']}")
    resumed = json.loads(await ws.read_message())
    assert (resumed["job_id"], resumed["state"]) == (first["id"], "CANCELLED")
    ws.close()

    ws = await websocket_connect(f"{url}?token=alice&job_id={second['id']}")
    only = json.loads(await ws.read_message())  # not the first job's events before it
    assert (only["job_id"], only["state"]) == (second["id"], "QUEUED")
    await api(jp_fetch, "alice", "jobs", method="POST", body=SPEC)  # another job: not sent
    await api(jp_fetch, "alice", "jobs", second["id"], method="PATCH", body={"priority": 3})
    change = json.loads(await ws.read_message())
    assert (change["job_id"], change["kind"], change["priority"]) == (second["id"], "limits", 3)
    ws.close()


async def test_the_list_says_where_the_feed_goes_on(jp_fetch, jp_http_port, jp_base_url):
    """list-then-watch: the feed after the list's `last_event_id` brings what came since, not
    the events the list already holds."""
    first = await api(jp_fetch, "alice", "jobs", method="POST", body=SPEC)
    listed = await api(jp_fetch, "alice", "jobs")
    assert [j["id"] for j in listed["jobs"]] == [first["id"]] and listed["last_event_id"] > 0
    url = f"ws://localhost:{jp_http_port}{jp_base_url}edt/api/v1/events?token=alice"
    ws = await websocket_connect(f"{url}&after={listed['last_event_id']}")
    second = await api(jp_fetch, "alice", "jobs", method="POST", body=SPEC)
    event = json.loads(await asyncio.wait_for(ws.read_message(), 10))
    ws.close()
    assert (event["job_id"], event["state"]) == (second["id"], "QUEUED")


async def test_events_socket_requires_credentials(http_server_client, jp_base_url):
    """The refusal comes before the WebSocket upgrade: a plain GET shows its status (a
    refused handshake leaves Tornado's WebSocket client waiting instead of reporting it)."""
    url = f"{jp_base_url}edt/api/v1/events"
    with pytest.raises(HTTPClientError) as caught:
        await http_server_client.fetch(url)
    assert caught.value.code == 403
    # with credentials the same request gets past authentication, to the upgrade check
    with pytest.raises(HTTPClientError) as caught:
        await http_server_client.fetch(url, headers=as_user("alice"))
    assert caught.value.code == 400


async def test_a_script_is_copied_at_submission(jp_fetch, tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('version 1')\n")
    job = await api(
        jp_fetch, "alice", "jobs", method="POST", body={"script": str(script), "max_gpus": 1}
    )
    script.write_text("print('version 2')\n")  # edited while the job waits
    copy = tmp_path / "jobs" / job["id"] / "code" / "train.py"
    assert copy.read_text() == "print('version 1')\n"
    for bad in (tmp_path / "missing.py", tmp_path):
        code, answer = await error(
            jp_fetch, "alice", "jobs", method="POST", body={"script": str(bad), "max_gpus": 1}
        )
        assert code == 400 and answer["field"] == "script"
    assert len((await api(jp_fetch, "alice", "jobs"))["jobs"]) == 1


async def test_changing_a_finished_job_is_a_conflict_that_changes_nothing(jp_fetch):
    job = await api(jp_fetch, "alice", "jobs", method="POST", body=SPEC)
    cancelled = await cancel(jp_fetch, "alice", job["id"])
    code, answer = await error(
        jp_fetch, "alice", "jobs", job["id"], method="PATCH", body={"priority": 3}
    )
    assert code == 409 and "has finished (CANCELLED)" in answer["message"]
    assert await api(jp_fetch, "alice", "jobs", job["id"]) == cancelled


async def test_events_in_batches_are_the_same_events(jp_fetch, jp_http_port, jp_base_url):
    """`batch=1`: arrays of the events ready at once, the same events as one by one."""
    jobs = [await api(jp_fetch, "alice", "jobs", method="POST", body=SPEC) for _ in range(3)]
    await cancel(jp_fetch, "alice", jobs[0]["id"])
    url = f"ws://localhost:{jp_http_port}{jp_base_url}edt/api/v1/events?token=alice"
    ws = await websocket_connect(url)
    single = [json.loads(await ws.read_message()) for _ in range(4)]
    ws.close()
    assert all(isinstance(e, dict) for e in single)

    ws = await websocket_connect(f"{url}&batch=1")
    batched = json.loads(await ws.read_message())
    assert batched == single  # the whole backlog in one message
    live = await api(jp_fetch, "alice", "jobs", method="POST", body=SPEC)
    (event,) = json.loads(await ws.read_message())
    assert event["job_id"] == live["id"] and event["id"] > batched[-1]["id"]
    ws.close()


async def test_events_refuse_bad_arguments_naming_them(http_server_client, jp_base_url):
    for query, field in (("batch=yes", "batch"), ("after=x", "after")):
        with pytest.raises(HTTPClientError) as caught:
            await http_server_client.fetch(
                f"{jp_base_url}edt/api/v1/events?{query}", headers=as_user("alice")
            )
        assert caught.value.code == 400
        answer = json.loads(caught.value.response.body)
        assert answer["field"] == field and field in answer["message"]
