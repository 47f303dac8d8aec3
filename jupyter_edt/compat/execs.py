"""The WMLA deep-learning API as a facade over ``JobService`` (the handlers in ``api/wmla.py``
only shape HTTP around it).

An exec is a job submitted with a ``<name>.modelDir.tar`` and an ``args`` string; its spec's
``kind`` says so (``compat.wmla``), so only execs appear here. States map from ours:

  QUEUED, SUSPENDED -> PENDING_CRD_SCHEDULER   STARTING -> SUBMITTED   RUNNING -> RUNNING
  SUCCEEDED -> FINISHED   FAILED -> FAILED (ERROR when it could not start)
  CANCELLED -> STOPPED after ``stop``, else KILLED

Logs, as WMLA's clients read them: ``log`` is the training log, the elog lines the program's
helpers write into each process's ``$LOG_DIR/stdout`` and nothing else (tutorials parse every
line with pandas); ``outlog`` is the program's own output (the driver's stdout, then each
worker's output, whose stdout and stderr the launcher keeps as one stream so a traceback stays
beside what led to it); ``errlog`` the driver's stderr. Executor ``n`` is worker ``w<n-1>``
(``compat.wmla.executor_worker``); its ``stdout`` and ``stderr`` are both that one stream.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import heapq
import os
import re
import tempfile
import time
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path, PurePosixPath
from typing import IO, Any, BinaryIO

from ..jobs.archives import open_inside, zip_directory
from ..jobs.logs import MAX_CHUNK, read_log
from ..jobs.models import Job, JobSpec, SpecError
from ..jobs.service import JobService
from ..jobs.store import UnknownJob
from ..version import __version__
from .execargs import EXEC_STARTS, parse_exec_args
from .formats import ELOG_PATTERNS, parse_elog_line
from .wmla import (
    EXEC_SURFACE,
    INSTANCE_GROUP,
    exec_annotations,
    exec_info,
    exec_state,
    executor_worker,
    instance_group_id,
)

__all__ = ["EXECUTOR_STREAMS", "LOG_TYPES", "Execs", "app_name", "data_dir", "lastlines"]

FRAMEWORK = EXEC_STARTS[0]  # edtPyTorch
LOG_TYPES = ("outlog", "errlog")
EXECUTOR_STREAMS = ("stdout", "stderr")
TAR_SUFFIX = ".modelDir.tar"
MAX_LASTLINES = 100_000
# The training log is read whole by its clients: up to this much of each process's elog file
# (some 140 000 lines); a longer one is cut at its start.
TRAIN_LOG_MAX = 16 * MAX_CHUNK
USERNAME = "{username}"


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


def _bad_data(message: str) -> SpecError:
    return SpecError("args", f"--cs-datastore-meta data_path: {message}")


def user_data_root(template: str, user: str) -> str:
    """The data root of `user`: `template` with ``{username}`` put in (one root per user under
    a Hub)."""
    if USERNAME not in template:
        return template
    if "/" in user or user in ("", ".", ".."):
        raise _bad_data(f"the user name {user!r} cannot name a data folder")
    return template.replace(USERNAME, user)


def data_dir(root_template: str, user: str, data_path: str | None, datastore: bool) -> str | None:
    """An exec's DATA_DIR, WMLA's ``$DLI_DATA_FS/<data_path>`` (None: the core's default, the
    job's code). With a data root, `data_path` must stay inside it: no ``..``, not absolute,
    no link out (checked as the server sees the file system now). Without one, only an
    absolute `data_path` means something: a folder on this machine, as before data roots."""
    if not datastore:
        return None
    if not root_template:
        if data_path is None:
            return None
        if not os.path.isabs(data_path):
            raise _bad_data(
                f"{data_path!r} is relative, and this server has no data root to put it under "
                "(EDTApp.data_root, or $DLI_DATA_FS)"
            )
        return os.path.normpath(data_path)
    root = user_data_root(root_template, user)
    if data_path is None:
        return root
    if data_path.startswith("/") or ".." in PurePosixPath(data_path).parts:
        raise _bad_data(f"{data_path!r} leaves the data root: give a path inside it")
    target = os.path.normpath(os.path.join(root, data_path))
    real_root = os.path.realpath(root)
    if os.path.commonpath([real_root, os.path.realpath(target)]) != real_root:
        raise _bad_data(f"{data_path!r} leaves the data root through a link")
    return target


def lastlines(raw: str | None) -> int | None:
    """The ``lastlines`` query parameter: None (all there is, up to 1 MiB), or 1 to
    ``MAX_LASTLINES``."""
    if raw is None:
        return None
    if not re.fullmatch(r"[0-9]{1,9}", raw.strip()) or not 1 <= int(raw) <= MAX_LASTLINES:
        raise SpecError("lastlines", f"must be an integer from 1 to {MAX_LASTLINES}, got {raw!r}")
    return int(raw)


def _executor(raw: str) -> int:
    if not re.fullmatch(r"[0-9]{1,6}", raw) or int(raw) < 1:
        raise SpecError("executor", f"must be an executor number from 1, got {raw!r}")
    return int(raw)


def framework_version() -> str:
    """The installed torch's version, read without importing torch into the server."""
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return "unknown"


class Execs:
    def __init__(
        self, service: JobService, *, data_root: str = "", scheduler_url: str = ""
    ) -> None:
        self.service = service
        #: DATA_DIR's root (WMLA's DLI_DATA_FS), ``{username}`` standing for the user
        self.data_root = data_root
        #: this server's deep-learning API as the caller reached it (``schedulerUrl``)
        self.scheduler_url = scheduler_url

    @functools.cached_property
    def sig_id(self) -> str:
        return instance_group_id(self.service.runner.jobs_dir)

    # the platform ----------------------------------------------------------------------------

    def conf(self) -> dict[str, Any]:
        """What ``GET /conf`` tells a client: a health check, which clients do not read."""
        return {
            "product": "jupyter-edt",
            "version": __version__,
            "frameworks": [FRAMEWORK],
            "sigId": self.sig_id,
            "sigName": INSTANCE_GROUP,
            "dataRoot": bool(self.data_root),
        }

    def frameworks(self) -> list[dict[str, Any]]:
        return [
            {
                "name": FRAMEWORK,
                "description": "Elastic distributed training of PyTorch programs (jupyter-edt)",
                "desc": [
                    "FabricModel programs grow and shrink in place; the result does not "
                    "depend on the GPU count",
                    "--edt-options maxWorkers=N or --numWorker N: the most GPUs, one a worker",
                ],
                "frameworkVersion": framework_version(),
            }
        ]

    # views ---------------------------------------------------------------------------------

    def view(self, job: Job) -> dict[str, Any]:
        """An exec as WMLA's API shows it. ``submissionId`` (the driver's id) and ``appId`` are
        the exec's id, as Conductor's ``driver.id`` is. ``nameSpace`` (WMLA's Kubernetes
        namespace: where its execs run) is the instance group's name, this server's one pool;
        ``schedulerUrl`` the deep-learning API that schedules it, as the caller reached it."""
        info = exec_info(job.spec)
        state = exec_state(job.state, job.reason)
        out: dict[str, Any] = {
            "id": job.id,
            "sigId": self.sig_id,
            "submissionId": job.id,
            "appId": job.id,
            "state": state,
            "appName": job.name,
            "args": info.args if info is not None else "",
            "creator": job.user,
            "modelFileOwnerName": job.user,
            "elastic": True,
            "framework": FRAMEWORK,
            "numWorker": job.max_gpus,
            "runningWorkers": len(job.devices),
            "workDir": str(self.service.runner.result_dir(job.id)),
            "createTime": _iso(job.created),
            "endTime": _iso(job.finished),
            "user": job.user,
            "message": job.reason,
            "nameSpace": INSTANCE_GROUP,
            "schedulerUrl": self.scheduler_url,
        }
        if state in ("ERROR", "FAILED"):
            why = f": {job.reason}" if job.reason else ""
            out["events"] = f"Job {job.id} task <1> failed{why}"
        return out

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
        data = data_dir(self.data_root, user, parsed.data_path, parsed.datastore)
        name = app_name(filename)
        spec = JobSpec.from_dict(
            {
                "name": name,
                "max_gpus": parsed.max_workers,
                "min_gpus": parsed.min_workers,
                "entrypoint": parsed.model_main,
                "args": list(parsed.program_args),
                "env": {} if data is None else {"EDT_DATA_DIR": data},
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

    # results and logs ----------------------------------------------------------------------

    def result_dir(self, user: str, exec_id: str) -> Path:
        self._job(user, exec_id)
        return self.service.result_dir(user, exec_id)

    async def result_zip(self, user: str, exec_id: str) -> tuple[IO[bytes], int]:
        """The result directory zipped into an anonymous file, and its size: clients read the
        size before the body, to draw a progress bar."""
        root = self.result_dir(user, exec_id)
        return await asyncio.to_thread(_zip_to_file, root, self.service.runner.jobs_dir)

    async def log(self, user: str, exec_id: str, log_type: str | None = None) -> str:
        """The training log (`log_type` None), or ``outlog``, ``errlog`` (see the module)."""
        if log_type is not None and log_type not in LOG_TYPES:
            raise SpecError("logType", f"must be one of {', '.join(LOG_TYPES)}, got {log_type!r}")
        self._job(user, exec_id)  # on the event loop, as every use of the store; files after
        job_dir = self.service.runner.job_dir(exec_id)
        if log_type is None:
            return await asyncio.to_thread(_training_log, job_dir.root)
        logs = job_dir.logs
        if log_type == "errlog":
            paths = [logs / "driver.stderr"]
        else:
            workers = sorted(logs.glob("w*.out"), key=lambda p: _natural(p.stem))
            paths = [logs / "driver.stdout", *workers]
        return await asyncio.to_thread(lambda: "".join(_tail(logs.parent, p) for p in paths))

    async def executor_log(
        self, user: str, exec_id: str, executor: str, stream: str, last: str | None
    ) -> str:
        """Executor `executor`'s output (its last `last` lines); 404 for one that never ran."""
        if stream not in EXECUTOR_STREAMS:
            raise SpecError("stream", f"must be one of {', '.join(EXECUTOR_STREAMS)}")
        number, tail = _executor(executor), lastlines(last)
        self._job(user, exec_id)
        name = f"{executor_worker(number)}.out"
        log_dir = self.service.runner.log_dir(exec_id)
        lines = MAX_LASTLINES if tail is None else tail
        try:
            chunk = await asyncio.to_thread(read_log, log_dir, name, tail=lines)
        except ValueError:
            raise UnknownExecutor(exec_id, number) from None
        return chunk.text


class UnknownExecutor(UnknownJob):
    """An executor (worker) the exec never started: 404, as an unknown exec is."""

    def __str__(self) -> str:
        exec_id, number = self.args
        return f"Exec {exec_id!r} has no executor {number} (executors are numbered from 1)."


def _zip_to_file(root: Path, staging: Path) -> tuple[IO[bytes], int]:
    staging.mkdir(parents=True, exist_ok=True)
    # the caller closes it
    f = tempfile.TemporaryFile(dir=staging, prefix=".result-")  # noqa: SIM115
    try:
        for chunk in zip_directory(root):
            f.write(chunk)
        size = f.tell()
        f.seek(0)
    except BaseException:
        f.close()
        raise
    return f, size


def _training_log(job_dir: Path) -> str:
    """Every process's elog lines, merged by their timestamps; any other line (a print of the
    helpers', a line cut by the size limit) left out."""
    files = sorted({p for pattern in ELOG_PATTERNS for p in job_dir.glob(pattern)})
    merged = heapq.merge(*(_elog_lines(job_dir, p) for p in files), key=lambda item: item[0])
    return "".join(line for _, line in merged)


def _natural(name: str) -> tuple[int, str]:
    """``w2`` before ``w10``."""
    digits = name.lstrip("w")
    return (int(digits), name) if digits.isdigit() else (-1, name)


def _read_tail(root: Path, path: Path, limit: int) -> str:
    try:  # no links, no fifos: the job's user owns its directory
        f, size = open_inside(root, path)
    except (FileNotFoundError, ValueError):
        return ""
    with f:
        f.seek(max(0, size - limit))
        data = f.read(limit)
    return data.decode(errors="replace")


def _tail(root: Path, path: Path) -> str:
    text = _read_tail(root, path, MAX_CHUNK)
    return text if not text or text.endswith("\n") else text + "\n"


def _elog_lines(root: Path, path: Path) -> Iterator[tuple[int, str]]:
    for line in _read_tail(root, path, TRAIN_LOG_MAX).splitlines():
        fields = parse_elog_line(line)
        if fields is not None:
            yield fields["timestamp"], line + "\n"
