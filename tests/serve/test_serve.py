"""`jupyter edt serve` as a real process, identified by a token file (the shared mode without
a Hub): every request needs a token, users reach only their own jobs, an administrator
everyone's, a quota holds a job back with its reason, the notebook client works against the
service directly (EDT_URL + a token), and running jobs survive a restart of the service.
The JupyterHub deployment is tests/hub/."""

from __future__ import annotations

import json
from pathlib import Path

from edtservice import call
from jobprograms import DEADLINE_S, elastic, program
from waiting import eventually_sync

from jupyter_edt.notebook import EDTClient
from jupyter_edt.runtime.jobdir import process_start_time


def test_every_request_needs_a_valid_token(service, tokens):
    status, body, headers = call(service.url, "GET", "edt/api/v1/jobs", None)
    assert status == 401 and "token" in body["message"]
    assert headers["WWW-Authenticate"].startswith("token")
    status, body, _ = call(service.url, "GET", "edt/api/v1/jobs", "not-a-token-of-anyone")
    assert status == 403 and body["message"] == "The token is not valid here."
    status, body, _ = call(service.url, "GET", "edt/api/v1/user", tokens["alice"])
    assert (status, body["name"], body["admin"]) == (200, "alice", False)
    assert call(service.url, "GET", "edt/api/v1/user", tokens["root"])[1]["admin"] is True


def test_the_health_needs_no_token(service):
    """For a service manager or a load balancer, which hold none; bad credentials are not
    read. A method it lacks is 405 naming GET, in JSON as every answer."""
    for token in (None, "not-a-token-of-anyone"):
        assert call(service.url, "GET", "edt/api/health", token)[:2] == (200, {"status": "ok"})
    status, body, headers = call(service.url, "PUT", "edt/api/health", None)
    assert (status, headers["Allow"]) == (405, "GET") and "message" in body


def test_users_reach_only_their_own_jobs_and_an_administrator_everyones(service, tokens):
    alice = EDTClient(service.url, tokens["alice"])
    job = alice.submit(program(1, samples=16), name="alices", max_gpus=1)
    for method, path in [
        ("GET", f"jobs/{job.id}"),
        ("DELETE", f"jobs/{job.id}"),
        ("POST", f"jobs/{job.id}/cancel"),
        ("GET", f"jobs/{job.id}/logs"),
        ("GET", f"jobs/{job.id}/result.zip"),
    ]:
        status, body, _ = call(service.url, method, f"edt/api/v1/{path}", tokens["bob"])
        assert status == 404, (method, path, body)
    status, body, _ = call(service.url, "GET", "edt/api/v1/jobs", tokens["bob"])
    assert job.id not in [j["id"] for j in body["jobs"]]
    status, body, _ = call(service.url, "GET", f"edt/api/v1/jobs/{job.id}", tokens["root"])
    assert status == 200 and body["user"] == "alice"
    done = job.wait(timeout=DEADLINE_S, progress=False)
    assert done.state == "SUCCEEDED", alice.get(job.id).reason
    assert "model" in " ".join(a["path"] for a in done.artifacts())


def test_a_quota_holds_a_job_back_with_its_reason(service, tokens):
    bob = EDTClient(service.url, tokens["bob"])
    first = bob.submit(program(50, delay=0.05), name="first", max_gpus=1)
    second = bob.submit(program(1), name="second", max_gpus=1)
    try:
        eventually_sync(
            lambda: bob.get(second.id).reason.startswith("quota"),
            "bob's second job waiting for his quota",
            timeout=60,
        )
        held = bob.get(second.id)
        assert held.state == "QUEUED" and held.reason == (
            "quota: bob holds 1 of their 1 GPU(s), and this job needs 1"
        )
        assert bob.get(first.id).devices  # the first holds his one GPU
    finally:
        bob.cancel(first.id)
    eventually_sync(
        lambda: bob.get(second.id).state != "QUEUED", "the second job starting", timeout=60
    )
    bob.cancel(second.id)


def test_running_jobs_survive_a_restart_of_the_service(service, tokens):
    alice = EDTClient(service.url, tokens["alice"])
    job = alice.submit(program(6, samples=32, delay=0.02), name="survivor", max_gpus=2)
    eventually_sync(lambda: elastic(alice.get(job.id).data), "the job running elastic", timeout=90)
    driver = (service.root / "jobs" / job.id / "status.json").read_text()
    (warm,) = fork_servers_of(service.process.pid)  # it started the job's processes
    assert service.stop() == 0
    # its fork server went with it; the job's processes (forked by it) did not
    eventually_sync(lambda: process_start_time(warm) is None, "the fork server gone")
    service.start()
    assert len(fork_servers_of(service.process.pid)) == 1
    assert alice.get(job.id).state == "RUNNING"  # re-attached, not restarted
    assert (
        (service.root / "jobs" / job.id / "status.json")
        .read_text()
        .count(str(json.loads(driver)["pid"]))
    )
    done = alice.get(job.id).wait(timeout=DEADLINE_S, progress=False)
    assert done.state == "SUCCEEDED" and done.restarts == 0


def fork_servers_of(pid: int) -> list[int]:
    """The fork servers (warm processes) that the process `pid` started."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if parent == pid and b"jupyter_edt.launch.forkserver" in cmdline:
            found.append(int(proc.name))
    return found
