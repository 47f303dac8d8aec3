"""Names shared by the execs facade, the runner and the worker for WMLA submissions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

# Set in the env of a job submitted through the execs API: marks it as a WMLA exec.
WMLA_MODEL_DIR = "EDT_WMLA_MODEL_DIR"  # the --model-dir (or the app name): _submitted_code/<it>
WMLA_ARGS = "EDT_WMLA_ARGS"  # the args string, as submitted

__all__ = ["WMLA_ARGS", "WMLA_MODEL_DIR", "exec_state", "process_log_dir", "submitted_code_dir"]


def submitted_code_dir(result_dir: Path, model_dir: str) -> Path:
    """Where RESULT_DIR keeps a copy of the submitted code."""
    return result_dir / "_submitted_code" / Path(model_dir).name


def process_log_dir(result_dir: Path, process: str) -> Path:
    """A WMLA process's LOG_DIR: RESULT_DIR/log/<process> (stdout, evaluation-metrics.txt)."""
    return result_dir / "log" / process


def exec_state(job: dict[str, Any]) -> str:
    """A job's state in WMLA's names (see ``compat.execs``)."""
    state, reason = job["state"], job.get("reason") or ""
    if state in ("QUEUED", "SUSPENDED"):
        return "PENDING_CRD_SCHEDULER"
    if state == "STARTING":
        return "SUBMITTED"
    if state == "SUCCEEDED":
        return "FINISHED"
    if state == "FAILED":
        return "ERROR" if reason.startswith("could not start") else "FAILED"
    if state == "CANCELLED":
        return "STOPPED" if reason.startswith("stopped") else "KILLED"
    return state  # RUNNING
