"""GET /edt/api/v1/allocations on a real multi-user server with real jobs on 2 virtual GPUs,
a scripted two-user scenario: alice's job holds both GPUs; bob's arrives and hers shrinks to
one; bob's finishes and hers grows back; she cancels it. The timeline gives each device its
intervals and each change its cause and what prompted it; an administrator sees every job,
alice and bob each their own and the other's as held by nobody they may name. Bad input is a
400 naming the parameter."""

from __future__ import annotations

import json
import time

import pytest
from apidoc import check
from jobprograms import elastic, program
from multiuser import api, as_user, finished, wait_for
from tornado.httpclient import HTTPClientError

pytestmark = pytest.mark.multi_user


@pytest.fixture
def edt_config() -> dict:
    return {"devices": "virtual", "virtual_gpus": 2, "min_rescale_interval": 0.0}


async def allocations(jp_fetch, user: str, **params) -> dict:
    answer = await api(jp_fetch, user, "allocations", params=params)
    check("/v1/allocations", "get", 200, answer)
    return answer


def by_device(answer: dict) -> dict[str, list[dict]]:
    return {d["id"]: d["intervals"] for d in answer["devices"]}


def how(interval: dict) -> list[tuple]:
    """Each change of an interval: its cause, trigger and the GPUs the job held after it."""
    return [(c["cause"], c["trigger"], c["gpus"]) for c in interval["changes"]]


async def test_a_two_user_grow_and_shrink_as_an_admin_and_as_each_user_sees_it(jp_fetch, tmp_path):
    t0 = time.time()
    a = await api(
        jp_fetch,
        "alice",
        "jobs",
        method="POST",
        body={"name": "a-train", "code": program(epochs=1000, delay=0.004), "max_gpus": 2},
    )
    await wait_for(jp_fetch, "alice", a["id"], elastic, "RUNNING, elastic")
    hold = tmp_path / "hold-b"
    b = await api(
        jp_fetch,
        "bob",
        "jobs",
        method="POST",
        body={"name": "b-eval", "code": program(epochs=1, hold=hold), "max_gpus": 1},
    )
    assert len(b["devices"]) == 1
    assert len((await api(jp_fetch, "alice", "jobs", a["id"]))["devices"]) == 1
    (b_device,) = b["devices"]
    (a_device,) = {"vgpu0", "vgpu1"} - {b_device}

    # while bob's job holds its GPU, alice sees it held, by a job she may not name
    seen = by_device(await allocations(jp_fetch, "alice"))
    held = seen[b_device][-1]
    assert held == {**held, "job_id": None, "user": None, "name": None, "end": None}
    assert how(held) == [("start", "arrival", 1)]
    assert all(c["reason"] is None for c in held["changes"])
    assert seen[a_device][0]["name"] == "a-train" and seen[a_device][0]["end"] is None

    hold.touch()
    assert (await wait_for(jp_fetch, "bob", b["id"], finished, "done"))["state"] == "SUCCEEDED"
    await wait_for(jp_fetch, "alice", a["id"], lambda j: len(j["devices"]) == 2, "grown back")
    await api(jp_fetch, "alice", "jobs", a["id"], "cancel", method="POST", body={})

    answer = await allocations(jp_fetch, "root", since=t0 - 1)
    assert answer["since"] == t0 - 1 and answer["until"] >= answer["since"]
    assert [(d["id"], d["present"]) for d in answer["devices"]] == [
        ("vgpu0", True),
        ("vgpu1", True),
    ]
    rows = by_device(answer)
    # alice's job held a_device throughout: every change of hers is on it
    (whole,) = rows[a_device]
    assert (whole["job_id"], whole["user"], whole["name"]) == (a["id"], "alice", "a-train")
    assert how(whole) == [
        ("start", "arrival", 2),
        ("shrink", "arrival", 1),
        ("grow", "departure", 2),
        ("end", None, 0),
    ]
    assert whole["changes"][1]["reason"] == "shrunk to 1 GPU(s)"
    # b_device: hers until bob's arrived, bob's until it finished, hers again until cancelled
    first, bobs, again = rows[b_device]
    assert [i["job_id"] for i in (first, bobs, again)] == [a["id"], b["id"], a["id"]]
    assert how(first) == [("start", "arrival", 2), ("shrink", "arrival", 1)]
    assert how(bobs) == [("start", "arrival", 1), ("end", None, 0)]
    assert how(again) == [("grow", "departure", 2), ("end", None, 0)]
    assert first["end"] <= bobs["start"] and bobs["end"] <= again["start"]
    assert (bobs["user"], bobs["name"]) == ("bob", "b-eval")
    assert again["end"] == whole["end"] and all(i["end"] is not None for i in rows[b_device])
    assert answer["last_event_id"] > 0

    # each user sees the same bars, the other's without a name
    for user, own, other in (("alice", a["id"], b["id"]), ("bob", b["id"], a["id"])):
        seen = by_device(await allocations(jp_fetch, user, since=t0 - 1))
        for device, intervals in rows.items():
            assert [(i["start"], i["end"], how(i)) for i in seen[device]] == [
                (i["start"], i["end"], how(i)) for i in intervals
            ]
            for mine, full in zip(seen[device], intervals, strict=True):
                if full["job_id"] == own:
                    assert mine == full
                else:
                    assert full["job_id"] == other
                    assert (mine["job_id"], mine["user"], mine["name"]) == (None, None, None)

    # a range after everything ended has every device, and no interval
    later = await allocations(jp_fetch, "root", since=time.time() + 1)
    assert [d["intervals"] for d in later["devices"]] == [[], []]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"since": "-1"}, "since"),
        ({"since": "nan"}, "since"),
        ({"until": "yesterday"}, "until"),
        ({"since": "100", "until": "50"}, "until"),
    ],
)
async def test_bad_input_is_a_400_naming_the_parameter(jp_fetch, params, field):
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("edt", "api", "v1", "allocations", params=params, headers=as_user("bob"))
    assert err.value.code == 400
    body = json.loads(err.value.response.body)
    check("/v1/allocations", "get", 400, body)
    assert body["field"] == field


async def test_without_since_the_range_is_the_hour_before_until(jp_fetch):
    answer = await allocations(jp_fetch, "alice", until="7200")
    assert (answer["since"], answer["until"]) == (3600, 7200)
    assert [d["intervals"] for d in answer["devices"]] == [[], []]
