"""The shared mode under a real JupyterHub: two users' servers forward to one `jupyter edt
serve` on 4 virtual GPUs, identified by their Hub tokens; WMLA's tutorial client goes through a
user's server as well.

One Hub for the module (it takes ~10 s to start); the tests run in order on it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shutil
import subprocess
import tempfile
import time
import zipfile
from pathlib import Path

import pandas as pd
import pytest
import requests
from edtservice import call
from hubdeploy import Hub, have_proxy
from jobprograms import DEADLINE_S, elastic, program
from scrapes import Scrape
from tornado import httpclient, websocket
from unixaccounts import accounts, process_ids, shared_python
from waiting import eventually, eventually_sync
from wmla_program import FILES, model_dir_tar
from wmlaclient import CPD_MAIN, DL, ELOG_COLUMNS, SC, TutorialClient, log_frame

from jupyter_edt.launch.accounts import lookup_account
from jupyter_edt.notebook import EDTClient

pytestmark = pytest.mark.skipif(not have_proxy(), reason="configurable-http-proxy is not installed")

SUFFIX = secrets.token_hex(2)
ALICE, BOB, CAROL = f"alice{SUFFIX}", f"bob{SUFFIX}", f"carol{SUFFIX}"
LONG = program(400, samples=32, delay=0.02)  # runs until cancelled


AS_ROOT = os.geteuid() == 0


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """The Hub, its service and alice's and bob's servers. As root (CI), alice and bob are
    Unix accounts the test makes, and the service runs each job as its user's."""
    settings = {
        "virtual_gpus": 4,
        "min_rescale_interval": 0.0,
        "refresh_interval": 0.5,
        "user_quotas": {BOB: 2},
    }
    with contextlib.ExitStack() as stack:
        if AS_ROOT:
            base = Path(tempfile.mkdtemp(prefix="edt-hub-"))  # pytest's tmp is root's alone
            stack.callback(shutil.rmtree, base, True)
            base.chmod(0o755)
            stack.enter_context(accounts([ALICE, BOB]))
            settings["job_python"] = shared_python(base / "venv")
            settings["jobs_dir"] = str(base / "jobs")
        else:
            base = tmp_path_factory.mktemp("edt-hub")
            settings |= {"run_as_users": False, "allow_shared_account": True}
        settings["data_root"] = str(base / "data" / "{username}")  # WMLA's DLI_DATA_FS
        hub = Hub(
            tmp_path_factory.mktemp("hub"),
            [ALICE, BOB, CAROL],
            admins_group=[CAROL],
            service_settings=settings,
        )
        stack.callback(hub.stop)
        hub.start()
        hub.servers = {user: hub.start_server(user) for user in (ALICE, BOB)}
        hub.tokens = {user: hub.token(user) for user in (ALICE, BOB, CAROL)}
        yield hub


def client(hub: Hub, user: str) -> EDTClient:
    """The notebook client of `user`, through their own Jupyter server."""
    return EDTClient(hub.servers[user], hub.tokens[user])


def service_client(hub: Hub, user: str) -> EDTClient:
    """The client talking to the service itself through the Hub's proxy (EDT_URL)."""
    return EDTClient(f"{hub.url}services/edt/", hub.tokens[user])


def held(hub: Hub) -> dict[str, int]:
    """GPUs held per user, as an administrator sees them."""
    jobs = service_client(hub, CAROL).list()
    out: dict[str, int] = {}
    for job in jobs:
        if not job.done:
            out[job.user] = out.get(job.user, 0) + len(job.devices)
    return out


def test_users_share_the_gpus_fairly_through_their_own_servers(hub):
    alice, bob = client(hub, ALICE), client(hub, BOB)
    me = alice.request("GET", "user")
    assert (me["name"], me["admin"]) == (ALICE, False)
    mine = [alice.submit(LONG, name=f"a{i}", max_gpus=4) for i in range(3)]
    eventually_sync(
        lambda: sum(elastic(j.refresh().data) for j in mine) >= 1, "alice's jobs running"
    )
    theirs = bob.submit(LONG, name="b", max_gpus=4)
    second = None
    try:
        eventually_sync(
            lambda: held(hub),
            "alice and bob holding 2 GPUs each",
            until=lambda h: h.get(ALICE) == 2 and h.get(BOB) == 2,
        )
        # bob's quota is 2: a second job of his that needs 2 more waits, saying why
        second = bob.submit(LONG, name="b2", min_gpus=2, max_gpus=2)
        eventually_sync(
            lambda: second.refresh().reason,
            "the quota reason",
            until=lambda r: r.startswith("quota"),
        )
        assert second.state == "QUEUED"
        assert second.reason == f"quota: {BOB} holds 2 of their 2 GPU(s), and this job needs 2"
    finally:
        for job in [*mine, theirs, second]:
            if job is not None:
                job.cancel()


