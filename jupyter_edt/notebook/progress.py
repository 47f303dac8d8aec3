"""A one-line progress display for ``Job.wait`` that needs neither tqdm nor ipywidgets.

It picks how to redraw from where it runs:

- in a Jupyter kernel: a display with a ``display_id``, updated in place (plain text, so it
  renders in every frontend and in saved notebooks);
- on a terminal: the line is redrawn with a carriage return;
- otherwise (a log file, CI): a line is written only when the job's state or epoch changes,
  so logs do not fill with redraws.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from ..runtime.submission import EPOCHS_ENV

#: The most of a failed job's reason the line shows: the whole sentence of a program's error
#: (its message is cut at 300 characters where the reason is made, runtime/failures.py).
REASON_LIMIT = 400
# fields of an emetrics record (``compat.formats.emetrics_record``) that are not its values
EMETRICS_FIELDS = frozenset({"type", "id", "time", "group", "iteration", "rindex", "subid"})


def emetrics_values(record: dict[str, Any]) -> dict[str, float]:
    """The numeric values of an emetrics record, by name (strings are not plotted)."""
    return {
        k: v
        for k, v in record.items()
        if k not in EMETRICS_FIELDS and isinstance(v, int | float) and not isinstance(v, bool)
    }


class MetricsTracker:
    """Follows a job's metric records by cursor and keeps what the progress line shows:
    the runtime's last step and epoch records, and a WMLA program's last emetrics record of
    each group (``train``, ``test``), the program's own loop reporting only those."""

    def __init__(self) -> None:
        self.cursor = 0
        self.step: dict[str, Any] | None = None
        self.epoch: dict[str, Any] | None = None
        self.epochs: int | None = None  # as the runtime said when training began
        self.steps_per_epoch: int | None = None
        self.emetrics: dict[str, dict[str, Any]] = {}

    def add(self, records: list[dict[str, Any]]) -> None:
        for record in records:
            if record.get("rank", 0) != 0:
                continue  # every rank reports the same global loss; rank 0 speaks for the job
            kind = record.get("type")
            if kind == "train_begin":  # fit()'s totals, whatever the submission overrode
                self.epochs = _int(record.get("epochs")) or self.epochs
                self.steps_per_epoch = _int(record.get("steps_per_epoch")) or self.steps_per_epoch
            elif kind == "step":
                self.step = record
            elif kind == "epoch":
                self.epoch = record
                if self.step is not None:
                    self.steps_per_epoch = max(
                        self.steps_per_epoch or 0, int(self.step.get("step", 0)) + 1
                    )
            elif kind == "emetrics":
                self._add_emetrics(record)

    def _add_emetrics(self, record: dict[str, Any]) -> None:
        """Keep the record of the furthest iteration per group (several processes may log
        the same iterations, and their files are read one after the other)."""
        group, iteration = record.get("group"), record.get("iteration")
        if not isinstance(group, str) or not isinstance(iteration, int | float):
            return
        last = self.emetrics.get(group)
        if last is None or iteration > last["iteration"]:
            self.emetrics[group] = record


