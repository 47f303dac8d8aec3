"""What marks a job as a WMLA exec, and the per-process rules its programs expect.

An exec is a job whose spec has ``surface`` ``EXEC_SURFACE``, with its ``--model-dir`` and ``args``
string in the spec's ``annotations``. Execs submitted before that field existed carry them as
environment markers (``LEGACY_MODEL_DIR``, ``LEGACY_ARGS``); both are read.

WMLA's names for this server's parts: its one pool of GPUs is one *instance group*, whose id
(``sigId``) is ``instance_group_id``; any ``sigName`` a client sends maps to it. An exec's driver
(``submissionId``, Conductor's ``driver.id``) is named by the exec's id; its workers are the
*executors* ``1, 2, ...`` (``executor_number``: worker ``w0`` is executor 1).
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path
from typing import NamedTuple

from ..jobs.models import JobSpec, JobState

EXEC_SURFACE = "wmla-exec"
LEGACY_MODEL_DIR = "EDT_WMLA_MODEL_DIR"
LEGACY_ARGS = "EDT_WMLA_ARGS"

__all__ = [
    "EXEC_SURFACE",
    "INSTANCE_GROUP",
    "ExecInfo",
    "exec_annotations",
    "exec_info",
    "exec_state",
    "executor_number",
    "executor_worker",
    "instance_group_id",
    "process_log_dir",
    "submitted_code_dir",
    "use_process_log_dir",
]


#: The name of this server's one instance group (``sigName``).
INSTANCE_GROUP = "jupyter-edt"
_WORKER = re.compile(r"^w(\d+)$")


def instance_group_id(jobs_dir: str | os.PathLike[str]) -> str:
    """The ``sigId`` of this server's one instance group: a UUID derived from where its jobs
    live (a service's ``runner.jobs_dir``), so it stays the same across restarts of the same
    server and differs between servers."""
    where = os.path.realpath(jobs_dir)
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"jupyter-edt:instance-group:{where}"))


def executor_number(worker: str) -> int | None:
    """The executor number WMLA's API names a worker by (``w0`` -> 1); None for a process that
    is no worker (the driver)."""
    found = _WORKER.match(worker)
    return None if found is None else int(found[1]) + 1


def executor_worker(number: int) -> str:
    """The worker that is executor `number` (1 -> ``w0``); ValueError below 1."""
    if number < 1:
        raise ValueError(f"executors are numbered from 1, got {number}")
    return f"w{number - 1}"


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
