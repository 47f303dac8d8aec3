"""The Python client against a real Jupyter server, and zero-configuration discovery.

The server runs in this process on pytest-jupyter's event loop and the client is synchronous,
so every client call runs in a thread (`asyncio.to_thread`) while the loop serves it. There
are no devices (virtual_gpus=0): jobs stay QUEUED, which is all the REST contract needs.
"""

from __future__ import annotations

import asyncio
import importlib.util
import io
import json
import os
import re
import socket
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch

from jupyter_edt.notebook import (
    BadRequest,
    ConfigurationError,
    EDTClient,
    EDTError,
    Forbidden,
    NoSuchJob,
    ServerUnreachable,
    WaitTimeout,
)
from jupyter_edt.notebook.client import MODEL_PATH, training_env
from jupyter_edt.notebook.discovery import (
    ancestor_pids,
    find_server,
    normalize_url,
    running_servers,
    select_server,
)
from jupyter_edt.notebook.errors import NoSuchArtifact

run = asyncio.to_thread

pytestmark = pytest.mark.multi_user


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- the REST contract through the client ---------------------------------------------------


async def test_submit_get_list_patch_and_cancel(alice):
    job = await run(
        alice.submit,
        code="print('hi')",
        name="mnist",
        max_gpus=2,
        env={"SEED": "3"},
        epochs=5,
        effective_batch_size=64,
        checkpoint_every=0,
        data_dir="/data/mnist",
    )
    assert (job.state, job.name, job.user, job.max_gpus, job.devices) == (
        "QUEUED",
        "mnist",
        "alice",
        2,
        [],
    )
    assert job.spec["code"] == "print('hi')" and job.spec["entrypoint"] == "main.py"
    assert job.spec["env"] == {
        "SEED": "3",
        "EDT_EPOCHS": "5",
        "EDT_EFFECTIVE_BATCH_SIZE": "64",
        "EDT_CHECKPOINT_EVERY": "0",
        "EDT_DATA_DIR": "/data/mnist",
    }
    assert (await run(alice.get, job.id)).data == job.data
    assert [j.id for j in await run(alice.list, "QUEUED")] == [job.id]
    assert await run(alice.list, ["RUNNING", "SUCCEEDED"]) == []

    assert (await run(job.set_priority, 7)).priority == 7
    assert (await run(job.set_max_gpus, 3)).max_gpus == 3
    assert (await run(alice.get, job.id)).priority == 7

    await run(job.cancel)
    assert job.state == "CANCELLED" and job.done and job.finished is not None
    with pytest.raises(Forbidden, match="already finished"):
        await run(job.cancel)
    assert (await run(alice.get, job.id)).state == "CANCELLED"  # a cancelled job stays

    await run(job.delete)
    assert job.state == "CANCELLED"  # the last record
    with pytest.raises(NoSuchJob):
        await run(alice.get, job.id)
    assert await run(alice.list) == []


async def test_a_script_is_read_at_submission(alice, tmp_path):
    script = tmp_path / "train_digits.py"
    script.write_text("print('v1')\n")
    job = await run(alice.submit, script=script, max_gpus=1)
    script.write_text("print('v2')\n")  # later edits do not change the submitted job
    assert job.spec["code"] == "print('v1')\n"
    assert (job.spec["entrypoint"], job.name) == ("train_digits.py", "train_digits")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_gpus": 0}, "max_gpus"),
        ({"max_gpus": 2, "min_gpus": 3}, "min_gpus"),
        ({"priority": 5000}, "priority"),
        ({"name": "x" * 201}, "name"),
        ({"entrypoint": "../evil.py"}, "entrypoint"),
    ],
)
async def test_the_servers_400_names_the_field_and_nothing_is_stored(alice, kwargs, field):
    with pytest.raises(BadRequest) as caught:
        await run(alice.submit, code="pass", **kwargs)
    assert caught.value.field == field and caught.value.status == 400
    assert str(caught.value).startswith(f"{field}: ")
    assert await run(alice.list) == []


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"env": {"LOG_DIR": "/tmp"}}, "env"),
        ({"env": {"1BAD": "x"}}, "env"),
        ({"epochs": 0}, "epochs"),
        ({"effective_batch_size": 2.5}, "effective_batch_size"),
        ({"checkpoint_every": -1}, "checkpoint_every"),
        ({"script": "/no/such/script.py", "code": None}, "script"),
        ({"script": "x.py"}, "code"),  # both code and script
    ],
)
async def test_bad_input_is_refused_before_any_request(alice, kwargs, field):
    with pytest.raises(BadRequest) as caught:
        await run(alice.submit, **{"code": "pass", **kwargs})
    assert caught.value.field == field
    assert await run(alice.list) == []


