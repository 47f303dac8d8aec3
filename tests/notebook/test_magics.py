"""The IPython magics in a real InteractiveShell, against a real Jupyter server.

As in test_client.py, anything that reaches the server runs in a thread so that the server's
event loop (this test's loop) can answer. Most tests have no devices, so jobs stay QUEUED; the
`--wait` tests get virtual GPUs and run real jobs.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import textwrap

import pytest
from IPython.core.error import UsageError

from jupyter_edt.notebook import EDTClient, Job, JobFailed
from jupyter_edt.notebook.magics import EDTMagics
from jupyter_edt.notebook.table import JobTable

run = asyncio.to_thread


# users named by token (alice, bob); one test has Jupyter's own single-user token login
pytestmark = pytest.mark.multi_user


@pytest.fixture
def shell(shell):
    shell.extension_manager.load_extension("jupyter_edt")  # what `%load_ext jupyter_edt` does
    return shell


@pytest.fixture
def magics(shell) -> EDTMagics:
    return shell.magics_manager.registry["EDTMagics"]


@pytest.fixture
def connected(shell, magics, server_url):
    """A shell whose magics talk to the live server as alice."""
    magics._client = EDTClient(server_url, "alice")
    return shell


def submit(shell, line: str, cell: str = "print('hi')\n"):
    return run(shell.run_cell_magic, "edt_submit", line, cell)


async def test_load_ext_registers_the_magics_and_edt_connect_checks_the_server(
    shell, magics, server_url
):
    registered = shell.magics_manager.magics
    assert "edt_submit" in registered["cell"]
    assert {"edt_jobs", "edt_cancel", "edt_connect"} <= set(registered["line"])
    client = await run(shell.run_line_magic, "edt_connect", f"{server_url} --token alice")
    assert isinstance(client, EDTClient) and client.url == server_url
    assert magics.client is client
    with pytest.raises(UsageError, match="token"):
        await run(shell.run_line_magic, "edt_connect", f"{server_url} --token mallory")


async def test_every_option_reaches_the_job(connected, alice, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    job = await submit(
        connected,
        "--name digits --max-gpus 4 --min-gpus 2 --priority 5 --kind restart --epochs 3 "
        "--effective-batch-size 64 --checkpoint-every 0 --data-dir data "
        "--env A=1 B='two words' --env C=x=y",
    )
    assert isinstance(job, Job) and job.state == "QUEUED"
    assert (job.name, job.max_gpus, job.min_gpus, job.priority) == ("digits", 4, 2, 5)
    assert job.spec["code"] == "print('hi')\n" and job.spec["kind"] == "restart"
    assert job.spec["env"] == {
        "A": "1",
        "B": "two words",
        "C": "x=y",
        "EDT_EPOCHS": "3",
        "EDT_EFFECTIVE_BATCH_SIZE": "64",
        "EDT_CHECKPOINT_EVERY": "0",
        "EDT_DATA_DIR": str(tmp_path / "data"),
    }
    assert [j.id for j in await run(alice.list)] == [job.id]


async def test_defaults_and_the_notebook_name(connected, monkeypatch):
    monkeypatch.setenv("JPY_SESSION_NAME", "/home/ann/work/Train digits.ipynb")
    job = await submit(connected, "")
    assert (job.name, job.max_gpus, job.min_gpus, job.priority) == ("Train digits", 1, 1, 0)
    assert job.spec["env"] == {} and job.spec["kind"] == "elastic"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("--max-gpus two", "argument --max-gpus: invalid int value: 'two'"),
        ("--max-gpus 0", "--max-gpus must be at least 1, got 0"),
        ("--min-gpus 3 --max-gpus 2", "--min-gpus (3) must not exceed --max-gpus (2)"),
        ("--priority 5000", "--priority must be between -1000 and 1000"),
        ("--epochs 0", "--epochs must be at least 1"),
        ("--effective-batch-size -4", "--effective-batch-size must be at least 1"),
        ("--checkpoint-every -1", "--checkpoint-every must be at least 0"),
        ("--kind spot", "argument --kind: invalid choice: 'spot'"),
        ("--env NOEQUALS", "--env: expected NAME=VALUE"),
        ("--env LOG_DIR=/x", "--env: LOG_DIR is set by jupyter-edt"),
        ("--colour red", "unrecognized arguments: --colour red"),
        ("--files /no/such/file.csv", "--files: /no/such/file.csv does not exist"),
        ("--name 'x", 'No closing quotation in "--name \'x"'),
    ],
)
async def test_a_bad_option_is_a_usage_error_and_submits_nothing(connected, alice, line, message):
    with pytest.raises(UsageError) as caught:
        await submit(connected, line)
    assert message in str(caught.value)
    assert await run(alice.list) == []


async def test_the_servers_refusal_names_the_option(connected, alice):
    with pytest.raises(UsageError, match=r"^--name: must be at most 200 characters"):
        await submit(connected, f"--name {'x' * 201}")
    assert await run(alice.list) == []


@pytest.mark.parametrize(
    ("cell", "expected"),
    [
        ("x = (1,\nprint(x)\n", "SyntaxError"),
        ("!pip install torch\nimport torch\n", "IPython syntax (%magics, !commands)"),
        ("   \n", "The cell is empty"),
    ],
)
async def test_a_cell_that_does_not_compile_submits_nothing(
    connected, alice, capsys, cell, expected
):
    result = connected.run_cell(f"%%edt_submit --max-gpus 2\n{cell}")  # no request is made
    assert isinstance(result.error_in_exec, UsageError)
    err = capsys.readouterr().err
    assert err.startswith("UsageError: ") and expected in err and "Traceback" not in err
    if expected == "SyntaxError":
        assert "does not compile, so nothing was submitted" in err and "line 1" in err
    assert await run(alice.list) == []


async def test_an_unreachable_server_is_a_clear_error_in_the_cell(shell, magics, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/"
    with pytest.raises(UsageError, match="Cannot reach the jupyter-edt server at " + url):
        await run(shell.run_line_magic, "edt_connect", f"{url} --token t")

    magics._client = EDTClient(url, "t")
    result = await run(shell.run_cell, "%%edt_submit\nprint('hi')\n")
    assert isinstance(result.error_in_exec, UsageError)
    err = capsys.readouterr().err
    assert err.startswith(f"UsageError: Cannot reach the jupyter-edt server at {url}")
    assert "EDT_URL" in err and "Traceback" not in err


async def test_without_any_server_the_magic_says_how_to_configure(shell, tmp_path, monkeypatch):
    for name in ("EDT_URL", "EDT_TOKEN", "JUPYTERHUB_SERVICE_URL", "JUPYTERHUB_API_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "empty-runtime"))
    with pytest.raises(UsageError, match="No Jupyter server to send jobs to") as caught:
        await submit(shell, "")
    assert "%edt_connect URL --token TOKEN" in str(caught.value)


async def test_the_magics_use_edt_url_and_edt_token(shell, server_url, alice, monkeypatch):
    monkeypatch.setenv("EDT_URL", server_url)
    monkeypatch.setenv("EDT_TOKEN", "alice")
    job = await submit(shell, "--name from-env")
    assert [j.id for j in await run(alice.list)] == [job.id]


async def test_edt_jobs_lists_a_table_and_edt_cancel_cancels(connected, alice, capsys):
    first = await submit(connected, "--name first")
    second = await submit(connected, "--name second --max-gpus 3")
    table = await run(connected.run_line_magic, "edt_jobs", "")
    assert isinstance(table, JobTable) and [j.id for j in table] == [second.id, first.id]
    lines = repr(table).splitlines()
    head = ["ID", "NAME", "STATE", "GPUS", "KIND", "PRIORITY", "AGE", "REASON"]
    assert lines[0].split() == head
    assert lines[1].split()[:6] == [second.id, "second", "QUEUED", "0/3", "elastic", "0"]
    assert "<table" in table._repr_html_() and second.id in table._repr_html_()

    await run(connected.run_line_magic, "edt_cancel", first.id)
    assert f"Cancelled job {first.id} (first)." in capsys.readouterr().out
    assert (await run(alice.get, first.id)).state == "CANCELLED"
    queued = await run(connected.run_line_magic, "edt_jobs", "--state queued")
    assert [j.id for j in queued] == [second.id]
    with pytest.raises(UsageError, match="No job with id"):
        await run(connected.run_line_magic, "edt_cancel", "0123456789ab")
    with pytest.raises(UsageError, match="already finished"):
        await run(connected.run_line_magic, "edt_cancel", first.id)
    assert repr(JobTable()) == "No jobs."


async def test_files_are_shipped_next_to_the_cell(connected, tmp_path, monkeypatch):
    notebook_dir = tmp_path / "notebooks"
    (notebook_dir / "data").mkdir(parents=True)
    monkeypatch.chdir(notebook_dir)
    (notebook_dir / "helpers.py").write_text("K = 3\n")
    (notebook_dir / "data" / "train.csv").write_text("1,2\n")
    job = await submit(connected, "--files helpers.py data", "import helpers\n")
    code = tmp_path / "jobs" / job.id / "code"
    assert (code / "main.py").read_text() == "import helpers\n"
    assert (code / "helpers.py").read_text() == "K = 3\n"
    assert (code / "data" / "train.csv").read_text() == "1,2\n"


@pytest.mark.parametrize("edt_config", [{"devices": "virtual", "virtual_gpus": 2}])
async def test_wait_shows_a_finished_job_or_raises_the_failure_with_its_folded_logs(
    connected, alice, capsys
):
    ok = await submit(connected, "--wait --name ok", "print('hello from the job')\n")
    assert ok.state == "SUCCEEDED", ok.reason
    assert f"ok [{ok.id}] SUCCEEDED" in capsys.readouterr().out

    failing = textwrap.dedent(
        """
        print("loading data")
        raise ValueError("the data directory is empty")
        """
    )
    result = await run(connected.run_cell, f"%%edt_submit --wait --name broken\n{failing}")
    failed = result.error_in_exec
    assert isinstance(failed, JobFailed) and isinstance(failed, RuntimeError)
    # its message is the job's reason: the exception, the user's line, the workers
    job = failed.job
    assert job.state == "FAILED" and str(failed) == job.reason
    assert re.fullmatch(
        r"ValueError: the data directory is empty \(main\.py:3 in <module>; workers? w0(, w1)?\)",
        job.reason,
    ), job.reason
    # the cell shows its report in place of the client's frames: the reason, the traceback
    # once whatever the number of workers, the user's frame without runpy's, then the output
    shown = capsys.readouterr().out  # the progress lines, then the report
    progress, head, report = shown.partition(f"Job {job.id} (broken) FAILED: {job.reason}\n")
    assert head and progress.rstrip().endswith(f"| {job.reason}"), shown
    shown = head + report
    assert "magics.py" not in shown and "runpy" not in shown
    assert shown.count("ValueError: the data directory is empty") == 2  # the reason, the traceback
    assert ': Traceback (most recent call last):\n  File "main.py", line 3, in <module>\n' in shown
    assert "loading data" in shown and "==> driver.stdout <==" not in shown  # empty: left out
    # the client's own wait says the same
    again, done = await run(alice.get, job.id), await run(alice.get, ok.id)
    with pytest.raises(JobFailed, match=re.escape(job.reason)):
        await run(again.wait, progress=False, check=True)
    assert (await run(done.wait, progress=False, check=True)).state == "SUCCEEDED"


KERNEL_CELLS = [
    "%load_ext jupyter_edt",
    "from jupyter_edt.notebook import EDTClient\nprint(EDTClient().source)",
    "%%edt_submit --name from-a-kernel --max-gpus 2\nprint('hi')",
    "%edt_jobs",
    "%%edt_submit --max-gpus 0\nprint('hi')",
    "job = EDTClient().list()[0]\njob.cancel()\njob.wait(poll_interval=0.05)",
]


@pytest.mark.multi_user(False)  # Jupyter's own token login: a kernel finds it in the runtime file
async def test_a_kernel_started_by_the_server_finds_it_with_zero_configuration(
    jp_serverapp, http_server, monkeypatch
):
    """A real ipykernel started by the server's kernel manager: its parent process is the
    server, whose runtime file gives the URL and token; nothing is configured."""
    for name in ("EDT_URL", "EDT_TOKEN", "JUPYTERHUB_SERVICE_URL", "JUPYTERHUB_API_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    manager = jp_serverapp.kernel_manager
    kernel_id = await manager.start_kernel(kernel_name="python3")
    client = manager.get_kernel(kernel_id).client()
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=60)
        outputs = []
        for cell in KERNEL_CELLS:
            seen: list[dict] = []
            await client.execute_interactive(
                cell, timeout=60, output_hook=lambda msg, seen=seen: seen.append(msg)
            )
            outputs.append(seen)
    finally:
        client.stop_channels()
        await manager.shutdown_kernel(kernel_id, now=True)

    def text(msgs: list[dict], kind: str) -> str:
        found = []
        for msg in msgs:
            content = msg["content"]
            if msg["msg_type"] == "stream" and kind == "stream":
                found.append(content["text"])
            elif msg["msg_type"] in ("execute_result", "display_data") and kind in content.get(
                "data", {}
            ):
                found.append(content["data"][kind])
        return "".join(found)

    assert text(outputs[1], "stream") == f"the Jupyter server (pid {os.getpid()})\n"
    job_repr = text(outputs[2], "text/plain")
    assert (
        job_repr.startswith("<Job ")
        and "'from-a-kernel': state=QUEUED, GPUs=0 of max 2" in job_repr
    )
    assert "from-a-kernel" in text(outputs[2], "text/html")
    assert "from-a-kernel" in text(outputs[3], "text/plain")
    # a UsageError is one line on stderr, without a traceback
    assert text(outputs[4], "stream") == "UsageError: --max-gpus must be at least 1, got 0\n"
    # in a kernel, wait's progress is a display updated in place, not printed lines
    progress = [m for m in outputs[5] if m["msg_type"] == "display_data"]
    assert len(progress) == 1 and not text(outputs[5], "stream")
    line = progress[0]["content"]["data"]["text/plain"]
    assert line.startswith("from-a-kernel [") and "] CANCELLED | max GPUs 2 | " in line


async def kernel_prints(manager, code: str) -> str:
    """Run `code` in a kernel the server's kernel manager starts; return what it printed."""
    kernel_id = await manager.start_kernel(kernel_name="python3")
    client = manager.get_kernel(kernel_id).client()
    client.start_channels()
    seen: list[dict] = []
    try:
        await client.wait_for_ready(timeout=60)
        await client.execute_interactive(code, timeout=60, output_hook=seen.append)
    finally:
        client.stop_channels()
        await manager.shutdown_kernel(kernel_id, now=True)
    return "".join(m["content"]["text"] for m in seen if m["msg_type"] == "stream")


