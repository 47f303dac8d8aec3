"""Follows the JSON-lines event files a job's processes write, reading each line once."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .archives import open_inside
from .plugins import JobPlugin

# Events that carry training metrics and progress, and what orders each within a run.
METRIC_EVENTS = {"train_begin": "generation", "step": "global_step", "epoch": "epoch"}
# Which process reported an event: not what the job measured.
REPORTER_FIELDS = ("seq", "pid", "worker", "rank")


class MetricRecords:
    """Picks the job's metric records out of its workers' events, each step and epoch once.

    Every worker computes the same values (the reduction is global), so the first copy of a
    step or epoch that arrives, whichever worker wrote it, is the job's: a worker lost with its
    node before what it wrote came back loses none of them. Within a run of the job's workers
    (``run``: one driver's) steps and epochs only go forward, so a copy at or behind the last
    one taken is a duplicate; a resumed job is a new run and reports its steps again.
    ``train_begin`` counts from rank 0 (each worker's own start), as does every event with no
    run (an older runtime).

    `taken`: records already kept (a restarted server's newest, `JobStore.latest_metrics`), so
    that reading the event files again from their start adds nothing twice.
    """

    def __init__(self, taken: Iterable[Mapping[str, Any]] = ()) -> None:
        self._last: dict[tuple[str, str], int] = {}  # (run, type) -> its last index taken
        for record in taken:
            self._first(record)

    def pick(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The job's metric records among these events (read in time order), once each."""
        return [
            {k: v for k, v in e.items() if k not in REPORTER_FIELDS}
            for e in events
            if e.get("type") in METRIC_EVENTS and self._first(e)
        ]

    def _first(self, event: Mapping[str, Any]) -> bool:
        kind, run = str(event.get("type")), event.get("run")
        index = event.get(METRIC_EVENTS.get(kind, ""))
        if kind == "train_begin" and event.get("rank", 0) != 0:
            return False
        if run is None or not isinstance(index, int):
            return event.get("rank", 0) == 0
        key = (str(run), kind)
        if index <= self._last.get(key, -1):
            return False
        self._last[key] = index
        return True


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
    """A job's new metric records: its workers' runtime events (`MetricRecords`, past those
    `taken`), then what each plugin reads from the metric files its programs write (WMLA's
    emetrics, say)."""

    def __init__(
        self,
        job_root: Path,
        log_dir: Path,
        plugins: Sequence[JobPlugin] = (),
        taken: Iterable[Mapping[str, Any]] = (),
    ) -> None:
        self.events = EventTail(log_dir)
        self.records = MetricRecords(taken)
        self.plugins = [(p, EventTail(job_root, tuple(p.metric_files))) for p in plugins]

    def read_new(self) -> list[dict[str, Any]]:
        records = self.records.pick(self.events.read_new())
        for plugin, tail in self.plugins:
            records += plugin.metric_records(tail.read_new())
        return records