async def test_an_unknown_or_someone_elses_job_is_no_such_job(alice, server_url):
    with pytest.raises(NoSuchJob, match="No job with id") as caught:
        await run(alice.get, "0123456789ab")
    assert caught.value.job_id == "0123456789ab" and isinstance(caught.value, LookupError)
    bobs = await run(EDTClient(server_url, "bob").submit, code="pass")
    for call in (alice.get, alice.cancel, lambda i: alice.set_priority(i, 1)):
        with pytest.raises(NoSuchJob):
            await run(call, bobs.id)


async def test_an_unreachable_server_names_the_url_and_how_to_configure():
    url = f"http://127.0.0.1:{closed_port()}/"
    client = EDTClient(url, "alice")
    with pytest.raises(ServerUnreachable) as caught:
        await run(client.list)
    message = str(caught.value)
    assert url in message and "EDT_URL" in message and "EDTClient(url=" in message
    assert caught.value.url == url


async def test_a_wrong_token_and_a_server_without_the_extension(server_url):
    with pytest.raises(Forbidden, match="token") as caught:
        await run(EDTClient(server_url, "mallory").list)
    assert caught.value.status == 403
    with pytest.raises(Forbidden, match="No token was given"):
        await run(EDTClient(server_url).list)
    with pytest.raises(ServerUnreachable, match="does not run the jupyter-edt extension"):
        await run(EDTClient(server_url + "elsewhere/", "alice").list)


async def test_wait_times_out_with_a_progress_line_and_returns_at_once_when_done(alice):
    job = await run(alice.submit, code="pass", name="waiter", max_gpus=2, epochs=3)
    out = io.StringIO()
    with pytest.raises(WaitTimeout, match="still QUEUED") as caught:
        await run(lambda: job.wait(timeout=0.3, poll_interval=0.1, stream=out))
    assert isinstance(caught.value, TimeoutError) and caught.value.job is job
    assert out.getvalue().splitlines() == [f"waiter [{job.id}] QUEUED | max GPUs 2 | 0:00:00"]

    await run(job.cancel)
    out = io.StringIO()
    assert (await run(lambda: job.wait(stream=out))) is job
    assert out.getvalue().startswith(f"waiter [{job.id}] CANCELLED | max GPUs 2 |")
    assert "cancelled by alice" in out.getvalue()


async def test_logs_metrics_and_artifacts_of_a_job_that_never_ran(alice):
    job = await run(alice.submit, code="pass")
    assert await run(job.log_names) == [] and await run(job.logs) == ""
    assert await run(lambda: job.metrics(as_frame=False)) == []
    if importlib.util.find_spec("pandas") is None:
        assert await run(job.metrics) == []
        with pytest.raises(EDTError, match="needs pandas"):
            await run(lambda: job.metrics(as_frame=True))
    else:
        assert len(await run(job.metrics)) == 0
    assert await run(job.artifacts) == []
    with pytest.raises(
        NoSuchArtifact, match=re.escape("is QUEUED and has no model/model_epoch_final.pth")
    ):
        await run(job.load_model)
    await run(job.cancel)
    assert list(await run(lambda: list(job.follow_logs(poll_interval=0.01)))) == []


async def test_a_directory_and_extra_files_are_uploaded_as_one_archive(alice, tmp_path, jobs_dir):
    project = tmp_path / "project"
    (project / "pkg").mkdir(parents=True)
    (project / "main.py").write_text("import pkg.model\n")
    (project / "pkg" / "model.py").write_text("X = 1\n")
    (project / "__pycache__").mkdir()
    (project / "__pycache__" / "junk.pyc").write_bytes(b"\0")
    extra = tmp_path / "labels.csv"
    extra.write_text("a,b\n")

    job = await run(alice.submit, directory=project, files=[extra], max_gpus=1)
    assert job.name == "project" and job.spec["archive"] and job.spec["code"] is None
    code = jobs_dir / job.id / "code"
    assert sorted(p.relative_to(code).as_posix() for p in code.rglob("*") if p.is_file()) == [
        "labels.csv",
        "main.py",
        "pkg/model.py",
    ]

    cell = await run(alice.submit, code="print(open('labels.csv').read())", files=[extra])
    code = jobs_dir / cell.id / "code"
    assert (code / "main.py").read_text() == "print(open('labels.csv').read())"
    assert (code / "labels.csv").read_text() == "a,b\n"


async def test_a_bad_upload_names_the_field_and_stores_nothing(alice, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "train.py").write_text("pass\n")
    with pytest.raises(BadRequest) as caught:
        await run(alice.submit, directory=empty)  # its entrypoint main.py is missing
    assert caught.value.field == "entrypoint" and "main.py" in caught.value.message
    with pytest.raises(BadRequest, match=re.escape("two files would be named 'train.py'")):
        await run(alice.submit, code="pass", entrypoint="train.py", files=[empty / "train.py"])
    assert await run(alice.list) == []


