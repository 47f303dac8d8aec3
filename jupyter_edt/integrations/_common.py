"""What the Hugging Face and Lightning integrations share: the job a worker runs in, as its
environment says it; the request to stop that SIGTERM makes; the step at which every worker
agrees to honour it; and the global batch kept at every size.

Nothing here imports a training framework, so that a program using one integration needs only
its own framework installed.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import signal
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from ..runtime.events import EventLog
from ..runtime.jobdir import write_json_atomic
from ..runtime.submission import EFFECTIVE_BATCH_ENV

#: Under ``RESULT_DIR``: the integrations' checkpoints (``checkpoint-<global step>``, the name
#: Hugging Face gives its own) and the record of the global batch. The elastic runtime keeps
#: its own in ``checkpoint/``; a job is one kind or the other, the names still never meet.
CHECKPOINTS = "checkpoints"
BATCH_RECORD = "effective_batch.json"
CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)(\.ckpt)?$")

#: Why a checkpoint was written, in its event: the job is being restarted at another size.
RESTART = "restart"

_Handler = Callable[[int, FrameType | None], Any] | int | None
_IN_PLACE = object()


@dataclass(frozen=True)
class Job:
    """The jupyter-edt job this process is a worker of; `from_env` says None outside one."""

    log_dir: str
    worker: str
    run: str | None
    result_dir: Path | None
    restart_count: int
    effective_batch: int | None

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> Job | None:
        log_dir = env.get("EDT_LOG_DIR")
        if not log_dir:
            return None
        batch = env.get(EFFECTIVE_BATCH_ENV) or None
        if batch is not None and (not batch.isdigit() or int(batch) < 1):
            raise ValueError(f"{EFFECTIVE_BATCH_ENV} must be a positive integer, got {batch!r}.")
        result = env.get("RESULT_DIR")
        return cls(
            log_dir=log_dir,
            worker=env.get("EDT_WORKER_ID") or f"rank{env.get('RANK', '0')}",
            run=env.get("EDT_RUN") or None,
            result_dir=Path(result) if result else None,
            restart_count=int(env.get("TORCHELASTIC_RESTART_COUNT") or 0),
            effective_batch=int(batch) if batch is not None else None,
        )

    @property
    def checkpoint_dir(self) -> Path | None:
        return self.result_dir / CHECKPOINTS if self.result_dir is not None else None

    def events(self, rank: int, speaks: bool) -> Reporter:
        return Reporter(self, rank, speaks)


class Reporter:
    """Writes the job's events as the runtime's Trainer does (``runtime/trainer.py``), so the
    service's metrics, the loss chart and the widgets read them alike. Every worker computes
    the same step, so one (`speaks`: rank 0) reports for the job and the others write nothing.
    ``generation`` is the restart count: each start of the workers is a new run."""

    def __init__(self, job: Job, rank: int, speaks: bool) -> None:
        self.rank = rank
        self.generation = job.restart_count
        self._log = EventLog(job.log_dir, job.worker, run=job.run) if speaks else None

    def emit(self, kind: str, **fields: Any) -> None:
        if self._log is not None:
            self._log.emit(kind, generation=self.generation, rank=self.rank, **fields)

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


class StopRequest:
    """SIGTERM, the service's way of restarting a job at another size, turned into a request
    the training loop honours at an optimizer step's end (a handler that raised would stop the
    program wherever it stood). A handler found in place is still called after the flag is
    set, unless it is the default action (death) or ignoring."""

    def __init__(self) -> None:
        self.requested = False
        self._installed = False
        self._replaced: _Handler = None
        self._chained: _Handler = None

    def install(self, chained: _Handler | object = _IN_PLACE) -> None:
        """Handle SIGTERM from now on (once). `chained` is the handler called after ours: by
        default the one in place now, which `uninstall` puts back in any case."""
        if self._installed or threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread
        self._replaced = signal.getsignal(signal.SIGTERM)
        self._chained = self._replaced if chained is _IN_PLACE else chained  # type: ignore[assignment]
        signal.signal(signal.SIGTERM, self._handle)
        self._installed = True

    def uninstall(self) -> None:
        if not self._installed or threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGTERM) == self._handle:
            signal.signal(signal.SIGTERM, self._replaced)
        self._installed = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True
        if callable(self._chained):
            self._chained(signum, frame)


def any_worker(flag: bool) -> bool:
    """Whether `flag` is true on any worker: one all-reduce (MAX) of one element, on the
    device the default group's backend reduces on (CUDA for nccl, the host for gloo). Every
    worker must call it at the same point: SIGTERM reaches them at slightly different times,
    and they must stop at the same step."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return flag
    on_cuda = "nccl" in str(dist.get_backend()).lower() and torch.cuda.is_available()
    device = torch.device("cuda", torch.cuda.current_device()) if on_cuda else torch.device("cpu")
    t = torch.tensor([1.0 if flag else 0.0], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item() > 0)


