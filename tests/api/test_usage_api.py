"""GET /edt/api/v1/usage on a real multi-user server: who sees whose usage, the 400s naming
the bad parameter, and totals that add up.

The jobs' history is written into the server's own store with the times the sums below are
worked out from (the server has no devices, so nothing of its own runs meanwhile):

    alice a1: 2 GPUs from 1000, running from 1010, ends at 1100     held 200, used 180
    alice a2: 1 GPU from 1050, running from 1060, fails at 1150     held 100, used  90
    bob   b1: 3 GPUs from 1020, running from 1030, 1 GPU from 1080,
              cancelled at 1200                                     held 300, used 270
"""

from __future__ import annotations

import json

import pytest
from apidoc import DOC, check
from jsonschema import Draft202012Validator
from multiuser import api, as_user
from tornado.httpclient import HTTPClientError

from jupyter_edt.jobs.models import JobSpec, JobState

pytestmark = pytest.mark.multi_user


@pytest.fixture
def edt_config() -> dict:
    return {
        "devices": "virtual",
        "virtual_gpus": 0,
        "user_quotas": {"alice": 2},
        "group_quotas": {"vision": 3},
        "user_groups": {"alice": ["vision"], "bob": ["vision", "nlp"]},
    }


async def write_history(jp_serverapp) -> dict[str, str]:
    """The jobs of the module's docstring, in the live server's store (in the server's event
    loop: the store's listeners publish each change to the live feed)."""
    (app,) = jp_serverapp.extension_manager.extension_apps["jupyter_edt"]
    store = app.job_service.store

    def run(user, name, start, gpus, running, end, outcome, resized=()):
        job = store.create_job(user, JobSpec(code="pass", max_gpus=3, name=name), now=start)
        store.set_state(job.id, JobState.STARTING, "given", now=start)
        store.set_devices(job.id, [f"gpu{i}" for i in range(gpus)], "admitted", now=start)
        store.set_state(job.id, JobState.RUNNING, "started", now=running)
        for when, n in resized:
            store.set_devices(job.id, [f"gpu{i}" for i in range(n)], "shrunk", now=when)
        store.set_state(job.id, outcome, "over", now=end)
        return job.id

    return {
        "a1": run("alice", "a1", 1000, 2, 1010, 1100, JobState.SUCCEEDED),
        "a2": run("alice", "a2", 1050, 1, 1060, 1150, JobState.FAILED),
        "b1": run("bob", "b1", 1020, 3, 1030, 1200, JobState.CANCELLED, resized=[(1080, 1)]),
    }


async def usage(jp_fetch, user: str, **params) -> dict:
    answer = await api(jp_fetch, user, "usage", params=params)
    check("/v1/usage", "get", 200, answer)
    return answer


def sums(row: dict) -> tuple[float, float, int]:
    return row["held_gpu_seconds"], row["used_gpu_seconds"], row["jobs"]


def keyed(answer: dict) -> dict:
    return {row["key"]: sums(row) for row in answer["rows"]}


async def test_an_admin_sees_everyones_usage_and_the_rows_add_up(jp_fetch, jp_serverapp):
    history = await write_history(jp_serverapp)
    by_user = await usage(jp_fetch, "root")
    assert by_user["by"] == "user" and by_user["since"] == 0
    assert keyed(by_user) == {"alice": (300, 270, 2), "bob": (300, 270, 1)}
    assert [row["quota"] for row in by_user["rows"]] == [2, None]  # alice first: same, by name
    assert sums(by_user["total"]) == (600, 540, 3)

    by_job = await usage(jp_fetch, "root", by="job")
    assert keyed(by_job) == {
        history["a1"]: (200, 180, 1),
        history["a2"]: (100, 90, 1),
        history["b1"]: (300, 270, 1),
    }
    assert {row["key"]: (row["user"], row["name"]) for row in by_job["rows"]} == {
        history["a1"]: ("alice", "a1"),
        history["a2"]: ("alice", "a2"),
        history["b1"]: ("bob", "b1"),
    }
    for answer in (by_user, by_job):
        for i, field in enumerate(("held_gpu_seconds", "used_gpu_seconds", "jobs")):
            assert sum(sums(row)[i] for row in answer["rows"]) == answer["total"][field]
    assert by_job["total"] == by_user["total"]

    by_group = await usage(jp_fetch, "root", by="group")
    assert keyed(by_group) == {"vision": (600, 540, 3), "nlp": (300, 270, 1)}
    assert {row["key"]: row["quota"] for row in by_group["rows"]} == {"vision": 3, "nlp": None}
    assert by_group["total"] == by_user["total"]  # each job once, though bob is in two groups


async def test_a_range_counts_only_what_was_held_within_it(jp_fetch, jp_serverapp):
    await write_history(jp_serverapp)
    # 1090-1120: a1 2 x 10, a2 1 x 30, b1 1 x 30, all running
    ranged = await usage(jp_fetch, "root", since="1090", until="1120.0")
    assert (ranged["since"], ranged["until"]) == (1090, 1120)
    assert keyed(ranged) == {"alice": (50, 50, 2), "bob": (30, 30, 1)}
    assert (await usage(jp_fetch, "root", since="1200", until="5000"))["rows"] == []
    # since alone: up to now
    assert keyed(await usage(jp_fetch, "root", since="1100")) == {
        "alice": (50, 50, 1),
        "bob": (100, 100, 1),
    }


async def test_a_user_sees_only_their_own_usage_whatever_the_rows(jp_fetch, jp_serverapp):
    history = await write_history(jp_serverapp)
    mine = await usage(jp_fetch, "alice")
    assert keyed(mine) == {"alice": (300, 270, 2)}
    assert mine["rows"][0]["quota"] == 2
    assert sums(mine["total"]) == (300, 270, 2)
    assert set(keyed(await usage(jp_fetch, "alice", by="job"))) == {history["a1"], history["a2"]}
    # her group's row counts her own jobs only: others' usage is not hers to see
    assert keyed(await usage(jp_fetch, "alice", by="group")) == {"vision": (300, 270, 2)}
    assert keyed(await usage(jp_fetch, "bob", by="group")) == {
        "vision": (300, 270, 1),
        "nlp": (300, 270, 1),
    }


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"since": "yesterday"}, "since"),
        ({"since": "nan"}, "since"),
        ({"since": "-1"}, "since"),
        ({"until": "1e999"}, "until"),
        ({"since": "10", "until": "5"}, "until"),
        ({"by": "team"}, "by"),
    ],
)
async def test_a_bad_parameter_is_refused_by_name(jp_fetch, params, field):
    with pytest.raises(HTTPClientError) as caught:
        await api(jp_fetch, "alice", "usage", params=params)
    assert caught.value.code == 400
    body = json.loads(caught.value.response.body)
    assert body["field"] == field
    check("/v1/usage", "get", 400, body)


async def test_a_stranger_is_refused(jp_fetch):
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("edt", "api", "v1", "usage", headers=as_user("mallory"))
    assert caught.value.code == 403


def test_the_documented_example_matches_its_schema():
    media = DOC["paths"]["/v1/usage"]["get"]["responses"]["200"]["content"]["application/json"]
    validator = Draft202012Validator({**media["schema"], "components": DOC["components"]})
    validator.validate(media["example"])
