"""The remote mode without a Hub: a real Jupyter server whose EDTApp.service_url points at a
real `jupyter edt serve` forwards the API and the events WebSocket there, in its owner's
name (alice), and refuses to act for anyone else."""

from __future__ import annotations

import asyncio
import json
from urllib.parse import quote

import pytest
from edtservice import call
from jobprograms import DEADLINE_S, program
from tornado import httpclient, websocket

from jupyter_edt.notebook import EDTClient

pytestmark = pytest.mark.multi_user  # async tests run on the server's loop (pytest-jupyter)


@pytest.fixture
def edt_config(service, tokens) -> dict:
    return {"service_url": service.url, "service_token": tokens["alice"], "owner": "alice"}


async def run(fn, *args, **kwargs):
    return await asyncio.to_thread(fn, *args, **kwargs)


async def test_the_owners_calls_reach_the_service_in_her_name(server_url, service, tokens):
    mine = EDTClient(server_url, "alice")
    job = await run(mine.submit, program(1, samples=16), name="forwarded", max_gpus=1)
    # the job is the service's, alice's there
    direct = EDTClient(service.url, tokens["alice"])
    assert (await run(direct.get, job.id)).user == "alice"
    # batched, as JupyterLab asks for them: the arguments reach the service
    url = f"ws{server_url[4:]}edt/api/v1/events?after=0&job_id={job.id}&batch=1"
    request = httpclient.HTTPRequest(url, headers={"Authorization": "token alice"})
    ws = await websocket.websocket_connect(request)
    states = []
    try:
        while "SUCCEEDED" not in states:
            message = await asyncio.wait_for(ws.read_message(), DEADLINE_S)
            assert message is not None, "the forwarded events socket closed"
            batch = json.loads(message)
            if isinstance(batch, dict):
                assert batch["kind"] == "keepalive"
                continue
            for event in batch:
                assert event["job_id"] == job.id
                if event["kind"] == "state":
                    states.append(event["state"])
    finally:
        ws.close()
    assert states[:2] == ["QUEUED", "STARTING"]
    done = await run(mine.get, job.id)
    assert "model" in " ".join(a["path"] for a in await run(done.artifacts))
    status, body, headers = await run(
        call, server_url, "GET", f"edt/api/v1/jobs/{job.id}/result.zip", "alice"
    )
    assert status == 200 and body[:2] == b"PK" and headers["Content-Type"] == "application/zip"


async def test_an_uploaded_directory_streams_through(server_url, tmp_path):
    tree = tmp_path / "code"
    tree.mkdir()
    (tree / "main.py").write_text(
        "import os, pathlib\n"
        "pathlib.Path(os.environ['RESULT_DIR'], 'odd name #1 %.txt').write_text('kept')\n"
        "print('hello from the upload')\n"
    )
    mine = EDTClient(server_url, "alice")
    job = await run(mine.submit, directory=tree, name="uploaded", max_gpus=1)
    done = await run(job.wait, DEADLINE_S, False)
    assert done.state == "SUCCEEDED"
    assert "hello from the upload" in await run(done.logs)
    # an artifact's name travels percent-encoded, as it came
    name = quote("odd name #1 %.txt")
    status, body, _ = await run(
        call, server_url, "GET", f"edt/api/v1/jobs/{job.id}/artifacts/{name}", "alice"
    )
    assert (status, body) == (200, b"kept")


async def test_a_visitor_is_not_forwarded_as_the_owner(server_url):
    status, body, _ = await run(call, server_url, "GET", "edt/api/v1/jobs", "bob")
    assert status == 403 and "belongs to alice" in body["message"]


@pytest.mark.parametrize(
    "edt_config", [{"service_url": "http://127.0.0.1:9/", "service_token": "x", "owner": "alice"}]
)
async def test_a_service_that_does_not_answer_is_a_502_naming_it(server_url):
    status, body, _ = await run(call, server_url, "GET", "edt/api/v1/jobs", "alice")
    assert status == 502 and "http://127.0.0.1:9/" in body["message"]
