"""Follows the JSON-lines event files a job's processes write, reading each line once."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .archives import open_inside
from .plugins import JobPlugin

# Events that carry training metrics and progress. Every worker computes the same values (the
# reduction is global), so rank 0's copy is the job's.
METRIC_EVENTS = frozenset({"train_begin", "step", "epoch"})


def metric_records(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The job's metric records among its workers' events: rank 0's train_begin, step and
    epoch events."""
    return [
        {k: v for k, v in e.items() if k not in ("seq", "pid", "worker")}
        for e in events
        if e.get("type") in METRIC_EVENTS and e.get("rank") == 0
    ]


class EventTail:
    """Reads what was appended to `<log_dir>/events-*.jsonl` since the last call.

    Only complete lines are read: a line still being written (or cut short by SIGKILL) stays
    for the next call, or is skipped when it can never be completed (not valid JSON).
    """

    def __init__(self, log_dir: Path, patterns: tuple[str, ...] = ("events-*.jsonl",)) -> None:
        self.log_dir = log_dir
        self.patterns = patterns
        self._offsets: dict[Path, int] = {}
        self._lock = threading.Lock()  # read from executor threads: each line goes out once

    def read_new(self) -> list[dict[str, Any]]:
        with self._lock:
            return self._read_new()

    def _read_new(self) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = []
        paths = {p for pattern in self.patterns for p in self.log_dir.glob(pattern)}
        for path in sorted(paths):
            offset = self._offsets.get(path, 0)
            try:  # no links, no fifos: the job's user owns the directory
                f, _ = open_inside(self.log_dir, path)
            except (FileNotFoundError, ValueError):
                continue
            with f:
                f.seek(offset)
                chunk = f.read()
            end = chunk.rfind(b"\n") + 1
            if end == 0:
                continue
            self._offsets[path] = offset + end
            for line in chunk[:end].splitlines():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
        records.sort(key=lambda e: (e.get("time", 0.0), str(e.get("worker")), e.get("seq", 0)))
        return records


class JobMetricsTail:
    """A job's new metric records: rank 0's runtime events, then what each plugin reads from
    the metric files its programs write (WMLA's emetrics, say)."""

    def __init__(self, job_root: Path, log_dir: Path, plugins: Sequence[JobPlugin] = ()) -> None:
        self.events = EventTail(log_dir)
        self.plugins = [(p, EventTail(job_root, tuple(p.metric_files))) for p in plugins]

    def read_new(self) -> list[dict[str, Any]]:
        records = metric_records(self.events.read_new())
        for plugin, tail in self.plugins:
            records += plugin.metric_records(tail.read_new())
        return records
