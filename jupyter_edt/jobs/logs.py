"""Reading a job's log files by name: a window at an offset, or the last lines."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .archives import open_artifact

LOG_SUFFIXES = (".stdout", ".stderr", ".out", ".log")
MAX_CHUNK = 1 << 20  # one answer carries at most 1 MiB of log
#: The lines read from the end of each log to fold them (as the notebook's failure report).
FOLD_TAIL = 200


@dataclass(frozen=True)
class LogChunk:
    name: str
    text: str
    offset: int  # where `text` starts, in bytes
    next_offset: int  # pass it back to read what follows
    size: int  # the file's size now


@dataclass(frozen=True)
class FoldedLogs:
    """A job's logs folded for reading (`runtime.tracebacks.fold_logs`), and the logs read."""

    text: str
    names: tuple[str, ...]


def list_logs(log_dir: Path) -> list[str]:
    """The job's log files, driver first, then workers by name."""
    if not log_dir.is_dir():
        return []
    names = sorted(p.name for p in log_dir.iterdir() if p.suffix in LOG_SUFFIXES)
    return sorted(names, key=lambda n: (not n.startswith("driver"), n))


def read_log(
    log_dir: Path, name: str, *, offset: int | None = None, tail: int | None = None
) -> LogChunk:
    """`offset`: the bytes from there on (follow mode); `tail`: the last `tail` lines."""
    if name not in list_logs(log_dir):
        raise ValueError(f"This job has no log named {name!r}.")
    try:  # a regular file, reached without links (the job's user owns the directory)
        f, size = open_artifact(log_dir, name, what="log")
    except FileNotFoundError as err:
        raise ValueError(f"This job has no log named {name!r}.") from err
    with f:
        if tail is not None:
            start = max(0, size - MAX_CHUNK)
            f.seek(start)
            data = f.read(size - start)
            lines = data.splitlines(keepends=True)
            kept = lines[-tail:] if tail > 0 else []
            text = b"".join(kept)
            start = size - len(text)
        else:
            start = min(max(0, offset or 0), size)
            f.seek(start)
            text = f.read(min(MAX_CHUNK, size - start))
    return LogChunk(name, text.decode(errors="replace"), start, start + len(text), size)
