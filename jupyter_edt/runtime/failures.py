"""How a job's workers failed, and the one sentence a user reads about it (a job's reason).

A worker that dies of an exception says so before it exits (:func:`report_exception`): one
JSON line in ``exception-<worker>.jsonl`` in the job's log directory (beside its events, and
copied back from another node as they are) with the exception's type and message, the user's
own frame (the innermost frame that is not torch's, the standard library's, an installed
package's or jupyter_edt's) and the whole traceback. The driver reads these lines
(:func:`read_error`); a worker that died without one (killed, ``os._exit``) is read from the end
of its log instead (:func:`error_from_log`). :func:`failure_reason` folds them into the job's
reason, each distinct error once with the workers that raised it, the first raised first
(one line each below, but for the first, cut to fit here)::

    RuntimeError: mat1 and mat2 shapes cannot be multiplied (32x64 and 32x10) (main.py:42 in
    forward; workers w0, w1)
    SyntaxError: '(' was never closed (main.py:3; workers w0, w1)
    ValueError: bad (main.py:9 in load; worker w0); then DistBackendError on worker w1
    worker w0 was killed by SIGKILL

Standard library only: the worker writes its line while it dies, with nothing left to rely on.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .tracebacks import Frame, display_path, last_traceback, natural, who

__all__ = [
    "WorkerError",
    "error_from_log",
    "failure_reason",
    "read_error",
    "report_exception",
]

#: The most characters of an exception's message a reason carries (a CUDA out-of-memory
#: message runs to 400, its advice last).
MESSAGE_LIMIT = 300
#: The most characters of a traceback a worker's line keeps (its end: where it failed).
TRACEBACK_LIMIT = 64 * 1024
#: Distinct errors a reason names after the first.
MORE_LIMIT = 3


def error_file(worker: str) -> str:
    return f"exception-{worker}.jsonl"


@dataclass(frozen=True)
class WorkerError:
    """Why one worker ended: an exception (`type`, `message`, the user's frame), or, with no
    `type`, how it exited (`exit_code`; `message`: its log's last line)."""

    worker: str
    type: str = ""
    message: str = ""
    file: str | None = None
    line: int | None = None
    function: str | None = None
    time: float = float("inf")  # unknown: after every error a worker reported
    exit_code: int | None = None

    def where(self) -> str:
        """``main.py:42 in forward``, ``main.py:3`` (a SyntaxError), or ""."""
        if not self.file:
            return ""
        at = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{at} in {self.function}" if self.function else at

    def key(self) -> tuple[object, ...]:
        """Errors with the same key are the same error, on several workers."""
        if self.type:
            return (self.type, self.message, self.file, self.line)
        return ("", _ending(self.exit_code), self.message)


# -- in the worker ----------------------------------------------------------------------------


def report_exception(exc: BaseException) -> None:
    """Record the exception that ends this worker (``EDT_LOG_DIR``, ``EDT_WORKER_ID``), for the
    driver to build the job's reason from. Never raises: the exception itself must still reach
    the log. ``sys.exit(0)`` and ``sys.exit(<int>)`` are exits, not exceptions: the driver
    reads their status and the log's last line."""
    if isinstance(exc, SystemExit) and (exc.code is None or isinstance(exc.code, int)):
        return
    log_dir, worker = os.environ.get("EDT_LOG_DIR"), os.environ.get("EDT_WORKER_ID")
    if not log_dir or not worker:
        return  # not a job's worker
    try:
        record = {
            "worker": worker,
            "run": os.environ.get("EDT_RUN"),
            "pid": os.getpid(),
            "time": time.time(),
            **describe(exc, root=os.getcwd()),
        }
        with open(Path(log_dir) / error_file(worker), "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
    except Exception:  # a failing report must not hide the failure
        return


def describe(exc: BaseException, root: str | None = None) -> dict[str, Any]:
    """An exception as the record says it: type, message, the user's frame (its file shown
    from `root`, the job's code directory) and the traceback's text. An exception that carries
    another process's traceback in its message (a DataLoader worker's) is described by that
    one, where the user's code ran."""
    frames = [
        Frame(f.filename, f.lineno or 0, f.name) for f in traceback.extract_tb(exc.__traceback__)
    ]
    message = exc.msg if isinstance(exc, SyntaxError) and exc.msg else str(exc)
    if isinstance(exc, SyntaxError) and exc.filename:
        frames.append(Frame(exc.filename, exc.lineno or 0))  # where the compiler stopped
    kind = _type_name(type(exc))
    embedded = last_traceback(message) if "Traceback (most recent call last)" in message else None
    if embedded is not None and embedded[0].user_frame() is not None:
        inner = embedded[0]
        frames, kind, message = list(inner.frames), inner.type, inner.message
    user = next((f for f in reversed(frames) if f.users), None)
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return {
        "type": kind,
        "message": message,
        "file": display_path(user.file, root) if user else None,
        "line": user.line if user else None,
        "function": (user.function or None) if user else None,
        "traceback": text[-TRACEBACK_LIMIT:],
    }


def _type_name(kind: type) -> str:
    """As Python's traceback names it: ``ValueError``, ``torch.OutOfMemoryError``."""
    module = kind.__module__
    if module in ("builtins", "__main__"):
        return kind.__qualname__
    return f"{module}.{kind.__qualname__}"


# -- in the driver ----------------------------------------------------------------------------


def read_error(log_dir: Path, worker: str, run: str | None = None) -> WorkerError | None:
    """The exception `worker` reported, if it did. `run`: the driver's run of the job's
    workers; a resumed job's driver names its workers as an earlier one did, and a line of that
    earlier run's worker is not this one's."""
    try:
        lines = (log_dir / error_file(worker)).read_text(encoding="utf-8").splitlines()
    except (FileNotFoundError, UnicodeDecodeError):
        return None
    for line in reversed(lines):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # cut short: the worker was killed while it wrote
        if run is not None and str(record.get("run") or "").split(".")[0] != run.split(".")[0]:
            return None
        return WorkerError(
            worker=worker,
            type=str(record.get("type") or "Exception"),
            message=str(record.get("message") or ""),
            file=record.get("file"),
            line=record.get("line"),
            function=record.get("function"),
            time=float(record.get("time") or float("inf")),
        )
    return None


def error_from_log(text: str, worker: str, exit_code: int | None, root: str | None) -> WorkerError:
    """Why `worker` ended, from the end of its log: the last traceback there, else its exit
    status and last line (``sys.exit(2)`` after argparse's message; a kill)."""
    parsed = last_traceback(text)
    if parsed is not None:
        tb, _ = parsed
        user = tb.user_frame()
        return WorkerError(
            worker=worker,
            type=tb.type,
            message=tb.message,
            file=display_path(user.file, root) if user else None,
            line=user.line if user else None,
            function=(user.function or None) if user else None,
        )
    last = next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "")
    return WorkerError(worker=worker, message=last, exit_code=exit_code)


def failure_reason(errors: Sequence[WorkerError]) -> str:
    """One line: the error raised first, with the user's frame and every worker that raised
    it, then the other errors in the order they came (``; then DistBackendError on worker
    w1``)."""
    groups: dict[tuple[object, ...], list[WorkerError]] = {}
    for error in sorted(errors, key=lambda e: (e.time, natural(e.worker))):
        groups.setdefault(error.key(), []).append(error)
    if not groups:
        return "the job's workers failed"
    first, *others = groups.values()
    parts = [_sentence(first)]
    parts += [_short(group) for group in others[:MORE_LIMIT]]
    if len(others) > MORE_LIMIT:
        parts.append(f"{len(others) - MORE_LIMIT} more error(s) (see the logs)")
    return "; then ".join(parts)


def _sentence(group: Sequence[WorkerError]) -> str:
    error, workers = group[0], who(e.worker for e in group)
    if not error.type:
        return _exit_sentence(group)
    message = _one_line(error.message)
    said = f"{error.type}: {message}" if message else error.type
    where = error.where()
    return f"{said} ({where}; {workers})" if where else f"{said} ({workers})"


def _short(group: Sequence[WorkerError]) -> str:
    """A later error: its type and workers (its message is in their logs)."""
    if not group[0].type:
        return _exit_sentence(group, detail=False)
    return f"{group[0].type} on {who(e.worker for e in group)}"


def _exit_sentence(group: Sequence[WorkerError], detail: bool = True) -> str:
    """``worker w0 exited with code 2: <its last line>``, ``workers w0, w1 were killed by
    SIGKILL``."""
    error, workers = group[0], who(e.worker for e in group)
    ended = _ending(error.exit_code)
    if len(group) > 1:
        ended = ended.replace("was killed", "were killed")
    said = f"{workers} {ended}"
    message = _one_line(error.message)
    return f"{said}: {message}" if message and detail else said


def _ending(code: int | None) -> str:
    if code is None:
        return "ended without saying why"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _one_line(message: str) -> str:
    """A message on one line, cut to :data:`MESSAGE_LIMIT` characters."""
    flat = re.sub(r"\s+", " ", message).strip()
    return flat if len(flat) <= MESSAGE_LIMIT else flat[: MESSAGE_LIMIT - 1].rstrip() + "…"
