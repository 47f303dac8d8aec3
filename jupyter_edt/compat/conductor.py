"""WMLA's Conductor monitoring API as a facade over ``JobService`` (the handlers in
``api/conductor.py`` only shape HTTP around it).

Conductor shows an instance group's *applications*: here, the execs (jobs submitted through the
execs API; native jobs have their own API and stay out, as in ``compat.execs``) of this
server's one instance group. An application is named by its driver (the exec's id, which is its
``submissionId``); its *executors* are the workers that run now, numbered as the execs API
numbers them (worker ``w0`` is executor 1, ``compat.wmla.executor_number``).

Figures of an application: ``gpuslots``, the GPUs it holds; ``gpumemused.total``, the memory
used on them in MiB, and ``gpudevutil.total``, their mean utilisation in percent, both from the
device monitor's latest NVML reading (0 on virtual GPUs, which have no such figures);
``apprunduration``, minutes since it was submitted (until it ended).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from ..jobs.archives import open_inside
from ..jobs.models import Job, JobState
from ..jobs.service import JobService
from ..jobs.store import UnknownJob
from ..scheduling.inventory import Device
from .wmla import exec_info, exec_state, executor_number, executor_worker, instance_group_id

__all__ = ["STREAMS", "Conductor", "UnknownExecutor", "UnknownInstanceGroup"]

#: A process's outputs, as Conductor names them.
STREAMS = ("stdout", "stderr")
MIB = 1 << 20
#: WMLA's state names an application can be in (``compat.wmla.exec_state``).
APPLICATION_STATES = (
    "PENDING_CRD_SCHEDULER", "SUBMITTED", "RUNNING", "FINISHED", "FAILED", "ERROR", "KILLED",
    "STOPPED",
)  # fmt: skip


class UnknownInstanceGroup(LookupError):
    def __str__(self) -> str:
        sig_id, ours = self.args
        return f"No instance group with id {sig_id!r} here: this server's is {ours!r}."


class UnknownExecutor(LookupError):
    def __str__(self) -> str:
        return f"Application {self.args[0]!r} has no executor {self.args[1]!r}."


class Conductor:
    def __init__(self, service: JobService, devices: Sequence[Device]) -> None:
        """`devices`: the monitor's latest reading (requests never wait on NVML)."""
        self.service = service
        self.devices = {d.id: d for d in devices}

    @functools.cached_property
    def sig_id(self) -> str:
        return instance_group_id(self.service.runner.jobs_dir)  # type: ignore[attr-defined]

    def check_group(self, sig_id: str) -> None:
        """The server's one instance group, or UnknownInstanceGroup naming both."""
        if sig_id != self.sig_id:
            raise UnknownInstanceGroup(sig_id, self.sig_id)

    def _exec(self, user: str, driver_id: str) -> Job:
        job = self.service.get(user, driver_id)
        if exec_info(job.spec) is None:
            raise UnknownJob(driver_id)  # a native job: no application of Conductor's
        return job

    # views ---------------------------------------------------------------------------------

    def applications(self, user: str, states: Iterable[str] = ()) -> list[dict[str, Any]]:
        """The caller's applications (an administrator's: everyone's), in those WMLA `states`
        (all when none). ValueError naming a state WMLA does not have."""
        wanted = set(states)
        unknown = sorted(wanted - set(APPLICATION_STATES))
        if unknown:
            names = ", ".join(APPLICATION_STATES)
            raise ValueError(f"state must be one of {names}, got {unknown[0]!r}")
        jobs = [j for j in self.service.list(user) if exec_info(j.spec) is not None]
        views = [self.view(job) for job in jobs]
        return [v for v in views if not wanted or v["state"] in wanted]

    def view(self, job: Job) -> dict[str, Any]:
        state = exec_state(job.state, job.reason)
        held = [self.devices[d] for d in job.devices if d in self.devices]
        measured = [d for d in held if not d.virtual]
        memory = sum(d.memory_used or 0 for d in measured) / MIB
        utilisation = [d.utilization or 0 for d in measured]
        mean = sum(utilisation) / len(utilisation) if utilisation else 0
        end = job.finished if job.finished is not None else time.time()
        return {
            "id": job.id,
            "name": job.name,
            "user": job.user,
            "state": state,
            "sigId": self.sig_id,
            "driver": {"id": job.id, "state": state},
            "apprunduration": round(max(0.0, end - job.created) / 60, 2),
            "gpuslots": len(job.devices),
            "gpumemused": {"total": round(memory, 1)},
            "gpudevutil": {"total": round(mean, 1)},
            "executors": self._executors(job),
        }

    def _executors(self, job: Job) -> list[dict[str, Any]]:
        """The workers running now, as the driver last reported them (its ``status.json``)."""
        if job.state != JobState.RUNNING:
            return []
        status = self.service.runner.job_dir(job.id).read_status() or {}
        workers: Mapping[str, str] = status.get("workers") or {}
        out = []
        for worker, device_id in sorted(workers.items(), key=lambda w: executor_number(w[0]) or 0):
            number = executor_number(worker)
            if number is None:
                continue
            device = self.devices.get(device_id)
            out.append(
                {
                    "id": str(number),
                    "state": "RUNNING",
                    "worker": worker,
                    "device": device_id,
                    "host": device.node if device is not None else None,
                }
            )
        return out

    # logs ----------------------------------------------------------------------------------

    def driver_log(self, user: str, driver_id: str, stream: str) -> tuple[BinaryIO, int] | None:
        """The driver's stdout or stderr, opened, with its size; None before it wrote any."""
        self._exec(user, driver_id)
        return _open(self.service.runner.log_dir(driver_id), f"driver.{_stream(stream)}")

    def executor_log(
        self, user: str, driver_id: str, executor_id: str, stream: str
    ) -> tuple[BinaryIO, int]:
        """One worker's output. A worker's stdout and stderr are one stream (its ``.out``
        file, in the order it wrote them), so both names give it. UnknownExecutor for a
        number no worker of the application ever had."""
        self._exec(user, driver_id)
        _stream(stream)
        if not executor_id.isdigit():
            raise UnknownExecutor(driver_id, executor_id)
        try:
            worker = executor_worker(int(executor_id))
        except ValueError as err:
            raise UnknownExecutor(driver_id, executor_id) from err
        opened = _open(self.service.runner.log_dir(driver_id), f"{worker}.out")
        if opened is None:
            raise UnknownExecutor(driver_id, executor_id)
        return opened


def _stream(stream: str) -> str:
    if stream not in STREAMS:
        raise ValueError(f"the output is stdout or stderr, not {stream!r}")
    return stream


def _open(log_dir: Path, name: str) -> tuple[BinaryIO, int] | None:
    """A log of the job's, opened without links (its user owns the directory)."""
    try:
        return open_inside(log_dir, log_dir / name)
    except (FileNotFoundError, ValueError):
        return None
