"""A failed job's reason and folded logs, from tracebacks as text and exceptions in this process:
the user's frame found among torch's, the standard library's and jupyter_edt's, each distinct
error once with its workers, the framework's frames folded. No processes: fast."""

from __future__ import annotations

import json
import sysconfig
import textwrap

from jupyter_edt.runtime.failures import (
    WorkerError,
    describe,
    error_from_log,
    failure_reason,
    read_error,
)
from jupyter_edt.runtime.tracebacks import fold_logs, framework_of, last_traceback

SITE = "/opt/env/lib/python3.11/site-packages"
CODE = "/srv/edt/jobs/328ae60b87b/code"
EDT = framework_of.__code__.co_filename.rsplit("/runtime/", 1)[0]  # this checkout's package

# As torch.distributed's excepthook prints it in a worker's log: every line prefixed by rank.
SHAPE_ERROR = textwrap.dedent(
    f"""\
    Traceback (most recent call last):
      File "<frozen runpy>", line 198, in _run_module_as_main
      File "<frozen runpy>", line 88, in _run_code
      File "{EDT}/runtime/worker.py", line 43, in main
        run(args)
      File "<frozen runpy>", line 291, in run_path
      File "{CODE}/main.py", line 50, in <module>
        trainer.fit(1, 32, 2)
      File "{EDT}/runtime/trainer.py", line 343, in fit
        self._run()
      File "{EDT}/runtime/batches.py", line 105, in __call__
        output = model(*inputs)
                 ^^^^^^^^^^^^^^
      File "{SITE}/torch/nn/modules/module.py", line 1778, in _wrapped_call_impl
        return self._call_impl(*args, **kwargs)
      File "{CODE}/main.py", line 42, in forward
        return self.fc(x)
               ^^^^^^^^^^
      File "{SITE}/torch/nn/modules/module.py", line 1778, in _wrapped_call_impl
        return self._call_impl(*args, **kwargs)
      File "{SITE}/torch/nn/modules/module.py", line 1789, in _call_impl
        return forward_call(*args, **kwargs)
      File "{SITE}/torch/nn/modules/linear.py", line 134, in forward
        return F.linear(input, self.weight, self.bias)
    RuntimeError: mat1 and mat2 shapes cannot be multiplied (32x64 and 32x10)
    """
)
RANKED = "".join(f"[rank0]: {line}\n" for line in SHAPE_ERROR.splitlines())

SYNTAX_ERROR = textwrap.dedent(
    f"""\
    Traceback (most recent call last):
      File "<frozen runpy>", line 198, in _run_module_as_main
      File "{EDT}/runtime/worker.py", line 65, in run
        runpy.run_path(args[0], run_name="__main__")
      File "<frozen runpy>", line 286, in run_path
      File "{CODE}/main.py", line 3
        x = (1,
            ^
    SyntaxError: '(' was never closed
    """
)


def test_whose_frame_it_is_by_its_path():
    assert framework_of(f"{SITE}/torch/nn/modules/module.py") == "torch"
    assert framework_of("/usr/lib/python3/dist-packages/numpy/core/x.py") == "numpy"
    assert framework_of("<frozen runpy>") == "runpy"
    assert framework_of(f"{EDT}/runtime/trainer.py") == "jupyter_edt"
    assert framework_of(sysconfig.get_paths()["stdlib"] + "/json/decoder.py") == "json"
    assert framework_of("/usr/local/lib/python3.12/concurrent/futures/_base.py") == "concurrent"
    assert framework_of(f"{CODE}/main.py") is None
    assert framework_of("/home/alice/project/lib/python/helpers.py") is None
    assert framework_of("/home/bob/src/jupyter_edt/runtime/trainer.py") == "jupyter_edt"


def test_the_users_frame_is_the_innermost_outside_the_framework():
    parsed = last_traceback("loading data\n" + RANKED + "[W shutdown] process group destroyed\n")
    assert parsed is not None
    tb, span = parsed
    assert (
        tb.exception == "RuntimeError: mat1 and mat2 shapes cannot be multiplied (32x64 and 32x10)"
    )
    assert (tb.user_frame().file, tb.user_frame().line) == (f"{CODE}/main.py", 42)
    assert (span.start, span.stop) == (1, 1 + len(SHAPE_ERROR.splitlines()))
    error = error_from_log(RANKED, "w0", 1, CODE)
    assert (error.file, error.line, error.function) == ("main.py", 42, "forward")


def test_the_logs_show_each_traceback_once_with_the_users_frames_and_torch_folded():
    logs = {
        "driver.stderr": "",
        "w0.out": "loading data\n" + RANKED,
        "w1.out": "loading data\n" + SHAPE_ERROR,  # the same, printed without the rank prefix
    }
    assert fold_logs(logs, output_lines=3) == textwrap.dedent(
        """\
        w0, w1: Traceback (most recent call last):
          File "main.py", line 50, in <module>
            trainer.fit(1, 32, 2)
          … 3 frames in jupyter_edt, torch …
          File "main.py", line 42, in forward
            return self.fc(x)
                   ^^^^^^^^^^
          … 3 frames in torch …
        RuntimeError: mat1 and mat2 shapes cannot be multiplied (32x64 and 32x10)

        ==> w0.out <==
        loading data
        ==> w1.out <==
        loading data"""
    )
    # a log that holds no traceback shows only its last lines; nothing at all for empty logs
    assert (
        fold_logs({"w0.out": "a\nb\nc\n", "w1.out": "\n"}, output_lines=2) == "==> w0.out <==\nb\nc"
    )
    assert fold_logs({"w0.out": ""}) == ""