def format_line(job: Any, tracker: MetricsTracker | None, elapsed: float) -> str:
    """``name [id] STATE | GPUs n/max | [###---] epoch e/E · step s/S | loss x | 0:01:05``,
    the sidebar's and the job tab's wording (``step`` within the epoch, the totals those the
    runtime reported); a WMLA program that reports only emetrics gets ``iteration n | loss x
    accuracy y | test loss x`` in place of the epoch, step and loss parts."""
    parts = [f"{job.name or 'job'} [{job.id}] {job.state}"]
    if job.state in ("STARTING", "RUNNING", "SUSPENDED") or job.devices:
        parts.append(f"GPUs {len(job.devices)}/{job.max_gpus}")
    else:
        parts.append(f"max GPUs {job.max_gpus}")
    total = (tracker.epochs if tracker else None) or _int(job.spec.get("env", {}).get(EPOCHS_ENV))
    step = tracker.step if tracker else None
    if step is not None:
        epoch, in_epoch = int(step.get("epoch", 0)), int(step.get("step", 0)) + 1
        per_epoch = tracker.steps_per_epoch if tracker else None
        done = epoch + (in_epoch / per_epoch if per_epoch else 0.0)
        text = f"epoch {epoch + 1}/{total}" if total else f"epoch {epoch + 1}"
        text += f" · step {in_epoch}/{per_epoch}" if per_epoch else f" · step {in_epoch}"
        if total:
            text = bar(min(done / total, 1.0)) + " " + text
        parts.append(text)
        if isinstance(step.get("loss"), int | float):
            parts.append(f"loss {step['loss']:.4g}")
    val_loss = tracker.epoch.get("val_loss") if tracker and tracker.epoch else None
    has_val = isinstance(val_loss, int | float)
    if has_val:
        parts.append(f"val_loss {val_loss:.4g}")
    if tracker is not None:
        parts += _emetrics_parts(tracker, steps=step is not None, val=has_val)
    parts.append(_clock(elapsed))
    if job.done and job.reason and job.state != "SUCCEEDED":
        parts.append(job.reason.splitlines()[0][:REASON_LIMIT])
    return " | ".join(parts)


def _emetrics_parts(tracker: MetricsTracker, *, steps: bool, val: bool) -> list[str]:
    """``iteration n | loss x accuracy y | test loss x accuracy y`` from a WMLA program's
    emetrics, each part only where the runtime's step and epoch records do not say it."""
    parts = []
    train, test = tracker.emetrics.get("train"), tracker.emetrics.get("test")
    if train is not None and not steps:
        parts.append(f"iteration {train['iteration']}")
        if values := emetrics_values(train):
            parts.append(_values_text(values))
    if test is not None and not val and (values := emetrics_values(test)):
        parts.append("test " + _values_text(values))
    return parts


def _values_text(values: dict[str, float], most: int = 3) -> str:
    return " ".join(f"{name} {value:.4g}" for name, value in list(values.items())[:most])


def bar(fraction: float, width: int = 20) -> str:
    filled = round(fraction * width)
    return "[" + "#" * filled + "-" * (width - filled) + f"] {fraction:4.0%}"


class Progress:
    """Shows successive lines in place; call :meth:`close` once at the end."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout
        self.started = time.monotonic()
        self._handle: Any = None
        self._last = ""
        self._width = 0
        self.mode = self._choose_mode(stream)

    @staticmethod
    def _choose_mode(stream: TextIO | None) -> str:
        if stream is None and _in_kernel():
            return "display"
        target = stream or sys.stdout
        isatty = getattr(target, "isatty", None)
        return "tty" if isatty is not None and isatty() else "lines"

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def update(self, line: str) -> None:
        if line == self._last:
            return
        if self.mode == "display":
            from IPython.display import display

            text = _Text(line)
            if self._handle is None:
                self._handle = display(text, display_id=True)
            else:
                self._handle.update(text)
        elif self.mode == "tty":
            pad = max(0, self._width - len(line))
            self.stream.write("\r" + line + " " * pad)
            self.stream.flush()
            self._width = len(line)
        elif _key(line) != _key(self._last):
            self.stream.write(line + "\n")
            self.stream.flush()
        self._last = line

    def close(self, line: str | None = None) -> None:
        """Show the final line (always, in every mode) and end the display."""
        if line is not None:
            if self.mode == "lines" and line != self._last:
                self.stream.write(line + "\n")
                self.stream.flush()
                self._last = line
            else:
                self.update(line)
        if self.mode == "tty" and self._last:
            self.stream.write("\n")
            self.stream.flush()


class _Text:
    """Plain text for IPython's display machinery (a str would be shown with quotes)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _in_kernel() -> bool:
    if "ipykernel" not in sys.modules:
        return False
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def _key(line: str) -> tuple[str, ...]:
    """What must change for a non-interactive stream to get a new line: state, GPUs, epoch."""
    parts = line.split(" | ")
    head = parts[0]
    epoch = next((p.split(" [")[0].split(" step")[0] for p in parts if p.startswith("epoch")), "")
    gpus = next((p for p in parts if "GPUs" in p), "")
    return head, gpus, epoch


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"
