"""The WMLA execs surface as a facade over ``JobService`` (the handlers in ``api/wmla.py``
only shape HTTP around it).

An exec is a job submitted with a ``<name>.modelDir.tar`` and an ``args`` string; its spec's
``kind`` says so (``compat.wmla``), so only execs appear here. States map from ours:

  QUEUED, SUSPENDED -> PENDING_CRD_SCHEDULER   STARTING -> SUBMITTED   RUNNING -> RUNNING
  SUCCEEDED -> FINISHED   FAILED -> FAILED (ERROR when it could not start)
  CANCELLED -> STOPPED after ``stop``, else KILLED
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, BinaryIO

from ..jobs.archives import open_inside
from ..jobs.logs import MAX_CHUNK
from ..jobs.models import Job, JobSpec, SpecError
from ..jobs.service import JobService
from ..jobs.store import UnknownJob
from .execargs import parse_exec_args
from .formats import ELOG_PATTERNS
from .wmla import EXEC_SURFACE, exec_annotations, exec_info, exec_state

__all__ = ["LOG_TYPES", "Execs", "app_name"]

LOG_TYPES = ("outlog", "errlog")
TAR_SUFFIX = ".modelDir.tar"


def app_name(filename: str) -> str:
    """``mnist.modelDir.tar`` -> ``mnist``."""
    base = Path(filename).name
    for suffix in (TAR_SUFFIX, ".tar.gz", ".tgz", ".tar"):
        if base.endswith(suffix):
            return base[: -len(suffix)] or "exec"
    return base or "exec"


def _iso(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


class Execs:
    def __init__(self, service: JobService) -> None:
        self.service = service

    # views ---------------------------------------------------------------------------------

    def view(self, job: Job) -> dict[str, Any]:
        """An exec as WMLA's API shows it."""
        info = exec_info(job.spec)
        return {
            "id": job.id,
            "submissionId": job.id,
            "state": exec_state(job.state, job.reason),
            "appName": job.name,
            "elastic": True,
            "numWorker": job.max_gpus,
            "runningWorkers": len(job.devices),
            "workDir": str(self.service.runner.result_dir(job.id)),
            "framework": "edtPyTorch",
            "createTime": _iso(job.created),
            "endTime": _iso(job.finished),
            "args": info.args if info is not None else "",
            "user": job.user,
            "message": job.reason,
        }

    def _job(self, user: str, exec_id: str) -> Job:
        job = self.service.get(user, exec_id)
        if exec_info(job.spec) is None:
            raise UnknownJob(exec_id)  # a native job: not an exec
        return job

    def get(self, user: str, exec_id: str) -> dict[str, Any]:
        return self.view(self._job(user, exec_id))

    def list(self, user: str) -> list[dict[str, Any]]:
        return [self.view(j) for j in self.service.list(user) if exec_info(j.spec) is not None]

    # commands ------------------------------------------------------------------------------

    async def submit(
        self, user: str, args: str | None, archive: BinaryIO, filename: str, *, max_bytes: int
    ) -> dict[str, Any]:
        """Check the args, unpack the archive, and submit its model folder as a job."""
        parsed = parse_exec_args(args)
        name = app_name(filename)
        env = {} if parsed.data_path is None else {"EDT_DATA_DIR": parsed.data_path}
        spec = JobSpec.from_dict(
            {
                "name": name,
                "max_gpus": parsed.max_workers,
                "min_gpus": parsed.min_workers,
                "entrypoint": parsed.model_main,
                "args": list(parsed.program_args),
                "env": env,
            },
            archive=filename,
        )
        notes = exec_annotations(parsed.model_dir or name, args or "")
        spec = dataclasses.replace(spec, surface=EXEC_SURFACE, annotations=notes)
        try:
            job = await self.service.submit_archive(
                user, spec, archive, max_bytes=max_bytes, subdir=parsed.model_dir
            )
        except SpecError as err:
            if err.field == "entrypoint":  # say it in the exec's own terms
                raise SpecError("args", f"--model-main: {err.message}") from err
            raise
        return self.view(job)

    async def stop(self, user: str, exec_id: str) -> dict[str, Any]:
        self._job(user, exec_id)
        return self.view(await self.service.cancel(user, exec_id, verb="stopped"))

    async def delete(self, user: str, exec_id: str) -> dict[str, Any]:
        """Remove the exec: kill it if it has not ended, then delete its record, logs and
        results. Returns its last view (KILLED if it was killed here)."""
        self._job(user, exec_id)
        job = await self.service.delete(user, exec_id, verb="killed")
        return self.view(job)

    def result_dir(self, user: str, exec_id: str) -> Path:
        self._job(user, exec_id)
        return self.service.result_dir(user, exec_id)

    def log(self, user: str, exec_id: str, log_type: str) -> str:
        """``outlog``: the driver's stdout, each worker's output and each process's elog
        (``log/<process>/stdout``); ``errlog``: the driver's stderr. At most 1 MiB of each
        file's end."""
        if log_type not in LOG_TYPES:
            raise SpecError("logType", f"must be one of {', '.join(LOG_TYPES)}, got {log_type!r}")
        self._job(user, exec_id)
        logs = self.service.runner.log_dir(exec_id)
        if log_type == "errlog":
            paths = [logs / "driver.stderr"]
        else:
            result = self.service.result_dir(user, exec_id)
            paths = [logs / "driver.stdout", *sorted(logs.glob("w*.out"))]
            paths += sorted({p for pattern in ELOG_PATTERNS for p in result.parent.glob(pattern)})
        return "".join(_tail(logs.parent, p) for p in paths)


def _tail(root: Path, path: Path) -> str:
    try:  # no links, no fifos: the job's user owns its directory
        f, size = open_inside(root, path)
    except (FileNotFoundError, ValueError):
        return ""
    with f:
        f.seek(max(0, size - MAX_CHUNK))
        data = f.read()
    text = data.decode(errors="replace")
    return text if not text or text.endswith("\n") else text + "\n"
