"""The API fuzzed from its own contract (issue 11): schemathesis reads the OpenAPI document that
a live server serves (GET /edt/api/v1/openapi.json), generates requests from it and checks
every answer with every check it has, through all its phases: the document's examples,
coverage of each schema's edges, random fuzzing, and the stateful phase, which follows the
document's links from POST /v1/jobs and POST /wmla/v1/execs to the job and exec paths. It
acts as two users, alice and bob, so that one's jobs are also checked to be out of the other's
reach. The run must end with no failure.

The server is a real `jupyter server` in a subprocess on its own port, with no GPUs: every
job the fuzzer submits stays QUEUED, so none of its random programs runs and the fuzz costs no
job process. What the contract cannot say (a file on the server, an archive's contents) is
taught to the fuzzer in fuzz_hooks.py.

Replay a failure with the seed the run prints: EDT_FUZZ_SEED=<seed>. EDT_FUZZ_MAX_EXAMPLES sets
the cases per operation (default 25: under a minute on two cores).
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from urllib.error import URLError

import pytest
from waiting import eventually_sync

HERE = Path(__file__).parent  # fuzz_hooks
TESTS = HERE.parent  # multiuser (TokenPerUser), waiting
SEED = int(os.environ.get("EDT_FUZZ_SEED") or random.randrange(2**32))
MAX_EXAMPLES = int(os.environ.get("EDT_FUZZ_MAX_EXAMPLES") or 25)
USERS = ("alice", "bob")  # tokens that multiuser.TokenPerUser names users by
START_TIMEOUT_S = 90.0
FUZZ_TIMEOUT_S = 480.0
STOP_TIMEOUT_S = 20.0

pytestmark = pytest.mark.timeout(START_TIMEOUT_S + FUZZ_TIMEOUT_S + 2 * STOP_TIMEOUT_S + 60)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def with_tests_on_path() -> str:
    """PYTHONPATH for a subprocess that imports multiuser from tests/ or fuzz_hooks from here."""
    return os.pathsep.join(filter(None, [str(HERE), str(TESTS), os.environ.get("PYTHONPATH")]))


def fetch(url: str, user: str = "alice") -> dict:
    request = urllib.request.Request(url, headers={"Authorization": f"token {user}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


class Server:
    """`jupyter server` with only jupyter_edt, no GPUs, and users named by their tokens."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.origin = f"http://127.0.0.1:{self.port}"
        self.api = f"{self.origin}/edt/api"
        self.log = root / "server.log"
        env = {
            **os.environ,
            "JUPYTER_NO_CONFIG": "1",  # no installed extension but ours, no user config
            "JUPYTER_DATA_DIR": str(root / "data"),
            "JUPYTER_RUNTIME_DIR": str(root / "runtime"),
            "PYTHONPATH": with_tests_on_path(),
        }
        command = [
            sys.executable,
            "-m",
            "jupyter_server",
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={self.port}",
            "--ServerApp.port_retries=0",
            "--ServerApp.identity_provider_class=multiuser.TokenPerUser",
            f"--ServerApp.root_dir={root}",
            '--ServerApp.jpserver_extensions={"jupyter_edt": True}',
            "--EDTApp.devices=virtual",
            "--EDTApp.virtual_gpus=0",
            f"--EDTApp.database_url=sqlite:///{root / 'edt.sqlite'}",
            f"--EDTApp.jobs_dir={root / 'jobs'}",
            *(["--allow-root"] if os.getuid() == 0 else []),
        ]
        with self.log.open("wb") as log:
            # its own session: the server and whatever it starts are stopped as one group
            self.process = subprocess.Popen(
                command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip

    def wait_ready(self) -> None:
        def answers() -> bool:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited ({self.process.returncode}):\n{self.tail()}")
            try:
                fetch(f"{self.api}/v1/user")
            except (URLError, ConnectionError):
                return False
            return True

        try:
            eventually_sync(answers, "answered", timeout=START_TIMEOUT_S, interval=0.5)
        except AssertionError as never:
            raise RuntimeError(f"the server {never}:\n{self.tail()}") from None

    def tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:]

    def stop(self) -> None:
        """SIGTERM (Jupyter shuts its extensions down), then SIGKILL to what is left."""
        for sig, wait in ((signal.SIGTERM, STOP_TIMEOUT_S), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.process.wait(wait)
            except subprocess.TimeoutExpired:
                continue
        self.process.wait(5.0)


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    server = Server(tmp_path_factory.mktemp("fuzz-server"))
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def test_the_api_holds_to_its_own_contract(server, tmp_path, capsys):
    document = fetch(f"{server.api}/v1/openapi.json")
    assert document["servers"][0]["url"] == "/edt/api"
    schema = tmp_path / "openapi.json"
    schema.write_text(json.dumps(flattened(document)))
    script = tmp_path / "script.py"  # what a positive case's `script` becomes (fuzz_hooks)
    script.write_text("print('fuzz')\n")
    identities = tmp_path / "identities.json"  # Web Fuzzing Commons auth: one entry a user
    identities.write_text(
        json.dumps(
            {
                "auth": [
                    {"name": u, "fixedHeaders": [{"name": "Authorization", "value": f"token {u}"}]}
                    for u in USERS
                ]
            }
        )
    )
    dropped = tmp_path / "dropped.tsv"
    command = [
        sys.executable, "-m", "schemathesis.cli", "run", str(schema),
        "--origin", server.origin,
        "--auth-wfc", str(identities),
        "--checks", "all",
        "--phases", "examples,coverage,fuzzing,stateful",
        "--max-examples", str(MAX_EXAMPLES),
        "--seed", str(SEED),
        "--workers", "1",
        "--request-timeout", "30",
    ]  # fmt: skip
    env = {
        **os.environ,
        "PYTHONPATH": with_tests_on_path(),
        "SCHEMATHESIS_HOOKS": "fuzz_hooks",
        "EDT_FUZZ_SCRIPT": str(script),
        "EDT_FUZZ_DROPPED": str(dropped),
        "NO_COLOR": "1",
    }
    began = time.monotonic()
    try:
        run = subprocess.run(
            command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            timeout=FUZZ_TIMEOUT_S,
        )  # fmt: skip
        output, code = run.stdout, run.returncode
    except subprocess.TimeoutExpired as err:
        output, code = err.stdout or b"", f"none: stopped after {FUZZ_TIMEOUT_S:.0f} s"
    output = output.decode(errors="replace")
    elapsed = time.monotonic() - began
    lines = dropped.read_text().splitlines() if dropped.exists() else []
    reasons = Counter(line.split("\t")[0] for line in lines)
    summary = next((line for line in output.splitlines() if "generated" in line), "").strip()
    with capsys.disabled():
        print(
            f"\napi fuzz: seed {SEED} (replay: EDT_FUZZ_SEED={SEED}), {MAX_EXAMPLES} examples an "
            f"operation, {elapsed:.0f} s; {summary}; dropped by fuzz_hooks: {dict(reasons)}"
        )
    assert code == 0, (
        f"schemathesis found failures (exit {code}); replay with EDT_FUZZ_SEED={SEED}\n"
        f"{_failures(output)}"
    )
    # the fuzz ran no program: every job it submitted is still queued, or was cancelled
    for user in USERS:
        jobs = fetch(f"{server.api}/v1/jobs", user)["jobs"]
        assert {j["state"] for j in jobs} <= {"QUEUED", "CANCELLED"}
        assert not any(j["devices"] for j in jobs)


def flattened(document: dict) -> dict:
    """The document with each path in full below the origin: the fuzzer joins `--origin`
    with the document's server, not with a path's own (WMLA's paths have theirs)."""
    base = document["servers"][0]["url"]
    paths = {}
    for key, item in document["paths"].items():
        own = item.pop("servers", None)
        paths[(own[0]["url"] if own else base) + key] = item
    return {**document, "servers": [{"url": "/"}], "paths": paths}


def _failures(output: str, limit: int = 12000) -> str:
    """The report's failures section, with long runs of one character cut short: a
    case that uploads an archive of zeros otherwise pushes the failure itself out of the
    message CI keeps."""
    start = output.find("= FAILURES =")
    shown = output[output.rfind("\n", 0, start) + 1 :] if start >= 0 else output
    shown = re.sub(r"((\\x00|.)\2{0,15})\2{16,}", lambda m: f"{m.group(1)}[...]", shown)
    return shown[:limit]
