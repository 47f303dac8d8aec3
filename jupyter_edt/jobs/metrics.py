"""Follows the JSON-lines event files a job's processes write, reading each line once."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .archives import open_inside
from .plugins import JobPlugin

# Events that carry training metrics and progress, and what orders each within a run.
METRIC_EVENTS = {"train_begin": "generation", "step": "global_step", "epoch": "epoch"}
# Which process reported an event: not what the job measured.
REPORTER_FIELDS = ("seq", "pid", "worker", "rank")


@dataclass(frozen=True)
class ReadFrom:
    """Where reading a job's metric files takes up again, as the store kept it: every driver
    of the job (a resumed one, one a restarted server follows) reads on from there, so no
    record is stored twice.

    `positions`: how far each file was read (paths relative to the job directory), committed
    with the records read up to there (`JobStore.add_metrics_many`). `taken`: the newest record
    of each kind, so a copy of a step that another worker's file holds further on (where its
    reading had not reached) is not taken again.
    """

    positions: Mapping[str, int] = field(default_factory=dict)
    taken: Sequence[Mapping[str, Any]] = ()


class MetricRecords:
    """Picks the job's metric records out of its workers' events, each step and epoch once.

    Every worker computes the same values (the reduction is global), so the first copy of a
    step or epoch that arrives, whichever worker wrote it, is the job's: a worker lost with its
    node before what it wrote came back loses none of them. Within a run of the job's workers
    (``run``: one driver's) steps and epochs only go forward, so a copy at or behind the last
    one taken is a duplicate; a resumed job is a new run and reports its steps again.
    ``train_begin`` counts from rank 0 (each worker's own start), as does every event with no
    run (an older runtime).

    `taken`: records already kept (`ReadFrom.taken`), so that a copy of one of them read
    later adds nothing twice.
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

    def __init__(
        self,
        log_dir: Path,
        patterns: tuple[str, ...] = ("events-*.jsonl",),
        offsets: Mapping[Path, int] | None = None,
    ) -> None:
        self.log_dir = log_dir
        self.patterns = patterns
        # of `offsets` (a whole job's, say), those of the files this tail reads
        self._offsets = {path: n for path, n in (offsets or {}).items() if self._reads(path)}
        self._lock = threading.Lock()  # read from executor threads: each line goes out once

    def read_new(self) -> list[dict[str, Any]]:
        with self._lock:
            return self._read_new()

    def _reads(self, path: Path) -> bool:
        try:
            name = path.relative_to(self.log_dir)
        except ValueError:
            return False
        return any(len(name.parts) == len(Path(p).parts) and name.match(p) for p in self.patterns)

    def offsets(self) -> dict[Path, int]:
        """How far each file has been read (complete lines only)."""
        with self._lock:
            return dict(self._offsets)

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
    """A job's new metric records: its workers' runtime events (`MetricRecords`), then what
    each plugin reads from the metric files its programs write (WMLA's emetrics, say), from
    where an earlier reading stopped (`start`)."""

    def __init__(
        self,
        job_root: Path,
        log_dir: Path,
        plugins: Sequence[JobPlugin] = (),
        start: ReadFrom = ReadFrom(),
    ) -> None:
        self.job_root = job_root
        offsets = {
            Path(os.path.normpath(job_root / name)): offset
            for name, offset in start.positions.items()
        }
        self.events = EventTail(log_dir, offsets=offsets)
        self.records = MetricRecords(start.taken)
        self.plugins = [(p, EventTail(job_root, tuple(p.metric_files), offsets)) for p in plugins]

    def read_new(self) -> list[dict[str, Any]]:
        records = self.records.pick(self.events.read_new())
        for plugin, tail in self.plugins:
            records += plugin.metric_records(tail.read_new())
        return records

    def positions(self) -> dict[str, int]:
        """How far each file has been read, by its path relative to the job directory: what
        the store keeps with the records (`ReadFrom.positions`)."""
        return {
            os.path.relpath(path, self.job_root): offset
            for tail in (self.events, *(t for _, t in self.plugins))
            for path, offset in tail.offsets().items()
        }
