"""Jobs run as the Unix account of the user who submitted them (issue 13, item 4).

The pure parts (which account, which environment, the refusals) are tested as any user. As
root (CI), the test makes two Unix accounts and runs one real job for each through a real
`DriverRunner` and `LocalLauncher`: each job's driver and worker run as its account, its
directory is that account's alone, and neither can read the other's.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import secrets
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from jobprograms import DEADLINE_S, program
from unixaccounts import accounts, shared_python
from waiting import eventually

from jupyter_edt.compat.plugin import WMLAPlugin
from jupyter_edt.jobs.logs import read_log
from jupyter_edt.jobs.metrics import ReadFrom
from jupyter_edt.jobs.models import Job, JobSpec, JobState
from jupyter_edt.jobs.runner import DriverRunner
from jupyter_edt.launch.accounts import (
    Account,
    NoAccount,
    account_environment,
    check_shared_account,
    current_account,
    job_accounts,
    lookup_account,
)
from jupyter_edt.launch.base import ProcessSpec
from jupyter_edt.launch.forkserver import FORKSERVER_ENV, ForkClient, ForkServer, StatusPipe
from jupyter_edt.launch.local import LocalLauncher, log_paths
from jupyter_edt.scheduling.inventory import Device

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="only root starts processes as others")

GHOST = f"edt-ghost-{secrets.token_hex(3)}"  # an account nobody made

# the service's own secrets: none of them may reach a job that runs as its user's account
SERVICE_ENV = {"JUPYTERHUB_API_TOKEN": "hub-secret", "EDT_SERVICE_SETTING": "service-only"}


# pure parts: any user --------------------------------------------------------------------


def test_an_account_is_looked_up_by_name():
    me = pwd.getpwuid(os.geteuid())
    account = lookup_account(me.pw_name)
    assert (account.uid, account.gid, account.home) == (me.pw_uid, me.pw_gid, Path(me.pw_dir))
    assert account.gid in account.groups
    assert current_account().uid == account.uid


def test_a_user_without_an_account_is_refused_with_a_sentence():
    with pytest.raises(NoAccount) as refused:
        lookup_account(GHOST)
    assert isinstance(refused.value, ValueError)  # the API answers it as a bad request
    assert str(refused.value).startswith(f"No Unix account named {GHOST!r} on this machine")
    assert f"useradd -m {GHOST}" in str(refused.value)


def test_only_root_runs_jobs_as_their_users():
    assert job_accounts(as_root=True) is lookup_account
    assert job_accounts(as_root=False)("alice") is None
    if os.geteuid() == 0:
        assert job_accounts() is lookup_account
    else:
        assert job_accounts()(current_account().name) is None


def test_one_account_for_several_users_only_when_allowed():
    check_shared_account(False, as_root=True)
    check_shared_account(True, as_root=False)
    with pytest.raises(ValueError) as refused:
        check_shared_account(False, as_root=False)
    me = current_account().name
    assert str(refused.value).startswith(f"jupyter edt serve runs as {me!r}, not root")
    assert "EDTService.allow_shared_account = True" in str(refused.value)


def test_an_accounts_environment_keeps_only_what_is_safe():
    account = Account("ann", 1234, 1234, (1234,), Path("/home/ann"), "/bin/bash")
    service = {
        "PATH": "/usr/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "NCCL_SOCKET_IFNAME": "eth0",
        "HOME": "/root",
        "USER": "root",
        **SERVICE_ENV,
    }
    env = account_environment(account, service, {"EDT_JOB_ID": "j1", "HOME": "/elsewhere"})
    assert env == {
        "PATH": "/usr/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "NCCL_SOCKET_IFNAME": "eth0",
        "EDT_JOB_ID": "j1",
        "HOME": "/home/ann",  # the account's identity has the last word
        "USER": "ann",
        "LOGNAME": "ann",
        "SHELL": "/bin/bash",
    }


def test_a_process_started_as_an_account_gets_a_clean_environment(tmp_path, monkeypatch):
    """With the account this test runs as: no root needed, the same environment rules."""
    for name, value in SERVICE_ENV.items():
        monkeypatch.setenv(name, value)
    account = current_account()
    code = "import json, os; print(json.dumps(dict(os.environ)))"
    handle = LocalLauncher().start_sync(
        ProcessSpec(
            job_id="j1",
            name="p",
            argv=[sys.executable, "-c", code],
            cwd=tmp_path,
            log_dir=tmp_path / "logs",
            env={"EDT_JOB_ID": "j1"},
            account=account,
        )
    )
    assert handle.wait_sync(60) == 0
    out, err = log_paths(tmp_path / "logs", "p")
    env = json.loads(out.read_text())
    assert not set(SERVICE_ENV) & set(env)
    assert (env["HOME"], env["USER"], env["EDT_JOB_ID"]) == (str(account.home), account.name, "j1")
    assert out.stat().st_uid == err.stat().st_uid == account.uid


@pytest.mark.asyncio
async def test_a_job_of_a_user_without_an_account_does_not_start(tmp_path):
    runner = DriverRunner(LocalLauncher(), tmp_path / "jobs", accounts=_by_user(lookup_account))
    with pytest.raises(NoAccount, match=f"No Unix account named {GHOST!r}"):
        await runner.start(_job("j-ghost", GHOST, "print('never')"), [_device()])
    assert not (tmp_path / "jobs" / "j-ghost").exists()


# as root: two real accounts ---------------------------------------------------------------


@dataclass(frozen=True)
class Machine:
    """What the root tests share: two accounts, the interpreter they run jobs with, and a
    directory they can reach (pytest's own is root's alone)."""

    alice: Account
    bob: Account
    group: int  # a supplementary group of alice's
    python: str
    base: Path


@pytest.fixture(scope="module")
def machine() -> Iterator[Machine]:
    if os.geteuid() != 0:
        pytest.skip("only root makes Unix accounts")
    tag = secrets.token_hex(3)
    alice, bob, group = f"edt-a{tag}", f"edt-b{tag}", f"edt-g{tag}"
    base = Path(tempfile.mkdtemp(prefix="edt-accounts-"))
    try:
        base.chmod(0o755)
        with accounts([alice, bob], {alice: [group]}):
            yield Machine(
                lookup_account(alice),
                lookup_account(bob),
                grp.getgrnam(group).gr_gid,
                shared_python(base / "venv"),
                base,
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_the_accounts_can_run_the_shared_python(machine: Machine):
    probe = "import os, jupyter_edt, torch; print(os.getuid())"
    out = subprocess.run(
        [machine.python, "-c", probe],
        user=machine.bob.uid,
        group=machine.bob.gid,
        extra_groups=list(machine.bob.groups),
        cwd="/",
        env={"PATH": "/usr/bin:/bin", "HOME": str(machine.bob.home)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(machine.bob.uid)]


def test_the_fork_server_gives_each_account_its_own_processes_only(machine: Machine):
    """Root's requests name the account; another account's requester (a job's driver) gets
    processes of its own account, whatever it asks for."""
    server = ForkServer(machine.python)
    server.start()
    try:
        assert server.wait_ready(120)
        probe = "import os; print(os.getuid(), sorted(os.getgroups()))"
        bob = {"uid": machine.bob.uid, "gid": machine.bob.gid, "groups": list(machine.bob.groups)}
        ask = textwrap.dedent(
            f"""
            import os, sys
            from jupyter_edt.launch.forkserver import ForkClient, StatusPipe
            r, w = os.pipe()
            pid, status = ForkClient({server.name!r}).fork(
                [sys.executable, "-m", "edt_probe"], {{"PYTHONPATH": {str(machine.base)!r}}},
                "/", w, w, account={bob!r})
            os.close(w)
            assert StatusPipe(status).wait(60) == 0
            sys.stdout.write(os.read(r, 4096).decode())
            """
        )
        (machine.base / "edt_probe.py").write_text(probe)
        (machine.base / "edt_probe.py").chmod(0o644)

        def run_as(account: Account | None) -> str:
            ids = {} if account is None else {"user": account.uid, "group": account.gid}
            out = subprocess.run(
                [machine.python, "-c", ask],
                cwd="/",
                env={"PATH": "/usr/bin:/bin"},
                capture_output=True,
                text=True,
                timeout=120,
                **ids,
            )
            assert out.returncode == 0, out.stderr
            return out.stdout.strip()

        assert run_as(None) == f"{machine.bob.uid} {sorted(machine.bob.groups)}"
        alice = machine.alice
        assert run_as(alice) == f"{alice.uid} {sorted(alice.groups)}"
        assert machine.group in alice.groups  # her supplementary groups, too
    finally:
        server.stop()


def test_a_joiner_of_another_account_gets_its_priority_back_from_the_fork_server(
    machine: Machine,
):
    """Lowered while it prepares, a joiner that runs as its user may not raise its priority
    back itself: the (root) fork server that lowered it does, for its own children only."""
    server = ForkServer(machine.python)
    server.start()
    try:
        assert server.wait_ready(120)
        (machine.base / "edt_nice_probe.py").write_text(
            textwrap.dedent(
                """
                import json, os
                from jupyter_edt.runtime.priority import restore_start_priority
                start = os.getpriority(os.PRIO_PROCESS, 0)
                lowered = restore_start_priority()
                print(json.dumps([os.getuid(), start, lowered, os.getpriority(os.PRIO_PROCESS, 0)]))
                """
            )
        )
        r, w = os.pipe()
        bob = machine.bob
        _, status = ForkClient(server.name).fork(
            [machine.python, "-m", "edt_nice_probe"],
            {"PYTHONPATH": str(machine.base), FORKSERVER_ENV: server.name},
            "/",
            w,
            w,
            account={"uid": bob.uid, "gid": bob.gid, "groups": list(bob.groups)},
            nice=10,
        )
        os.close(w)
        assert StatusPipe(status).wait(60) == 0
        ours = os.getpriority(os.PRIO_PROCESS, 0)
        said = json.loads(os.read(r, 4096))
        assert said == [bob.uid, min(19, ours + 10), min(19, ours + 10) - ours, ours]
    finally:
        server.stop()


# What each job's worker records: who it runs as, who its driver runs as, its environment, and
# whether it can read the other job's directory, WMLA's FABRIC_HOME, its user's data and the
# other user's. It waits (bounded) for the other job's directory to exist, so the order in
# which the two jobs start does not matter.
PROBE = """
import json, os, pathlib, time

result = pathlib.Path(os.environ["RESULT_DIR"])
other = pathlib.Path(os.environ["EDT_OTHER_JOB"])
deadline = time.monotonic() + 120
while not other.exists() and time.monotonic() < deadline:
    time.sleep(0.05)

def attempt(read):
    try:
        read()
        return "read"
    except PermissionError:
        return "PermissionError"
    except Exception as err:
        return repr(err)

driver = pathlib.Path(f"/proc/{os.getppid()}/status").read_text().splitlines()
fabric = pathlib.Path(os.environ["FABRIC_HOME"], "libs", "fabric.zip")
seen = {
    "uid": [os.getuid(), os.geteuid()],
    "gid": [os.getgid(), os.getegid()],
    "groups": sorted(os.getgroups()),
    "driver": {
        line.split(":")[0]: [int(i) for i in line.split()[1:3]]
        for line in driver
        if line.startswith(("Uid:", "Gid:"))
    },
    "env": dict(os.environ),
    "list_other": attempt(lambda: os.listdir(other)),
    "open_other": attempt(lambda: (other / "job.json").read_text()),
    "fabric": attempt(fabric.read_bytes),
    "own_data": attempt(lambda: pathlib.Path(os.environ["DATA_DIR"], "data.txt").read_text()),
    "other_data": attempt(lambda: pathlib.Path(os.environ["EDT_OTHER_DATA"]).read_text()),
}
(result / "seen.json").write_text(json.dumps(seen))
print("probed", flush=True)
"""


class Reports:
    """The service's side of `RunnerReports`, recorded."""

    def __init__(self) -> None:
        self.ended: dict[str, tuple[Any, ...]] = {}
        self.metrics: dict[str, list[Mapping[str, Any]]] = {}

    async def job_running(self, job_id: str, reason: str = "") -> None:
        pass

    async def job_formed(self, job_id: str, formed: Mapping[str, Any]) -> None:
        pass

    async def job_elastic(self, job_id: str) -> None:
        pass

    async def job_restarted(self, job_id: str, restart: Mapping[str, Any]) -> None:
        pass

    async def job_lost(self, job_id: str, why: str, log_tail: str = "") -> None:
        self.ended[job_id] = ("lost", why, log_tail)

    async def job_exited(self, job_id: str, succeeded: bool, reason: str) -> None:
        self.ended[job_id] = (succeeded, reason)

    def add_metrics(
        self,
        batches: Mapping[str, Sequence[Mapping[str, Any]]],
        positions: Mapping[str, Mapping[str, int]] | None = None,
    ) -> None:
        for job_id, records in batches.items():
            self.metrics.setdefault(job_id, []).extend(records)

    def read_from(self, job_id: str) -> ReadFrom:
        return ReadFrom()


@root_only
@pytest.mark.asyncio
async def test_each_job_runs_as_its_users_account_and_reads_only_its_users_files(
    machine: Machine, monkeypatch
):
    for name, value in SERVICE_ENV.items():
        monkeypatch.setenv(name, value)
    alice, bob = machine.alice, machine.bob
    data = {who: _private_data(account) for who, account in (("a", alice), ("b", bob))}
    tag = secrets.token_hex(3)
    jobs_dir = machine.base / f"jobs-{tag}"
    runner = DriverRunner(
        LocalLauncher(),
        jobs_dir,
        python=machine.python,
        poll_interval=0.1,
        plugins=[WMLAPlugin(jobs_dir / ".fabric")],
        accounts=_by_user(lookup_account),
    )
    reports = Reports()
    runner.report_to(reports)
    ids = {"a": f"ja-{tag}", "b": f"jb-{tag}"}

    def env(me: str, other: str) -> dict[str, str]:
        return {
            "EDT_OTHER_JOB": str(jobs_dir / ids[other]),
            "EDT_DATA_DIR": str(data[me].parent),
            "EDT_OTHER_DATA": str(data[other]),
        }

    jobs = [
        _job(ids["a"], alice.name, PROBE + program(1), env("a", "b")),  # with metrics
        _job(ids["b"], bob.name, PROBE, env("b", "a")),
    ]
    started = time.monotonic()
    try:
        for job in jobs:
            await runner.start(job, [_device()])
        ended = await eventually(
            lambda: dict(reports.ended), "both jobs ended", until=lambda e: len(e) == 2
        )
    finally:
        for job in jobs:
            await runner.cancel(job)
        await runner.close()
    assert ended == {j.id: (True, "finished") for j in jobs}, ended
    assert time.monotonic() - started < DEADLINE_S

    for job, account in zip(jobs, (alice, bob), strict=True):
        d = runner.job_dir(job.id)
        # the job directory is its account's alone, everything in it included
        root = d.root.stat()
        assert (root.st_mode & 0o777, root.st_uid, root.st_gid) == (0o700, account.uid, account.gid)
        strangers = [p for p in _tree(d.root) if p.lstat().st_uid != account.uid]
        assert not strangers, f"not {account.name}'s: {strangers}"
        # the service still reads what the job wrote: its results and its logs
        seen = json.loads((d.result / "seen.json").read_text())
        assert "probed" in read_log(d.logs, "w0.out").text
        # the driver and its worker ran as the account, with its groups
        assert seen["uid"] == [account.uid] * 2 and seen["gid"] == [account.gid] * 2
        assert seen["driver"] == {"Uid": [account.uid] * 2, "Gid": [account.gid] * 2}
        assert set(seen["groups"]) == set(account.groups)
        # with the account's identity and none of the service's secrets
        assert seen["env"]["HOME"] == str(account.home)
        assert seen["env"]["USER"] == seen["env"]["LOGNAME"] == account.name
        assert not set(SERVICE_ENV) & set(seen["env"])
        # its user's files it reads; the other job's directory and the other user's not
        assert (seen["own_data"], seen["fabric"]) == ("read", "read"), seen
        assert seen["list_other"] == seen["open_other"] == "PermissionError", seen
        assert seen["other_data"] == "PermissionError", seen
    assert (
        machine.group
        in json.loads((runner.job_dir(ids["a"]).result / "seen.json").read_text())["groups"]
    )
    assert reports.metrics.get(ids["a"]), "alice's metrics never reached the service"


@root_only
def test_the_service_follows_no_link_a_users_job_left(machine: Machine):
    """A restarted job's directory has been its user's: a link there to a root file must not
    make the service write to that file, or hand it to the user."""
    alice = machine.alice
    target = machine.base / f"root-only-{secrets.token_hex(3)}"
    target.write_text("root's\n")
    target.chmod(0o600)
    runner = DriverRunner(
        LocalLauncher(), machine.base / "jobs-links", accounts=_by_user(lookup_account)
    )
    job = _job(f"jl-{secrets.token_hex(3)}", alice.name, "print('hi')")
    d = runner.job_dir(job.id)
    runner._prepare(d, job, alice)  # the first start: handed over to alice
    assert d.root.stat().st_uid == alice.uid
    entry = d.code / "main.py"
    entry.unlink()
    entry.symlink_to(target)  # what alice's job could do before a restart
    out, _ = log_paths(d.logs, "driver")
    out.symlink_to(target)
    with pytest.raises(OSError):
        runner._prepare(d, job, alice)  # the code is written again, not through the link
    with pytest.raises(OSError):
        LocalLauncher().start_sync(runner._driver_spec(job, alice))
    assert target.read_text() == "root's\n"
    assert (target.stat().st_uid, target.stat().st_mode & 0o777) == (0, 0o600)


# helpers -----------------------------------------------------------------------------------


def _by_user(lookup):
    return lambda job: lookup(job.user)


def _job(job_id: str, user: str, code: str, env: Mapping[str, str] | None = None) -> Job:
    now = time.time()
    return Job(
        id=job_id,
        user=user,
        name=job_id,
        state=JobState.STARTING,
        reason="",
        spec=JobSpec(max_gpus=1, code=textwrap.dedent(code), env=dict(env or {})),
        min_gpus=1,
        max_gpus=1,
        priority=0,
        devices=("v0",),
        rescaled=None,
        created=now,
        updated=now,
        finished=None,
        elastic=False,
        restarts=0,
    )


def _device() -> Device:
    return Device(id="v0", index=0, node="here", uuid="", name="virtual", virtual=True)


def _private_data(account: Account) -> Path:
    """A file under the account's home that only the account may read."""
    data = account.home / "data"
    data.mkdir(mode=0o700, exist_ok=True)
    (data / "data.txt").write_text(f"{account.name}'s data\n")
    for p in (data, data / "data.txt"):
        os.chown(p, account.uid, account.gid)
    (data / "data.txt").chmod(0o600)
    return data / "data.txt"


def _tree(root: Path) -> list[Path]:
    return [Path(d, n) for d, dirs, files in os.walk(root) for n in (*dirs, *files)]