def test_a_user_reaches_only_their_own_jobs(hub):
    alice = client(hub, ALICE)
    job = alice.submit(program(1, samples=16), name="private", max_gpus=1)
    bob_server, bob_token = hub.servers[BOB], hub.tokens[BOB]
    for method, path in [
        ("GET", f"jobs/{job.id}"),
        ("DELETE", f"jobs/{job.id}"),
        ("POST", f"jobs/{job.id}/cancel"),
        ("GET", f"jobs/{job.id}/result.zip"),
        ("GET", f"jobs/{job.id}/logs"),
    ]:
        status, body, _ = call(bob_server, method, f"edt/api/v1/{path}", bob_token)
        assert status == 404, (method, path, body)
    # nor through alice's server with his own token: a visitor is not forwarded as her
    status, body, _ = call(hub.servers[ALICE], "GET", f"edt/api/v1/jobs/{job.id}", bob_token)
    assert status in (403, 404), body
    # an administrator (the edt-admins group) sees it, talking to the service directly
    assert service_client(hub, CAROL).get(job.id).user == ALICE
    assert service_client(hub, CAROL).request("GET", "user")["admin"] is True
    done = job.wait(timeout=DEADLINE_S, progress=False)
    assert done.state == "SUCCEEDED", done.reason


def test_a_token_without_the_access_scope_is_refused(hub):
    url = f"{hub.url}services/edt/"
    narrow = hub.token(BOB, scopes=[f"read:users:name!user={BOB}"])
    status, body, _ = call(url, "GET", "edt/api/v1/jobs", narrow)
    assert status == 403 and "access:services!service=edt" in body["message"]
    assert call(url, "GET", "edt/api/v1/jobs", None)[0] == 401
    assert call(url, "GET", "edt/api/v1/jobs", "0" * 32)[0] == 403


def test_the_metrics_take_the_hubs_metrics_scope(hub):
    """The token Prometheus scrapes the Hub's /hub/metrics with (a service's, with
    read:metrics and nothing else) reads the service's metrics too; so does an administrator
    (carol, of the edt-admins group), and nobody else."""
    url = f"{hub.url}services/edt/"
    assert call(hub.url, "GET", "hub/metrics", hub.metrics_token)[0] == 200
    status, body, headers = call(url, "GET", "edt/api/v1/metrics", hub.metrics_token)
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    assert Scrape(body.decode()).value("edt_gpus") == 4
    status, body, _ = call(url, "GET", "edt/api/v1/jobs", hub.metrics_token)
    assert status == 403 and "access:services!service=edt" in body["message"]
    status, body, _ = call(url, "GET", "edt/api/v1/metrics", hub.tokens[ALICE])
    assert status == 403 and "read:metrics" in body["message"]
    assert call(url, "GET", "edt/api/v1/metrics", hub.tokens[CAROL])[0] == 200


async def live_metrics(server: str, token: str, job_id: str, since: float) -> dict:
    """The first metrics of the job written after `since`, on the events WebSocket of `server`
    (the feed replays what came before first)."""
    url = f"ws{server[4:]}edt/api/v1/events?after=0&job_id={job_id}"
    request = httpclient.HTTPRequest(url, headers={"Authorization": f"token {token}"})
    ws = await websocket.websocket_connect(request)
    try:
        async with asyncio.timeout(DEADLINE_S):
            while True:
                message = await ws.read_message()
                assert message is not None, "the events socket closed"
                event = json.loads(message)
                if event.get("kind") == "metrics" and any(
                    r["time"] > since for r in event["records"]
                ):
                    return event
    finally:
        ws.close()


@pytest.mark.asyncio
async def test_jobs_outlive_their_users_server(hub):
    alice = client(hub, ALICE)
    job = alice.submit(program(40, samples=32, delay=0.02), name="outlives", max_gpus=1)
    await eventually(lambda: elastic(job.refresh().data), "the job running")
    await asyncio.to_thread(hub.stop_server, ALICE)
    admin = service_client(hub, CAROL)
    assert admin.get(job.id).state == "RUNNING"
    hub.servers[ALICE] = await asyncio.to_thread(hub.start_server, ALICE)
    again = client(hub, ALICE)
    assert again.get(job.id).state in ("RUNNING", "SUCCEEDED")
    # live again: new metrics stream through the new server, from the same processes
    event = await live_metrics(hub.servers[ALICE], hub.tokens[ALICE], job.id, time.time())
    assert event["job_id"] == job.id
    assert again.get(job.id).restarts == 0
    again.cancel(job.id)