async def test_download_and_load_model_read_the_result_directory(alice, tmp_path, jobs_dir):
    job = await run(alice.submit, code="pass", name="digits/v1")
    result = jobs_dir / job.id / "result"
    (result / "model").mkdir(parents=True)
    state = {"weight": torch.arange(6, dtype=torch.float32).reshape(2, 3)}
    torch.save(state, result / MODEL_PATH)  # as the runtime's Trainer saves it
    (result / "metrics.json").write_text(json.dumps({"acc": 0.9}))

    loaded = await run(job.load_model)
    assert torch.equal(loaded["weight"], state["weight"])
    paths = sorted(a["path"] for a in await run(job.artifacts))
    assert paths == ["metrics.json", MODEL_PATH]

    out = await run(job.download, tmp_path / "out")
    assert json.loads((out / "metrics.json").read_text()) == {"acc": 0.9}
    assert torch.equal(torch.load(out / MODEL_PATH)["weight"], state["weight"])
    one = await run(lambda: job.download(tmp_path / "one", path="metrics.json"))
    assert [p.name for p in one.iterdir()] == ["metrics.json"]
    with pytest.raises(NoSuchArtifact, match="no artifact"):
        await run(lambda: job.download(tmp_path / "x", path="nope.bin"))

    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        default = await run(job.download)
    finally:
        os.chdir(cwd)
    assert default == Path("digits_v1-result") and (tmp_path / default / MODEL_PATH).is_file()


def test_the_job_repr_shows_state_and_gpus():
    from jupyter_edt.notebook.client import Job

    data = {
        "id": "abc123",
        "name": "mnist <b>",
        "state": "RUNNING",
        "reason": "workers formed",
        "devices": ["v0", "v1"],
        "max_gpus": 4,
        "min_gpus": 1,
        "priority": 0,
        "created": 0.0,
    }
    job = Job(EDTClient("http://localhost:1/"), data)
    assert repr(job) == (
        "<Job abc123 'mnist <b>': state=RUNNING, GPUs=2 of max 4, priority=0, "
        "reason=workers formed>"
    )
    assert "mnist &lt;b&gt;" in job._repr_html_() and "2 of max 4" in job._repr_html_()


def test_training_env_names():
    assert training_env() == {}
    assert training_env(epochs=1, data_dir=Path("/d")) == {
        "EDT_EPOCHS": "1",
        "EDT_DATA_DIR": "/d",
    }
    with pytest.raises(BadRequest, match="epochs: must be an integer >= 1, got True"):
        training_env(epochs=True)


# -- zero configuration ---------------------------------------------------------------------


def server(pid: int, url: str, token: str = "tok", **extra) -> dict:
    return {"pid": pid, "url": url, "token": token, "port": 8888, **extra}


ONE = server(100, "http://localhost:8888/")
TWO = server(200, "http://localhost:8889/lab/", token="two")


def test_the_environment_wins_over_running_servers():
    env = {"EDT_URL": "edt.example:9000/base", "EDT_TOKEN": "t"}
    found = select_server(env, [ONE, TWO], [200])
    assert (found.url, found.token, found.source) == (
        "http://edt.example:9000/base/",
        "t",
        "$EDT_URL",
    )


def test_the_server_that_started_the_kernel_is_chosen_among_several():
    found = select_server({}, [ONE, TWO], [4242, 200, 1])  # kernel, server, init
    assert (found.url, found.token) == ("http://localhost:8889/lab/", "two")
    assert "pid 200" in found.source
    # a wrapper between server and kernel (conda run): a grandparent counts too
    assert select_server({}, [ONE, TWO], [4242, 999, 100, 1]).url == "http://localhost:8888/"


def test_jupyterhub_and_the_only_server_and_their_tokens():
    hub = {"JUPYTERHUB_SERVICE_URL": "http://hub:8000/user/ann/", "JUPYTERHUB_API_TOKEN": "h"}
    # a hub single-user server has no token of its own: the hub's token authenticates
    tokenless = server(100, "http://0.0.0.0:8888/user/ann/", token="")
    found = select_server(hub, [tokenless], [5, 100])
    assert (found.url, found.token) == ("http://127.0.0.1:8888/user/ann/", "h")
    found = select_server(hub, [ONE, TWO], [5, 1])
    assert (found.url, found.token) == ("http://hub:8000/user/ann/", "h")
    found = select_server({}, [ONE], [5, 1])
    assert (found.url, found.token) == ("http://localhost:8888/", "tok")
    assert "only running" in found.source
    # a token in the environment is used with a discovered URL
    assert select_server({"EDT_TOKEN": "mine"}, [ONE], [5]).token == "mine"


