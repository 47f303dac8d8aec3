"""Structured JSON events, one line each, with a sequence number that only grows.

Each worker writes ``events-<worker>.jsonl`` and a plain-text ``<worker>.log`` into the job's log
directory; the controller merges the event files into its reports. In a plain process the events
stay in memory (``EventLog.records``) so a notebook can read them.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["EventLog", "read_events"]


class EventLog:
    """Writes events for one worker; ``seq`` increases by one per event."""

    def __init__(
        self, log_dir: str | os.PathLike[str] | None, worker: str, run: str | None = None
    ) -> None:
        self.worker = worker
        self.run = run
        self.records: list[dict[str, Any]] = []
        self._seq = 0
        self._lock = threading.Lock()
        self._file = None
        self.logger = logging.getLogger(f"jupyter_edt.runtime.{worker}")
        if log_dir is not None:
            path = Path(log_dir)
            path.mkdir(parents=True, exist_ok=True)
            self._file = open(path / f"events-{worker}.jsonl", "a", encoding="utf-8")  # noqa: SIM115
            handler = logging.FileHandler(path / f"{worker}.log", encoding="utf-8")
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
            self.logger.addHandler(handler)
            self.logger.setLevel(logging.INFO)
            self.logger.propagate = False

    def emit(self, kind: str, **fields: Any) -> dict[str, Any]:
        """Record one event and return it."""
        with self._lock:
            self._seq += 1
            event = {
                "seq": self._seq,
                "time": time.time(),
                "type": kind,
                "worker": self.worker,
                "pid": os.getpid(),
                **({} if self.run is None else {"run": self.run}),
                **fields,
            }
            if self._file is not None:
                self._file.write(_json_line(event) + "\n")
                self._file.flush()
            else:
                self.records.append(event)
        return event

    def info(self, message: str, *args: object) -> None:
        """A line in the worker's text log."""
        self.logger.info(message, *args)

    def close(self) -> None:
        """Flush and close the files."""
        if self._file is not None:
            self._file.close()
            self._file = None
        for handler in list(self.logger.handlers):
            handler.close()
            self.logger.removeHandler(handler)


def read_events(log_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """All complete events of a job, ordered by time then per-worker ``seq``."""
    events: list[dict[str, Any]] = []
    for path in sorted(Path(log_dir).glob("events-*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut short by SIGKILL
                continue
    events.sort(key=lambda e: (e["time"], e["worker"], e["seq"]))
    return events


def _json_line(event: dict[str, Any]) -> str:
    """One event as strict JSON: a loss that overflowed (inf, NaN) is written as null, which
    every JSON reader takes, where Python's ``Infinity`` would break a browser's parser."""
    try:
        return json.dumps(event, allow_nan=False)
    except ValueError:
        safe = {
            k: None if isinstance(v, float) and not math.isfinite(v) else v
            for k, v in event.items()
        }
        return json.dumps(safe)
