"""What marks a job as a WMLA exec, and the per-process rules its programs expect.

An exec is a job whose spec has ``surface`` ``EXEC_SURFACE``, with its ``--model-dir`` and ``args``
string in the spec's ``annotations``. Execs submitted before that field existed carry them as
environment markers (``LEGACY_MODEL_DIR``, ``LEGACY_ARGS``); both are read.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from ..jobs.models import JobSpec, JobState

EXEC_SURFACE = "wmla-exec"
LEGACY_MODEL_DIR = "EDT_WMLA_MODEL_DIR"
LEGACY_ARGS = "EDT_WMLA_ARGS"

__all__ = [
    "EXEC_SURFACE",
    "ExecInfo",
    "exec_annotations",
    "exec_info",
    "exec_state",
    "process_log_dir",
    "submitted_code_dir",
    "use_process_log_dir",
]


class ExecInfo(NamedTuple):
    model_dir: str  # the --model-dir (or the app name): RESULT_DIR/_submitted_code/<it>
    args: str  # the args string, as submitted


def exec_annotations(model_dir: str, args: str) -> dict[str, str]:
    """A spec's ``annotations`` for an exec (``surface`` ``EXEC_SURFACE``)."""
    return {"model_dir": model_dir, "args": args}


def exec_info(spec: JobSpec) -> ExecInfo | None:
    """The exec's model dir and args; None for a job that is no exec."""
    if spec.surface == EXEC_SURFACE:
        return ExecInfo(spec.annotations["model_dir"], spec.annotations.get("args", ""))
    if LEGACY_MODEL_DIR in spec.env:
        return ExecInfo(spec.env[LEGACY_MODEL_DIR], spec.env.get(LEGACY_ARGS, ""))
    return None


def submitted_code_dir(result_dir: Path, model_dir: str) -> Path:
    """Where RESULT_DIR keeps a copy of the submitted code."""
    return result_dir / "_submitted_code" / Path(model_dir).name


def process_log_dir(result_dir: Path, process: str) -> Path:
    """A WMLA process's LOG_DIR: RESULT_DIR/log/<process> (stdout, evaluation-metrics.txt)."""
    return result_dir / "log" / process


def use_process_log_dir() -> None:
    """Run in each worker of an exec before its program (the core's worker setup hook): its
    own LOG_DIR, where the program's elog and emetrics helpers write."""
    result, worker = os.environ.get("RESULT_DIR"), os.environ.get("EDT_WORKER_ID")
    if not result or not worker:
        return
    log_dir = process_log_dir(Path(result), worker)
    log_dir.mkdir(parents=True, exist_ok=True)
    os.environ["LOG_DIR"] = str(log_dir)


def exec_state(state: JobState | str, reason: str) -> str:
    """A job's state (and the reason it got it) in WMLA's names (see ``compat.execs``); from
    a record in the server, or from the API's JSON in a kernel."""
    state = JobState(state)
    if state in (JobState.QUEUED, JobState.SUSPENDED):
        return "PENDING_CRD_SCHEDULER"
    if state == JobState.STARTING:
        return "SUBMITTED"
    if state == JobState.SUCCEEDED:
        return "FINISHED"
    if state == JobState.FAILED:
        return "ERROR" if reason.startswith("could not start") else "FAILED"
    if state == JobState.CANCELLED:
        return "STOPPED" if reason.startswith("stopped") else "KILLED"
    return state.value  # RUNNING
