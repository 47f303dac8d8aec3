"""A job's directory: the one place the server and the job's driver exchange orders and status.

Drivers always run beside the job service (workers may run elsewhere), so a directory is the
whole control channel: orders and status are JSON files replaced atomically, events are
JSON-lines files that only grow. It needs no port or token, and it outlives a server restart,
which is how a restarted server finds its running jobs again.

Layout of ``<jobs_dir>/<job id>/``:
  job.json      the program to run and the job's environment (``env``: every worker gets it,
                see ``environment.py``), written by the server before each start
  orders.json   ``{"seq": n, "action": "run" | "suspend", "devices": [...]}`` (server); a device
                is ``{"id", "index", "uuid", "virtual"}``
  status.json   ``{"pid": ..., "state": ..., "elastic": ..., "generation": ...,
                "workers": {...}}`` (driver): ``state`` is starting, running (its processes
                are up), suspending, suspended (with ``checkpointed``), exited or failed (with
                ``error``); ``elastic`` turns true once the workers' runtime has formed its
                group; ``device_failures``: device id -> workers that failed on it;
                ``replacements``: workers started on such devices; ``lost_with_node``:
                workers lost with their node (charged to no device); ``formed``: the newest
                generation that formed (its size, the survivors' pause, when)
  code/         the submitted code; the working directory of every process
  result/       RESULT_DIR: checkpoints (``checkpoint/ckpt-<global step>.pt``), the final model
  logs/         LOG_DIR: one stdout/stderr pair and one events file per process
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

# A checkpoint's file name holds its global step, so its step is known without loading it.
CHECKPOINT_RE = re.compile(r"^ckpt-(\d{9})\.pt$")


def checkpoint_name(step: int) -> str:
    return f"ckpt-{step:09d}.pt"


def checkpoints(directory: str | os.PathLike[str]) -> list[Path]:
    """The checkpoints in `directory`, oldest (lowest global step) first."""
    d = Path(directory)
    if not d.is_dir():
        return []
    return sorted(p for p in d.iterdir() if CHECKPOINT_RE.match(p.name))


def write_json_atomic(path: Path, data: Any) -> None:
    """Readers see the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_json(path: Path) -> Any:
    """The file's JSON, or None while it does not exist yet."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


class JobDir:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.job = self.root / "job.json"
        self.orders = self.root / "orders.json"
        self.status = self.root / "status.json"
        self.code = self.root / "code"
        self.result = self.root / "result"
        self.checkpoints = self.result / "checkpoint"
        self.logs = self.root / "logs"

    def create(self) -> None:
        for d in (self.code, self.result, self.logs):
            d.mkdir(parents=True, exist_ok=True)

    def read_orders(self) -> dict[str, Any] | None:
        return read_json(self.orders)

    def write_orders(self, orders: dict[str, Any]) -> None:
        write_json_atomic(self.orders, orders)

    def read_status(self) -> dict[str, Any] | None:
        return read_json(self.status)

    def write_status(self, status: dict[str, Any]) -> None:
        write_json_atomic(self.status, status)

    def latest_checkpoint_step(self) -> int | None:
        """The global step of the newest checkpoint, None when there is none."""
        found = checkpoints(self.checkpoints)
        return int(CHECKPOINT_RE.match(found[-1].name)[1]) if found else None  # type: ignore[index]


def process_start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, or None if it is gone (or a zombie).

    Together with the pid it identifies a process: a reused pid has another start time.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] == "Z":
        return None
    return int(fields[19])
