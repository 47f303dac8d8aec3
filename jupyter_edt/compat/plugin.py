"""WMLA's program contract, added to every job through the core's plugin seam
(``jobs.plugins.JobPlugin``): the names WMLA programs read, FABRIC_HOME, a copy of an exec's
submitted code, each exec worker's own LOG_DIR, and emetrics files read as metric records.

An exec's processes have ``FABRIC_HOME/libs/fabric.zip`` on their PYTHONPATH, as WMLA's have,
so a program does ``from callbacks import Callback`` or ``from fabric_model import FabricModel``
with no ``sys.path`` change of its own (a program's own modules still come first: its folder
leads ``sys.path``)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..jobs.models import Job
from ..jobs.plugins import WORKER_SETUP_ENV
from .fabric_home import ensure_fabric_home, fabric_zip
from .formats import EMETRICS_PATTERNS, emetrics_records
from .wmla import exec_info, submitted_code_dir, use_process_log_dir

if TYPE_CHECKING:
    from ..runtime.jobdir import JobDir

__all__ = ["WMLAPlugin"]

_WORKER_SETUP = f"{use_process_log_dir.__module__}:{use_process_log_dir.__name__}"


class WMLAPlugin:
    metric_files = EMETRICS_PATTERNS

    def __init__(self, fabric_home: str | Path) -> None:
        #: FABRIC_HOME: its libs/fabric.zip lets WMLA programs import FabricModel
        self.fabric_home = Path(fabric_home)

    def environment(self, job: Job, job_dir: JobDir) -> dict[str, str]:
        """WMLA's names for every job (a native job may be a WMLA program too); an exec's
        workers each get their own LOG_DIR."""
        env = {
            "SAVED_MODEL_DIR": str(job_dir.result / "model"),
            "RESUME_WEIGHT_PATH": str(job_dir.checkpoints),
            "FABRIC_HOME": str(self.fabric_home),
            "DLI_EXECID": job.id,
            "DLI_IS_ELASTIC": "true",
            "DLI_WORK_DIR": str(job_dir.code),
        }
        if exec_info(job.spec) is not None:
            env[WORKER_SETUP_ENV] = _WORKER_SETUP
            # this replaces the path the job would have had: the submitted one, else the
            # service's (which its fork server keeps too)
            had = job.spec.env.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
            paths = [str(fabric_zip(self.fabric_home)), *filter(None, had.split(os.pathsep))]
            env["PYTHONPATH"] = os.pathsep.join(paths)
        return env

    def prepare(self, job: Job, job_dir: JobDir) -> None:
        """FABRIC_HOME for every job; an exec keeps a copy of its code in its results."""
        ensure_fabric_home(self.fabric_home)
        info = exec_info(job.spec)
        if info is not None:
            copy = submitted_code_dir(job_dir.result, info.model_dir)
            if not copy.exists():
                shutil.copytree(job_dir.code, copy, symlinks=True)

    def metric_records(self, lines: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        return emetrics_records(lines)
