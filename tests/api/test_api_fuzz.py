"""The API fuzzed from its own contract (issues 11 and 28): schemathesis reads the OpenAPI
document that a live server serves (GET /edt/api/v1/openapi.json), generates requests from it
and checks every answer with every check it has, through all its phases: the document's
examples, coverage of each schema's edges, random fuzzing, and the stateful phase, which
follows the document's links from POST /v1/jobs and POST /wmla/v1/execs to the job and exec
paths. The run must end with no failure, and no operation may be left untested for want of a
caller it admits.

One document describes both modes, so the fuzz runs against both, one after the other: the
embedded server (a real `jupyter server` with the extension) and the shared service (a real
`jupyter edt serve`, callers named by its token file). Each has the same three callers: alice
and bob, who must not reach each other's jobs (schemathesis' `peers`: its object-level
authorization check reads alice's job as bob), and root, an administrator (embedded:
`EDTApp.admin_users`; the service: the token file's `admin`), whom schemathesis calls where
the others are refused (its identities escalate), so that the administrators' operations are
exercised too.

Neither server has GPUs: every job the fuzzer submits stays QUEUED, so none of its random
programs runs and the fuzz costs no job process. What the contract cannot say (a file on the
server, an archive's contents) is taught to the fuzzer in fuzz_hooks.py, which drops no failure.

Replay a failure with the seed the run prints: EDT_FUZZ_SEED=<seed>. EDT_FUZZ_MAX_EXAMPLES sets
the cases per operation (default 25: about a minute a mode on two cores).
"""

from __future__ import annotations

import json
import os
import random
import re
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from urllib.error import URLError

import pytest
from edtservice import ServiceProcess, free_port
from multiuser import ADMINS
from waiting import eventually_sync

HERE = Path(__file__).parent  # fuzz_hooks
TESTS = HERE.parent  # multiuser (TokenPerUser), waiting
SEED = int(os.environ.get("EDT_FUZZ_SEED") or random.randrange(2**32))
MAX_EXAMPLES = int(os.environ.get("EDT_FUZZ_MAX_EXAMPLES") or 25)
#: The fuzzer's callers, in the order it tries them on an operation: alice and bob must not
#: reach each other's jobs (`PEERS`); root is an administrator in both modes.
PEERS = ("alice", "bob")
(ADMIN,) = ADMINS
USERS = (*PEERS, ADMIN)
#: The administrators' operations that need a node: on servers without GPUs, 404 to root.
NEEDS_A_NODE = {
    f"{method} /edt/api/v1/cluster/nodes/{{node}}/drain" for method in ("POST", "DELETE")
}
START_TIMEOUT_S = 90.0
FUZZ_TIMEOUT_S = 480.0
STOP_TIMEOUT_S = 20.0

pytestmark = pytest.mark.timeout(START_TIMEOUT_S + FUZZ_TIMEOUT_S + 2 * STOP_TIMEOUT_S + 60)


def with_tests_on_path() -> str:
    """PYTHONPATH for a subprocess that imports multiuser from tests/ or fuzz_hooks from here."""
    return os.pathsep.join(filter(None, [str(HERE), str(TESTS), os.environ.get("PYTHONPATH")]))


class APIServer:
    """A server of the API the fuzzer calls: where it answers, and each user's token."""

    origin: str
    tokens: dict[str, str]

    @property
    def api(self) -> str:
        return f"{self.origin}/edt/api"

    def fetch(self, path: str, user: str) -> dict:
        """`user`'s GET of `path` below /edt/api, read as JSON."""
        headers = {"Authorization": f"token {self.tokens[user]}"}
        request = urllib.request.Request(f"{self.api}{path}", headers=headers)
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def stop(self) -> None:
        raise NotImplementedError