@pytest.mark.skipif(not AS_ROOT, reason="only a root service runs jobs as their users")
def test_each_users_jobs_run_as_their_account_and_keep_to_it(hub):
    jobs = {
        user: client(hub, user).submit(program(30, samples=32, delay=0.02), max_gpus=1)
        for user in (ALICE, BOB)
    }
    try:
        for job in jobs.values():
            eventually_sync(lambda job=job: elastic(job.refresh().data), "the jobs running")
        jobs_dir = Path(hub.service.settings["jobs_dir"])
        seen = {}
        for user, job in jobs.items():
            account = lookup_account(user)
            status = json.loads((jobs_dir / job.id / "status.json").read_text())
            assert process_ids(status["pid"]) == (account.uid, account.gid)  # the driver
            directory = (jobs_dir / job.id).stat()
            assert (directory.st_uid, directory.st_mode & 0o777) == (account.uid, 0o700)
            seen[user] = account
        assert seen[ALICE].uid != seen[BOB].uid
        # alice cannot look into bob's job
        peek = subprocess.run(
            ["ls", str(jobs_dir / jobs[BOB].id)],
            user=seen[ALICE].uid,
            group=seen[ALICE].gid,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert peek.returncode != 0 and "Permission denied" in peek.stderr
    finally:
        for job in jobs.values():
            job.cancel()


def test_the_usage_adds_up(hub):
    """After the jobs above: an administrator's usage by user and by job both add up to the
    total, alice's and bob's GPU time is there, and alice sees only her own."""
    admin = service_client(hub, CAROL)
    by_user = admin.request("GET", "usage", params={"by": "user"})
    by_job = admin.request("GET", "usage", params={"by": "job"})
    for report in (by_user, by_job):
        held = sum(row["held_gpu_seconds"] for row in report["rows"])
        assert held == pytest.approx(report["total"]["held_gpu_seconds"], rel=1e-6)
    users = {row["key"]: row for row in by_user["rows"]}
    assert users[ALICE]["held_gpu_seconds"] > 0 and users[BOB]["held_gpu_seconds"] > 0
    assert users[BOB]["quota"] == 2
    mine = client(hub, ALICE).request("GET", "usage", params={"by": "user"})
    assert [row["key"] for row in mine["rows"]] == [ALICE]


def test_a_wmla_tutorial_client_works_through_a_users_server(hub, tmp_path):
    """WMLA's tutorial client pointed at alice's own server, which forwards to the service:
    Basic alice:<her Hub token> on every call (1.2.x) or X-Auth-Token after /auth/v1/logon
    (CPD). It submits with the args pasted raw, follows the exec to RUNNING and in Conductor,
    reads the log into pandas, downloads the result and reads the driver's and an executor's
    output. A wrong user for the token, a bad token and none get 401 asking for Basic."""
    server, token = hub.servers[ALICE], hub.tokens[ALICE]
    dl, sc = server + DL, server + SC
    myauth = (ALICE, token)
    # her server answers through the Hub's proxy (the proxy says 503 while it cannot reach it)
    eventually_sync(
        lambda: (
            requests.get(
                server + "api/status", headers={"Authorization": f"token {token}"}, timeout=60
            ).status_code
            == 200
        ),
        "alice's server answering through the proxy",
    )
    refused = [
        requests.get(sc + "/auth/logon", auth=(BOB, token), timeout=60),
        requests.get(server + "auth/v1/logon", auth=(BOB, token), timeout=60),
        requests.get(sc + "/auth/logon", auth=(ALICE, "0" * 32), timeout=60),
        requests.get(dl + "/execs", auth=(ALICE, hub.tokens[BOB]), timeout=60),
        requests.get(dl + "/execs", headers={"X-Auth-Token": "edt1.e30.forged"}, timeout=60),
        requests.get(sc + "/auth/logon", timeout=60),
        requests.get(dl + "/execs", timeout=60),
    ]
    challenges = [(r.status_code, r.headers.get("WWW-Authenticate", "")) for r in refused]
    assert challenges == [(401, 'Basic realm="jupyter-edt"')] * len(refused)

    ok = requests.get(sc + "/auth/logon", auth=myauth, timeout=60)
    assert ok.ok, (ok.status_code, ok.headers, ok.text)  # the 1.2.x notebooks read r.ok
    logon = requests.get(server + "auth/v1/logon", auth=myauth, timeout=60).json()
    assert logon["user"] == ALICE
    access = logon["accessToken"]
    client = TutorialClient(dl, myauth)
    cpd = TutorialClient(dl, None, {"accept": "application/json", "X-Auth-Token": access})
    assert cpd.get("/conf").ok
    # the service itself (EDT_URL, through the Hub's proxy) takes the same Basic credentials
    direct = requests.get(f"{hub.url}services/edt/{SC}/auth/logon", auth=myauth, timeout=60)
    assert direct.json()["user"] == ALICE
    assert [f["name"] for f in client.get("/execs/frameworks").json()] == ["edtPyTorch"]
    # unknown paths answer a JSON 404 (the service's, or this server's for /auth/v1/)
    for path in ("auth/v1/nope", f"{DL}/nope", f"{SC}/instances"):
        r = requests.get(server + path, auth=myauth, timeout=60)
        assert r.status_code == 404 and "No API operation" in r.json()["message"], (path, r.text)

    # the data under alice's data root (made by the test, readable by her job)
    data = Path(hub.service.settings["data_root"].replace("{username}", ALICE)) / "mnist-data"
    data.mkdir(parents=True)
    tar = tmp_path / "mnist.modelDir.tar"
    tar.write_bytes(model_dir_tar(files={**FILES, "main.py": CPD_MAIN}))
    args = (
        "--exec-start edtPyTorch --cs-datastore-meta type=fs,data_path=mnist-data "
        "--model-dir mnist --edt-options maxWorkers=2 --model-main main.py --epochs 2"
    )
    try:
        r = client.submit(args, tar, "any-instance-group")
        assert r.status_code == 201, r.text
        submitted = r.json()
        exec_id, sig = submitted["id"], submitted["sigId"]
        assert (submitted["args"], submitted["creator"]) == (args, ALICE)
        assert submitted["schedulerUrl"] == dl  # alice's server, where the client called
        assert r.headers["Location"] == f"/user/{ALICE}/{DL}/execs/{exec_id}"

        def record() -> dict:
            r = cpd.get("/execs/" + exec_id)
            r.raise_for_status()
            return r.json()

        eventually_sync(record, "RUNNING", until=lambda e: e["state"] == "RUNNING")
        apps_url = f"{sc}/instances/{sig}/applications?state=RUNNING"
        (app,) = eventually_sync(
            lambda: requests.get(apps_url, auth=myauth, timeout=60).json(),
            "one application on 2 GPUs with 2 executors",
            until=lambda a: len(a) == 1 and a[0]["gpuslots"] == 2 and len(a[0]["executors"]) == 2,
        )
        assert app["driver"] == {"id": exec_id, "state": "RUNNING"}
        assert sorted(e["id"] for e in app["executors"]) == ["1", "2"]
        assert (app["gpumemused"]["total"], app["gpudevutil"]["total"]) == (0, 0)  # virtual

        # the driver's and an executor's output, as Conductor gives them
        logs = f"{sc}/instances/{sig}/applications/{exec_id}"
        octet = {"Accept": "application/octet-stream"}
        for stream in ("stdout", "stderr"):
            driver = requests.get(
                f"{logs}/logs/{stream}/download", auth=myauth, headers=octet, timeout=60
            )
            assert driver.status_code == 200
            assert driver.headers["Content-Type"] == "application/octet-stream"
        executor = eventually_sync(
            lambda: requests.get(
                f"{logs}/2/logs/stdout/download", auth=myauth, headers=octet, timeout=60
            ),
            "executor 2's output",
            until=lambda r: r.status_code == 200 and "environment:" in r.text,
        )
        assert executor.headers["Content-Type"] == "application/octet-stream"
    finally:
        (data / "go").touch()  # the program holds until it exists
    done = eventually_sync(
        record, "done", until=lambda e: e["state"] not in ("SUBMITTED", "RUNNING")
    )
    assert done["state"] == "FINISHED", done

    # the training log into pandas, as the tutorials read it: the ELog columns are numbers
    log = client.get("/execs/" + exec_id + "/log").json()
    frame = log_frame(log)
    assert len(frame) == len(log.splitlines()) > 0
    assert all(pd.api.types.is_numeric_dtype(frame[c]) for c in ELOG_COLUMNS), frame.dtypes
    raw = cpd.get(f"/execs/{exec_id}/log", headers={"accept": "text/plain", "X-Auth-Token": access})
    assert raw.text == log and raw.headers["Content-Type"].startswith("text/plain")
    last = cpd.get(
        f"/scheduler/applications/{exec_id}/executor/1/logs/stdout?lastlines=1000",
        headers={"accept": "text/plain", "X-Auth-Token": access},
    )
    assert last.ok and "environment:" in last.text

    # the result, with the size Content-Disposition announced
    out = tmp_path / "model.zip"
    total, got = client.download(exec_id, out)
    assert total == got == out.stat().st_size
    assert "model/train/model_epoch_final.pth" in zipfile.ZipFile(out).namelist()

    # no credential reached a log: the service's, or the Hub's (with the users' servers')
    logged = hub.service.log_path.read_text(errors="replace") + hub.log_path.read_text(
        errors="replace"
    )
    assert token not in logged and access not in logged
