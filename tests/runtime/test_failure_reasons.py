"""A failed job's reason, from a real driver and its workers (forked warm from the session's fork
server, as the service starts them): the program's exception with the user's own frame, once for
every worker that raised it; a syntax error in a file the program imports, by file and line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from jobprograms import DEADLINE_S, SHAPE_BUG
from test_driver import device

from jupyter_edt.launch.forkserver import FORKSERVER_ENV
from jupyter_edt.runtime.jobdir import JobDir, write_json_atomic


def run_driver(tmp_path: Path, files: dict[str, str], devices: int, launcher) -> dict:
    """Run a job of `files` (``main.py`` its program) on `devices` virtual devices to its end;
    returns the driver's final status."""
    d = JobDir(tmp_path / "job")
    d.create()
    for name, source in files.items():
        (d.code / name).write_text(source)
    write_json_atomic(d.job, {"id": "j1", "program": [str(d.code / "main.py")], "max_gpus": 2})
    d.write_orders({"seq": 1, "action": "run", "devices": [device(i) for i in range(devices)]})
    driver = subprocess.run(
        [sys.executable, "-m", "jupyter_edt.runtime.driver", str(d.root)],
        env={**os.environ, FORKSERVER_ENV: launcher.forkserver},
        capture_output=True,
        timeout=DEADLINE_S,
    )
    assert driver.returncode == 1, driver.stdout + driver.stderr
    status = d.read_status()
    assert status["state"] == "failed", status
    return status


def test_an_error_on_two_workers_is_one_sentence_with_the_users_frame(tmp_path, warm_launcher):
    status = run_driver(tmp_path, {"main.py": SHAPE_BUG}, 2, warm_launcher())
    # both raised it (a worker the driver started again on a failed device raises it too)
    assert re.fullmatch(
        r"RuntimeError: mat1 and mat2 shapes cannot be multiplied \(8x64 and 32x10\) "
        r"\(main\.py:11 in forward; workers w0, w1(, w\d+)*\)",
        status["error"],
    ), status["error"]
    # what each worker reported, for the driver to build that from
    logs = tmp_path / "job" / "logs"
    (record,) = [json.loads(line) for line in (logs / "exception-w0.jsonl").open()]
    assert (record["type"], record["file"], record["line"], record["function"]) == (
        "RuntimeError",
        "main.py",
        11,
        "forward",
    )
    assert record["traceback"].rstrip().endswith(record["type"] + ": " + record["message"])
    assert "loading data" in (logs / "w0.out").read_text()  # the log has it all, as before


def test_a_syntax_error_in_a_file_the_program_imports_names_the_file_and_line(
    tmp_path, warm_launcher
):
    files = {"main.py": "import helpers\n", "helpers.py": "K = 3\nx = (1,\n"}
    status = run_driver(tmp_path, files, 1, warm_launcher())
    assert status["error"] == "SyntaxError: '(' was never closed (helpers.py:2; worker w0)"


def test_a_worker_that_exits_without_an_exception_is_read_from_its_log(tmp_path, warm_launcher):
    program = "import sys\nprint('--lr must be positive', file=sys.stderr)\nsys.exit(2)\n"
    status = run_driver(tmp_path, {"main.py": program}, 1, warm_launcher())
    assert status["error"] == "worker w0 exited with code 2: --lr must be positive"