def test_different_tracebacks_are_shown_apart_and_without_a_user_frame_all_fold():
    other = SHAPE_ERROR.replace("line 42, in forward", "line 43, in forward")
    kill = "Traceback (most recent call last):\n" + "".join(
        f'  File "{SITE}/torch/distributed/x.py", line {i}, in f\n' for i in (1, 2)
    )
    kill += "torch.distributed.DistBackendError: Connection closed by peer\n"
    folded = fold_logs({"w0.out": SHAPE_ERROR, "w1.out": other, "w2.out": kill}, output_lines=0)
    assert [line for line in folded.splitlines() if "Traceback" in line] == [
        "w0: Traceback (most recent call last):",
        "w1: Traceback (most recent call last):",
        "w2: Traceback (most recent call last):",
    ]
    assert folded.endswith(
        "w2: Traceback (most recent call last):\n"
        "  … 2 frames in torch …\n"
        "torch.distributed.DistBackendError: Connection closed by peer"
    )


def test_a_syntax_error_names_the_file_and_line():
    error = error_from_log("starting\n" + SYNTAX_ERROR, "w0", 1, CODE)
    assert (error.type, error.file, error.line, error.function) == (
        "SyntaxError",
        "main.py",
        3,
        None,
    )
    assert failure_reason([error]) == "SyntaxError: '(' was never closed (main.py:3; worker w0)"
    folded = fold_logs({"w0.out": SYNTAX_ERROR})
    assert '  File "main.py", line 3\n    x = (1,\n        ^\nSyntaxError: ' in folded


def test_the_reason_names_each_error_once_the_first_raised_first():
    def raised(worker: str, at: float, kind: str = "ValueError", line: int = 9) -> WorkerError:
        return WorkerError(worker, kind, "bad\n  value ", "main.py", line, "load", at)

    errors = [
        raised("w10", 2.0),
        raised("w2", 1.0),
        raised("w3", 3.0, "torch.distributed.DistBackendError", 80),
        WorkerError("w4", exit_code=-9, message="Killed"),
    ]
    assert failure_reason(errors) == (
        "ValueError: bad value (main.py:9 in load; workers w2, w10); "
        "then torch.distributed.DistBackendError on worker w3; "
        "then worker w4 was killed by SIGKILL"
    )
    # without any exception: how the workers ended, and the last line their log printed
    exits = [WorkerError(w, exit_code=2, message="error: unknown --lr") for w in ("w0", "w1")]
    assert failure_reason(exits) == "workers w0, w1 exited with code 2: error: unknown --lr"
    killed = [WorkerError(w, exit_code=-9) for w in ("w0", "w1")]
    assert failure_reason(killed) == "workers w0, w1 were killed by SIGKILL"
    long = WorkerError("w0", "RuntimeError", "CUDA out of memory. " * 40)
    reason = failure_reason([long])
    assert reason.endswith("… (worker w0)") and len(reason) < 330


def test_an_exception_here_is_described_from_its_users_frame():
    try:
        json.loads("{")  # raised inside the standard library, called from this test
    except ValueError as err:
        described = describe(err, root=str(__file__).rsplit("/", 1)[0])
    assert described["type"] == "json.decoder.JSONDecodeError"
    assert described["file"] == "test_tracebacks.py"
    assert described["function"] == "test_an_exception_here_is_described_from_its_users_frame"
    assert described["traceback"].startswith("Traceback (most recent call last):")


def test_an_error_raised_in_a_dataloader_worker_is_described_by_its_own_traceback():
    original = "\n".join(
        [
            "Caught KeyError in DataLoader worker process 0.",
            "Original Traceback (most recent call last):",
            f'  File "{SITE}/torch/utils/data/_utils/worker.py", line 349, in _worker_loop',
            "    data = fetcher.fetch(index)",
            f'  File "{CODE}/data.py", line 12, in __getitem__',
            "    return self.rows[i]['label']",
            "KeyError: 'label'",
        ]
    )

    class KeyErrorMessage(str):  # as torch re-raises a KeyError: its message as it is
        def __repr__(self) -> str:
            return str(self)

    try:
        raise KeyError(KeyErrorMessage(original))
    except KeyError as err:
        described = describe(err, root=CODE)
    assert (described["type"], described["message"]) == ("KeyError", "'label'")
    assert (described["file"], described["line"], described["function"]) == (
        "data.py",
        12,
        "__getitem__",
    )


def test_a_record_of_an_earlier_run_of_the_job_is_not_this_workers(tmp_path):
    line = {"worker": "w0", "run": "abc", "time": 5.0, "type": "ValueError", "message": "x"}
    (tmp_path / "exception-w0.jsonl").write_text(json.dumps(line) + "\n{cut short")
    assert read_error(tmp_path, "w0", "abc.2") == WorkerError("w0", "ValueError", "x", time=5.0)
    assert read_error(tmp_path, "w0", "def") is None
    assert read_error(tmp_path, "w1", "abc") is None