def destroy_process_group_at_exit() -> None:
    """Destroy the default process group when the interpreter exits, if the program did not.

    Neither the Hugging Face Trainer nor Lightning destroys it, and a gloo group left to the
    interpreter's finalization can abort the process (SIGABRT, "terminate called without an
    active exception": torch's gloo work threads still hold Python objects) after training
    ended well, which would fail the job. ``atexit`` runs while the interpreter is whole,
    after any ``SystemExit`` has unwound the program; every worker gets there at the end of
    training or at the step they agreed to stop at, so none waits on another."""
    global _destroy_registered
    if not _destroy_registered:
        atexit.register(_destroy_process_group)
        _destroy_registered = True


_destroy_registered = False


def _destroy_process_group() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def gradient_accumulation(
    job: Job | None, per_device: int, world_size: int, accumulation: int, *, writer: bool
) -> int:
    """The accumulation that keeps the job's global batch at this size.

    The global batch is the job's (``EDT_EFFECTIVE_BATCH_SIZE``) or else the one the program
    configured at its first start (per-device batch x workers x accumulation), recorded under
    ``RESULT_DIR`` by the `writer` (rank 0) so a restart at another size keeps it. Outside a
    job the program's own accumulation stands.
    """
    if job is None:
        return accumulation
    effective = job.effective_batch
    record = job.checkpoint_dir / BATCH_RECORD if job.checkpoint_dir is not None else None
    if effective is None and record is not None and record.is_file():
        effective = int(json.loads(record.read_text(encoding="utf-8"))["effective_batch"])
    if effective is None:
        effective = per_device * world_size * accumulation
        if record is not None and writer:
            write_json_atomic(
                record,
                {
                    "effective_batch": effective,
                    "per_device_batch": per_device,
                    "world_size": world_size,
                    "accumulation": accumulation,
                },
            )
    per_step = per_device * world_size
    if effective % per_step:
        raise ValueError(
            f"The effective batch of {effective} samples per optimizer step cannot be kept with "
            f"a per-device batch of {per_device} on {world_size} workers: it is not a multiple of "
            f"{per_device} x {world_size} = {per_step}. Choose an effective batch that every "
            "worker count the job may run at divides into whole per-device batches."
        )
    return effective // per_step


def newest_checkpoint(directory: str | os.PathLike[str] | None, suffix: str = "") -> Path | None:
    """The checkpoint of the highest global step in `directory`, ``checkpoint-<step>`` plus
    `suffix`: a file (Lightning's, written under another name and renamed), or without a
    suffix a directory (Hugging Face's) holding ``trainer_state.json``, which it writes last."""
    if directory is None or not Path(directory).is_dir():
        return None
    found = []
    for path in Path(directory).iterdir():
        m = CHECKPOINT_RE.match(path.name)
        if m is None or (m.group(2) or "") != suffix:
            continue
        complete = (path / "trainer_state.json").is_file() if not suffix else path.is_file()
        if complete:
            found.append((int(m.group(1)), path))
    return max(found)[1] if found else None


def val_metrics(metrics: Mapping[str, Any], prefixes: tuple[str, ...]) -> dict[str, float]:
    """Evaluation values under the names the loss chart plots (``val_<name>``), from a
    framework's names (``eval_loss``, ``val/acc``, ...); numbers only."""
    out: dict[str, float] = {}
    for key, value in metrics.items():
        for prefix in prefixes:
            if key.startswith(prefix) and len(key) > len(prefix):
                number = _number(value)
                if number is not None:
                    out[f"val_{key[len(prefix) :]}"] = number
                break
    return out


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    item = getattr(value, "item", None)  # a one-element tensor
    if callable(item) and getattr(value, "numel", lambda: 0)() == 1:
        return float(item())
    return None
