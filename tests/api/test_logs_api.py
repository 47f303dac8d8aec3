"""GET /edt/api/v1/jobs/{id}/logs?fold=true on a real multi-user server, with a real job that
fails in both of its workers (2 virtual GPUs): the folded text a browser shows for a failed job,
as the notebook's report folds it (`runtime.tracebacks.fold_logs`): the traceback once, headed
by the workers that printed it, the user's frame in full and the framework's folded; the raw
logs stay as they were. Bad input is a 400 naming the parameter."""

from __future__ import annotations

import json
import re

import pytest
from apidoc import check
from jobprograms import SHAPE_BUG
from multiuser import api, finished, wait_for
from tornado.httpclient import HTTPClientError

pytestmark = pytest.mark.multi_user

EXCEPTION = "RuntimeError: mat1 and mat2 shapes cannot be multiplied (8x64 and 32x10)"


@pytest.fixture
def edt_config() -> dict:
    return {"devices": "virtual", "virtual_gpus": 2}


async def logs(jp_fetch, user: str, job_id: str, **params) -> dict:
    answer = await api(jp_fetch, user, "jobs", job_id, "logs", params=params)
    check("/v1/jobs/{job_id}/logs", "get", 200, answer)
    return answer


async def refused(jp_fetch, user: str, job_id: str, **params) -> tuple[int, dict]:
    with pytest.raises(HTTPClientError) as caught:
        await api(jp_fetch, user, "jobs", job_id, "logs", params=params)
    return caught.value.code, json.loads(caught.value.response.body)


async def test_a_job_that_failed_in_two_workers_reads_folded_and_raw(jp_fetch):
    job = await api(
        jp_fetch,
        "alice",
        "jobs",
        method="POST",
        body={"name": "shapes", "code": SHAPE_BUG, "max_gpus": 2},
    )
    job = await wait_for(jp_fetch, "alice", job["id"], finished, "finished")
    assert job["state"] == "FAILED", job
    assert job["reason"].startswith(f"{EXCEPTION} (main.py:11 in forward; workers w0, w1")
    names = (await logs(jp_fetch, "alice", job["id"]))["logs"]
    workers = [n for n in names if re.fullmatch(r"w\d+\.out", n)]
    assert {"w0.out", "w1.out"} <= set(workers), names

    folded = await logs(jp_fetch, "alice", job["id"], fold="true")
    assert folded["logs"] == names
    text = folded["text"]
    # one traceback, headed by every worker that printed it (w0, w1, any worker started again)
    assert text.count("Traceback (most recent call last):") == 1, text
    assert re.search(r"^w0, w1(, w\d+)*: Traceback \(most recent call last\):$", text, re.M), text
    # the user's frame as Python prints it, from the job's code; the framework's folded
    assert '  File "main.py", line 11, in forward\n    return self.fc(x)' in text, text
    assert re.search(r"^  … \d+ frames in [\w, ]*torch[\w, ]* …$", text, re.M), text
    assert f"\n{EXCEPTION}\n" in f"{text}\n"
    assert "site-packages" not in text and "/torch/" not in text
    # what the workers printed besides, under each log's name
    assert "==> w0.out <==\nloading data" in text, text

    # the raw logs are as they were: each worker's traceback whole, torch's frames in it
    raw = await logs(jp_fetch, "alice", job["id"], name="w0.out", tail=200)
    assert raw["text"].count("Traceback (most recent call last):") == 1
    assert raw["text"].count('  File "') > text.count('  File "')
    assert "/torch/" in raw["text"]

    # one log folded: only its worker heads the traceback
    one = await logs(jp_fetch, "alice", job["id"], fold="true", name="w1.out")
    assert one["logs"] == ["w1.out"]
    assert one["text"].startswith("w1: Traceback (most recent call last):\n"), one["text"]
    # fewer lines read from each log's end: the traceback's start is cut off, the output stays
    short = await logs(jp_fetch, "alice", job["id"], fold="1", tail=1)
    assert "Traceback" not in short["text"] and EXCEPTION in short["text"]
    # fold=false is the log names, as without it
    assert await logs(jp_fetch, "alice", job["id"], fold="false") == {"logs": names}

    # bad input, named; another user's job looks absent
    for params, field in [
        ({"fold": "yes"}, "fold"),
        ({"fold": "true", "offset": "0"}, "fold"),
        ({"fold": "true", "tail": "-1"}, "tail"),
    ]:
        code, answer = await refused(jp_fetch, "alice", job["id"], **params)
        assert (code, answer["field"]) == (400, field), answer
    code, answer = await refused(jp_fetch, "alice", job["id"], fold="true", name="w9.out")
    assert (code, answer["field"]) == (404, "name")
    code, _ = await refused(jp_fetch, "bob", job["id"], fold="true")
    assert code == 404