class JupyterServer(APIServer):
    """The embedded mode: `jupyter server` with only jupyter_edt, no GPUs, and users named by
    their tokens (multiuser.TokenPerUser), root an administrator."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.origin = f"http://127.0.0.1:{self.port}"
        self.tokens = {user: user for user in USERS}
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
            f"--EDTApp.admin_users={ADMIN}",  # a list of one, as traitlets reads a name
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
                self.fetch("/v1/user", PEERS[0])
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


class SharedService(APIServer):
    """The shared mode: `jupyter edt serve` (tests/edtservice.py), no GPUs, its callers in a
    token file (TokenFileAuthenticator), root an administrator there."""

    def __init__(self, root: Path) -> None:
        self.tokens = {user: secrets.token_hex(16) for user in USERS}
        root.mkdir(parents=True, exist_ok=True)
        users = {u: {"tokens": [t], "admin": u in ADMINS} for u, t in self.tokens.items()}
        tokens_file = root / "tokens.json"
        tokens_file.write_text(json.dumps(users))
        tokens_file.chmod(0o600)
        self.process = ServiceProcess(
            root,
            {
                "authenticator_class": "jupyter_edt.serve.auth.TokenFileAuthenticator",
                "devices": "virtual",
                "virtual_gpus": 0,
                "run_as_users": False,
                "allow_shared_account": True,
                "TokenFileAuthenticator.tokens_file": str(tokens_file),
            },
        )
        self.origin = self.process.url.rstrip("/")

    def start(self) -> None:
        self.process.start()

    def stop(self) -> None:
        self.process.stop()


@pytest.fixture(scope="module", params=["embedded", "service"])
def server(request, tmp_path_factory) -> Iterator[APIServer]:
    """Each mode's server in turn (pytest ends one before it starts the next)."""
    root = tmp_path_factory.mktemp(f"fuzz-{request.param}")
    if request.param == "embedded":
        embedded = JupyterServer(root)
        try:
            embedded.wait_ready()
            yield embedded
        finally:
            embedded.stop()
    else:
        service = SharedService(root)
        try:
            service.start()
            yield service
        finally:
            service.stop()


def test_the_api_holds_to_its_own_contract(server, tmp_path, capsys):
    document = server.fetch("/v1/openapi.json", PEERS[0])
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
                    {"name": u, "fixedHeaders": [{"name": "Authorization", "value": f"token {t}"}]}
                    for u, t in server.tokens.items()
                ]
            }
        )
    )
    config = tmp_path / "schemathesis.toml"  # peers are set only here, not on the command line
    config.write_text(f"[auth.wfc]\npath = {json.dumps(str(identities))}\npeers = {list(PEERS)}\n")
    dropped = tmp_path / "dropped.tsv"
    command = [
        sys.executable, "-m", "schemathesis.cli", "--config-file", str(config),
        "run", str(schema),
        "--origin", server.origin,
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
        "EDT_FUZZ_ADMIN": ADMIN,
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
    (tmp_path / "schemathesis.txt").write_text(output)
    elapsed = time.monotonic() - began
    lines = dropped.read_text().splitlines() if dropped.exists() else []
    reasons = Counter(line.split("\t")[0] for line in lines)
    summary = next((line for line in output.splitlines() if "generated" in line), "").strip()
    with capsys.disabled():
        print(
            f"\napi fuzz ({type(server).__name__}): seed {SEED} (replay: EDT_FUZZ_SEED={SEED}), "
            f"{MAX_EXAMPLES} examples an operation, {elapsed:.0f} s; {summary}; "
            f"dropped by fuzz_hooks: {dict(reasons)}"
        )
    assert code == 0, (
        f"schemathesis found failures (exit {code}); replay with EDT_FUZZ_SEED={SEED}\n"
        f"{_failures(output)}"
    )
    # every operation met a caller it admits (the administrator's included), but those that
    # need a node, which a server without GPUs has none of: root gets 404 there, yet
    # schemathesis still counts the others' 403s from before it turned to root
    refused = refused_operations(output)
    assert refused <= NEEDS_A_NODE, _section(output, "Authentication failed")
    # the fuzz ran no program: every job it submitted is still queued, or was cancelled
    for user in USERS:
        jobs = server.fetch("/v1/jobs", user)["jobs"]
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


def refused_operations(output: str) -> set[str]:
    """The operations schemathesis' "Authentication failed" warning lists (only 401 or 403)."""
    start = output.find("Authentication failed")
    if start < 0:
        return set()
    block = output[start : output.find("\n\n\U0001f4a1", start)]
    return {line.strip()[2:] for line in block.splitlines() if line.strip().startswith("- ")}


def _section(output: str, title: str, limit: int = 4000) -> str:
    """The report's block that begins with `title`."""
    start = output.find(title)
    return output[start : start + limit] if start >= 0 else output[-limit:]
