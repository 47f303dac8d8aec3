"""WMLA's clients on the embedded server (Jupyter's own token login), written as IBM's tutorial
notebooks write theirs, with `requests`: Basic `user:<server token>` (the user is the
server's owner, `EDTApp.owner`) and, after `/auth/v1/logon`, `X-Auth-Token`. They log on,
submit an exec, follow it in Conductor's application list (two GPUs, one executor a worker),
read its driver's and an executor's output, and POST without an XSRF token; bad credentials get
401 with a Basic challenge, and a cookie alone still needs its XSRF token."""

from __future__ import annotations

import asyncio

import pytest
import requests
from archive_files import make_tar, tar_file
from jobprograms import program
from waiting import eventually

from jupyter_edt.compat.wmla import instance_group_id

ARGS = "--exec-start edtPyTorch --model-dir auth --model-main main.py --numWorker 2 --epochs 1"


@pytest.fixture
def edt_config() -> dict:
    return {"devices": "virtual", "virtual_gpus": 2, "min_rescale_interval": 0.0}


async def run(fn, *args, **kwargs):
    """A blocking `requests` call, off the server's loop (the test shares it)."""
    return await asyncio.to_thread(fn, *args, **kwargs)


def basic_refused(response: requests.Response) -> bool:
    return response.status_code == 401 and response.headers["WWW-Authenticate"].startswith("Basic ")


async def test_a_wmla_client_logs_on_follows_its_exec_and_reads_its_outputs(
    server_url, jp_serverapp, edt_app, tmp_path
):
    token, owner = jp_serverapp.identity_provider.token, edt_app.owner
    auth = (owner, token)
    sc = f"{server_url}platform/rest/conductor/v1"
    dl = f"{server_url}edt/api/wmla/v1"

    # the 1.2.x logon reads r.ok; the CPD one, the access token
    assert (await run(requests.get, f"{sc}/auth/logon", auth=auth)).ok
    logon = (await run(requests.get, f"{server_url}auth/v1/logon", auth=auth)).json()
    assert logon["user"] == owner and logon["expiresIn"] > 3600
    access = {"X-Auth-Token": logon["accessToken"], "Accept": "application/json"}

    # bad credentials: 401 with a Basic challenge, on WMLA's paths and the native API alike
    refused = [
        await run(requests.get, f"{sc}/auth/logon", auth=("someone-else", token)),
        await run(requests.get, f"{sc}/auth/logon", auth=(owner, "not-the-token")),
        await run(requests.get, f"{sc}/auth/logon"),
        await run(requests.get, f"{server_url}auth/v1/logon"),
        await run(requests.get, f"{dl}/execs", auth=("someone-else", token)),
        await run(requests.get, f"{dl}/execs", headers={"X-Auth-Token": "edt1.e30.forged"}),
        await run(requests.get, f"{server_url}auth/v1/logon", headers=access),  # no renewal
    ]
    tokens = edt_app.serverapp.web_app.settings["edt_access_tokens"]
    expired, _ = tokens.issue(owner, {"jupyter": "x", "act": ["read"]}, lifetime_s=-1)
    refused.append(await run(requests.get, f"{dl}/execs", headers={"X-Auth-Token": expired}))
    assert [r.status_code for r in refused] == [401] * len(refused)
    assert [r.headers.get("WWW-Authenticate") for r in refused if not basic_refused(r)] == []
    # and without credentials the native API answers as Jupyter does
    assert (await run(requests.get, f"{server_url}edt/api/v1/jobs")).status_code == 403

    # POST with Basic or an access token needs no XSRF token; with a login cookie it does
    cookies = (
        await run(requests.get, f"{server_url}edt/api/v1/user", params={"token": token})
    ).cookies
    assert cookies, "Jupyter set no login cookie"
    stop = f"{dl}/execs/nope/stop"
    assert (await run(requests.post, stop, auth=auth, cookies=cookies)).status_code == 404
    assert (await run(requests.post, stop, headers=access)).status_code == 404
    assert (await run(requests.post, stop, cookies=cookies)).status_code == 403

    # submit an exec whose 2 workers hold once they started, and follow it in Conductor
    held = tmp_path / "go"
    code = "print('worker up', flush=True)\n" + program(1, samples=32, batch=4, hold=held)
    tar = make_tar([tar_file("auth/main.py", code.encode())])
    files = {"file": ("auth.modelDir.tar", tar)}
    submitted = await run(requests.post, f"{dl}/execs?args={ARGS}", files=files, headers=access)
    assert submitted.status_code == 201, submitted.text
    exec_id = submitted.json()["id"]
    sig = instance_group_id(edt_app.jobs_dir)
    apps_url = f"{sc}/instances/{sig}/applications?state=RUNNING"

    async def running() -> list:
        return (await run(requests.get, apps_url, auth=auth)).json()

    (app,) = await eventually(
        running, "one application with 2 executors",
        until=lambda a: len(a) == 1 and len(a[0]["executors"]) == 2,
    )  # fmt: skip
    assert app["driver"] == {"id": exec_id, "state": "RUNNING"} and app["gpuslots"] == 2
    assert app["gpumemused"] == {"total": 0} and app["gpudevutil"] == {"total": 0}  # virtual
    assert sorted(e["id"] for e in app["executors"]) == ["1", "2"]
    assert app["apprunduration"] >= 0
    # the access token sees the same; another instance group is a 404 naming it
    seen = (await run(requests.get, apps_url, headers=access)).json()
    assert [a["driver"]["id"] for a in seen] == [exec_id]
    other = await run(requests.get, f"{sc}/instances/nope/applications", auth=auth)
    assert other.status_code == 404 and "nope" in other.json()["message"]
    bad = await run(requests.get, f"{sc}/instances/{sig}/applications?state=NOPE", auth=auth)
    assert bad.status_code == 400 and bad.json()["field"] == "state", bad.text
    assert "'NOPE'" in bad.json()["message"]

    logs = f"{sc}/instances/{sig}/applications/{exec_id}"
    octet = {"Accept": "application/octet-stream"}
    driver = await run(requests.get, f"{logs}/logs/stdout/download", auth=auth, headers=octet)
    assert driver.status_code == 200
    await run(requests.get, f"{logs}/logs/stderr/download", auth=auth, headers=octet)
    executor = await eventually(
        lambda: run(requests.get, f"{logs}/1/logs/stdout/download", headers=access),
        "executor 1's output",
        until=lambda r: r.status_code == 200 and b"worker up" in r.content,
        timeout=60,
    )
    assert executor.headers["Content-Type"] == "application/octet-stream"
    missing = await run(requests.get, f"{logs}/9/logs/stdout/download", auth=auth)
    assert missing.status_code == 404 and missing.json()["field"] == "executor_id"

    held.touch()  # let it finish: its processes end with the test
    await eventually(
        lambda: run(requests.get, f"{dl}/execs/{exec_id}", headers=access),
        "the exec finished",
        until=lambda r: r.json()["state"] in ("FINISHED", "FAILED"),
    )