MAGIC_LOADED = "print(get_ipython().find_cell_magic('edt_submit') is not None)"


@pytest.mark.parametrize(
    ("edt_config", "loaded"),
    [
        ({"devices": "virtual", "virtual_gpus": 0}, "True\n"),
        ({"devices": "virtual", "virtual_gpus": 0, "load_magics": False}, "False\n"),
    ],
)
async def test_kernels_of_the_server_have_the_magics_without_load_ext(jp_serverapp, loaded):
    assert await kernel_prints(jp_serverapp.kernel_manager, MAGIC_LOADED) == loaded


def test_the_table_says_each_jobs_kind_whether_it_runs_fixed_and_its_restarts():
    base = {"name": "n", "min_gpus": 1, "max_gpus": 2, "priority": 0, "created": 0.0}
    jobs = [
        {"id": "q", "state": "QUEUED", "elastic": False, "restarts": 0, "devices": []},
        {"id": "r", "state": "RUNNING", "elastic": False, "restarts": 0, "devices": ["g0"]},
        {"id": "e", "state": "RUNNING", "elastic": True, "restarts": 2, "devices": ["g1"]},
        {"id": "w", "state": "QUEUED", "elastic": True, "restarts": 1, "devices": []},
        {
            "id": "t",
            "state": "RUNNING",
            "elastic": False,
            "restarts": 0,
            "devices": ["g2"],
            "spec": {"kind": "restart"},
        },
        {
            "id": "g",
            "state": "QUEUED",
            "elastic": False,
            "restarts": 0,
            "devices": [],
            "spec": {"kind": "rigid"},
        },
    ]
    table = JobTable(Job(EDTClient("http://127.0.0.1:9", "t"), {**base, **j}) for j in jobs)
    kinds = [row[4] for row in table.rows()]
    assert kinds == ["elastic", "fixed", "elastic+2", "elastic+1", "restart", "rigid"]
