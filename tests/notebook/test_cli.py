"""`jupyter edt ...` through `cli.main(argv)`, against a real single-user Jupyter server.

The server is the default one (Jupyter's own token login), and the CLI is given no URL or
token: it finds the server from its runtime file, as it would next to `jupyter lab`.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

from jupyter_edt.cli import main

run = asyncio.to_thread


@pytest.fixture
def cli(http_server, jp_serverapp, monkeypatch):
    """`main` with no server configured: discovery must find the live one."""
    for name in ("EDT_URL", "EDT_TOKEN", "JUPYTERHUB_SERVICE_URL", "JUPYTERHUB_API_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    return lambda *argv: run(main, list(argv))


async def test_submit_list_and_cancel_with_zero_configuration(cli, capsys, tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import sys; print(sys.argv)\n")
    argv = ["--kind", "rigid", "--max-gpus", "2", "--epochs", "3", "--", "--lr", "1"]
    assert await cli("submit", str(script), *argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("Submitted job ") and out.rstrip().endswith("(train): QUEUED")
    job_id = out.split()[2]

    assert await cli("list", "--json") == 0
    [job] = json.loads(capsys.readouterr().out)
    assert (job["id"], job["max_gpus"], job["spec"]["args"]) == (job_id, 2, ["--lr", "1"])
    assert job["spec"]["env"] == {"EDT_EPOCHS": "3"}
    assert job["spec"]["entrypoint"] == "train.py" and job["spec"]["kind"] == "rigid"

    assert await cli("list") == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split()[:4] == ["ID", "NAME", "STATE", "GPUS"]
    assert row.split()[:5] == [job_id, "train", "QUEUED", "0/2", "rigid"]

    assert await cli("cancel", job_id) == 0
    assert capsys.readouterr().out == f"Cancelled job {job_id} (train).\n"
    assert await cli("list", "--state", "queued") == 0
    assert capsys.readouterr().out == "No jobs.\n"
    assert await cli("logs", job_id, "--list") == 0 and capsys.readouterr().out == ""

    assert await cli("delete", job_id) == 0
    assert capsys.readouterr().out == f"Deleted job {job_id} (train).\n"
    assert await cli("list") == 0 and capsys.readouterr().out == "No jobs.\n"
    assert await cli("delete", job_id) == 1
    assert "No job with id" in capsys.readouterr().err


async def test_submit_from_stdin_and_a_directory(cli, capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("print('piped')\n"))
    assert await cli("submit", "-", "--name", "piped") == 0
    assert "(piped): QUEUED" in capsys.readouterr().out
    project = tmp_path / "proj"
    project.mkdir()
    (project / "run.py").write_text("print('dir')\n")
    assert await cli("submit", str(project), "--entrypoint", "run.py") == 0
    assert "(proj): QUEUED" in capsys.readouterr().out
    assert await cli("list", "--json") == 0
    jobs = json.loads(capsys.readouterr().out)
    assert [j["name"] for j in jobs] == ["proj", "piped"]
    assert jobs[0]["spec"]["archive"] and jobs[1]["spec"]["code"] == "print('piped')\n"


async def test_errors_are_one_line_with_exit_status_1_and_usage_2(cli, capsys, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/"
    assert await cli("--url", url, "list") == 1
    err = capsys.readouterr().err
    assert err.startswith(f"jupyter edt: error: Cannot reach the jupyter-edt server at {url}")
    assert "jupyter edt --url http://host:8888/ --token TOKEN" in err
    assert await cli("cancel", "0123456789ab") == 1
    assert "No job with id" in capsys.readouterr().err
    script = tmp_path / "x.py"
    script.write_text("pass\n")
    assert await cli("submit", str(script), "--max-gpus", "0") == 1
    assert "max_gpus: must be between 1 and" in capsys.readouterr().err
    assert await cli("submit", str(script), "--env", "NOPE") == 1
    assert "env: expected NAME=VALUE" in capsys.readouterr().err
    assert await cli("frobnicate") == 2
    assert "invalid choice: 'frobnicate'" in capsys.readouterr().err
    assert await cli("list") == 0 and capsys.readouterr().out == "No jobs.\n"


@pytest.mark.parametrize("edt_config", [{"devices": "virtual", "virtual_gpus": 2}])
async def test_a_real_job_submitted_waited_on_its_logs_followed_and_results_downloaded(
    cli, capsys, tmp_path
):
    script = tmp_path / "hello.py"
    script.write_text(
        textwrap.dedent(
            """
            import os, pathlib
            print("hello from", os.environ["EDT_JOB_ID"])
            result = pathlib.Path(os.environ["RESULT_DIR"])
            (result / "note.txt").write_text("done")
            """
        )
    )
    assert await cli("submit", str(script), "--wait") == 0
    captured = capsys.readouterr()
    job_id = captured.out.split()[2]
    assert f"hello [{job_id}] SUCCEEDED" in captured.err  # the progress goes to stderr

    assert await cli("logs", job_id) == 0
    assert f"hello from {job_id}" in capsys.readouterr().out
    assert await cli("logs", job_id, "-f") == 0
    followed = capsys.readouterr().out
    assert any(
        line.startswith("[") and line.endswith(f"hello from {job_id}")
        for line in followed.splitlines()
    )

    assert await cli("download", job_id, "--list") == 0
    assert capsys.readouterr().out.split() == ["4", "note.txt"]
    out = tmp_path / "out"
    assert await cli("download", job_id, "-o", str(out)) == 0
    assert (out / "note.txt").read_text() == "done"


def test_jupyter_dispatches_edt_to_the_console_script():
    """`jupyter edt` runs the `jupyter-edt` executable installed by `[project.scripts]`."""
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + "/usr/bin:/bin"}
    done = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "jupyter"), "edt", "--help"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "usage: jupyter edt" in done.stdout
    for command in ("submit", "list", "logs", "cancel", "delete", "download"):
        assert command in done.stdout


def test_submit_takes_the_magics_options_with_the_same_defaults_and_help():
    """One table declares the options of `jupyter edt submit` and of `%%edt_submit`."""
    from jupyter_edt.cli import build_parser
    from jupyter_edt.notebook.magics import EDTMagics

    cli = build_parser()._subparsers._group_actions[0].choices["submit"]
    magic = EDTMagics.edt_submit.parser

    def options(parser):
        return {
            action.option_strings[-1]: (action.default, action.help)
            for action in parser._actions
            if action.option_strings and action.dest not in ("help", "entrypoint")
        }

    cli_options, magic_options = options(cli), options(magic)
    assert cli_options.keys() == magic_options.keys()
    for flag, (default, help_) in cli_options.items():
        assert default == magic_options[flag][0], flag
        assert flag == "--name" or help_ == magic_options[flag][1], flag
    assert "-1000..1000" in cli_options["--priority"][1]