def test_no_server_or_an_ambiguous_choice_says_how_to_configure():
    with pytest.raises(ConfigurationError, match="none is running") as caught:
        select_server({}, [], [5, 1])
    assert "EDTClient(url=" in str(caught.value) and "EDT_URL" in str(caught.value)
    with pytest.raises(ConfigurationError, match="Several Jupyter servers") as caught:
        select_server({}, [ONE, TWO], [5, 1])
    assert "http://localhost:8888/" in str(caught.value)
    # a server on a UNIX socket cannot be reached by urllib: it does not count
    with pytest.raises(ConfigurationError, match="none is running"):
        select_server({}, [server(100, "http+unix://%2Ftmp%2Fs/", sock="/tmp/s")], [100])


def test_runtime_files_of_dead_servers_and_half_written_ones_are_skipped(tmp_path):
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    dead_pid = int(gone.stdout)
    (tmp_path / "jpserver-1.json").write_text(json.dumps(server(os.getpid(), "http://a:1/")))
    (tmp_path / "jpserver-2.json").write_text(json.dumps(server(dead_pid, "http://b:2/")))
    (tmp_path / "jpserver-3.json").write_text("{half")
    (tmp_path / "jpserver-4-open.html").write_text("<html>")
    assert [s["url"] for s in running_servers(tmp_path)] == ["http://a:1/"]
    assert running_servers(tmp_path / "missing") == []


def test_ancestors_start_with_this_process_and_its_parent():
    chain = ancestor_pids()
    assert chain[:2] == [os.getpid(), os.getppid()] and len(set(chain)) == len(chain)
    assert normalize_url("localhost:8888") == "http://localhost:8888/"


async def test_the_server_running_this_process_is_found_from_its_runtime_file(
    jp_serverapp, monkeypatch
):
    """pytest-jupyter's server runs in this process and wrote its jpserver file into
    JUPYTER_RUNTIME_DIR: the ancestor rule finds it (its pid is ours) with its token."""
    for name in ("EDT_URL", "EDT_TOKEN", "JUPYTERHUB_SERVICE_URL", "JUPYTERHUB_API_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    found = find_server()
    assert found.url == jp_serverapp.connection_url and f"pid {os.getpid()}" in found.source
    assert found.token == jp_serverapp.identity_provider.token


def test_tar_of_a_cell_with_files_holds_the_entrypoint_first(tmp_path):
    from jupyter_edt.notebook.transfer import code_archive

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.txt").write_text("x")
    with (
        code_archive(entry=("main.py", b"pass"), files=[tmp_path / "data"]) as f,
        tarfile.open(fileobj=f) as tar,
    ):
        assert tar.getnames() == ["main.py", "data/x.txt"]


TRAINER_PROGRAM = """
import torch
from torch import nn
from torch.utils.data import TensorDataset
from jupyter_edt.runtime import Trainer

def datasets():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(48, 4, generator=g)
    y = (x[:, 0] > 0).long()
    return TensorDataset(x, y), TensorDataset(x[:16], y[:16])

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
trainer = Trainer(model, datasets, nn.functional.cross_entropy,
                  lambda params: torch.optim.SGD(params, lr=0.1))
trainer.fit(2, 8, 2, checkpoint_every=1, micro_batch_size=2)
"""


# its processes start warm, from the server's fork server, as by default
@pytest.mark.parametrize(
    "edt_config", [{"devices": "virtual", "virtual_gpus": 2, "warm_workers": True}]
)
async def test_a_real_training_job_its_progress_metrics_and_model(alice):
    job = await run(alice.submit, code=TRAINER_PROGRAM, name="tiny", max_gpus=2, epochs=2)
    out = io.StringIO()
    await run(lambda: job.wait(timeout=240, poll_interval=0.2, stream=out))
    assert job.state == "SUCCEEDED", job.reason
    last = out.getvalue().splitlines()[-1]
    assert last.startswith(f"tiny [{job.id}] SUCCEEDED | ") and "100% epoch 2/2 · step " in last
    assert "loss " in last and "val_loss " in last

    steps = await run(lambda: job.metrics("step", as_frame=False))
    assert [r["global_step"] for r in steps] == list(range(12))  # 48 samples / 8, 2 epochs
    assert all(isinstance(r["loss"], float) and r["world_size"] == 2 for r in steps)
    epochs = await run(lambda: job.metrics("epoch", as_frame=False))
    assert [r["epoch"] for r in epochs] == [0, 1] and "val_loss" in epochs[0]

    state = await run(job.load_model)
    assert sorted(state) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    model.load_state_dict(state)
    names = await run(job.log_names)
    assert names and (await run(job.logs)).startswith(f"==> {names[0]} <==")
