"""Python tracebacks as a user reads them: whose each frame is, a log's last traceback parsed
from its text, and the folded form that shows the user's own frames and one line per run of the
framework's (``… 3 frames in torch …``), each distinct traceback once with the workers that
raised it.

Standard library only: a worker classifies its own frames when it dies, the driver parses the
log of a worker that died without saying why, and the notebook client folds the logs it shows
for a failed job, text that may come from another machine (a log copied back from a node) where
only the shape of a path says whose a frame is.
"""

from __future__ import annotations

import os
import re
import sys
import sysconfig
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

__all__ = [
    "Frame",
    "Traceback",
    "display_path",
    "fold",
    "fold_logs",
    "framework_of",
    "last_traceback",
    "natural",
    "process_name",
    "users_root",
    "who",
]

HEADER = "Traceback (most recent call last):"
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<function>.+))?$')
#: Per-rank prefixes a log's lines may carry: torch.distributed's excepthook (``[rank0]: ``),
#: torchrun's ``--tee`` (``[default0]:``).
_PREFIX = re.compile(r"^\[(?:rank|default)\d+\]:\s?")
_EXCEPTION = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::\s?(?P<message>.*))?$")
_FROZEN = re.compile(r"^<frozen (?P<module>[\w.]+)>$")
_OTHER_STDLIB = re.compile(r"/lib/python3\.\d+/(?P<rest>.+)$")  # another machine's
_LOG_SUFFIXES = (".out", ".stdout", ".stderr", ".log")


@dataclass(frozen=True)
class Frame:
    """One frame: its file, line and function ("" where Python names none: a SyntaxError's
    location), and its source lines as Python printed them (the code, any ``^^^`` markers)."""

    file: str
    line: int
    function: str = ""
    source: tuple[str, ...] = ()

    @property
    def users(self) -> bool:
        return framework_of(self.file) is None


@dataclass(frozen=True)
class Traceback:
    """A parsed traceback: its frames (outermost first, as Python prints them) and the
    exception it ended in."""

    frames: tuple[Frame, ...]
    type: str
    message: str = ""

    @property
    def exception(self) -> str:
        """The exception as Python's last line says it: ``Type: message``."""
        return f"{self.type}: {self.message}" if self.message else self.type

    def user_frame(self) -> Frame | None:
        """The innermost frame of the user's own code, where they would look first."""
        return next((f for f in reversed(self.frames) if f.users), None)

    def key(self) -> tuple[object, ...]:
        """What makes two workers' tracebacks the same one."""
        return (tuple((f.file, f.line, f.function) for f in self.frames), self.exception)


# -- whose a frame is -------------------------------------------------------------------------


def framework_of(path: str) -> str | None:
    """The package a frame's file belongs to when it is not the user's: ``torch``, a standard
    library module (``runpy``), ``jupyter_edt``, any installed package; None for the user's own
    file. Decided by this interpreter's paths, then by the shape of the path (a log from
    another machine): ``site-packages``, ``dist-packages``, ``lib/python3.X``, ``jupyter_edt``."""
    frozen = _FROZEN.match(path)
    if frozen:
        return frozen["module"].split(".")[0]
    if path.startswith("<"):
        return path  # generated code (<string>, torch.fx's <eval_with_key>): nobody's file
    posix = path.replace("\\", "/")
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in posix:
            return _top(posix.rsplit(marker, 1)[1])
    for root, name in _roots():
        if posix.startswith(root):
            return name or _top(posix[len(root) :])
    other = _OTHER_STDLIB.search(posix)
    if other:
        return _top(other["rest"])
    return "jupyter_edt" if "/jupyter_edt/" in posix else None  # a checkout elsewhere


def _top(relative: str) -> str:
    """The top-level package of a path relative to where packages are installed."""
    first = relative.lstrip("/").split("/", 1)[0]
    return first.removesuffix(".py") or relative


def _roots() -> tuple[tuple[str, str | None], ...]:
    """Where this interpreter keeps code that is not the user's, with its package's name (None:
    the standard library, named by its module). jupyter_edt and torch first: either may live
    outside site-packages (an editable install); torch once it is imported."""
    torch = sys.modules.get("torch")
    where = getattr(torch, "__file__", None) if torch is not None else None
    found = ((_prefix(Path(where).resolve().parent), "torch"),) if where else ()
    return _installed()[:1] + found + _installed()[1:]


@cache
def _installed() -> tuple[tuple[str, str | None], ...]:
    """jupyter_edt's directory, then the standard library's."""
    paths = sysconfig.get_paths()
    stdlib = [(_prefix(Path(paths[k])), None) for k in ("stdlib", "platstdlib") if paths.get(k)]
    return ((_prefix(Path(__file__).resolve().parents[1]), "jupyter_edt"), *stdlib)


def _prefix(path: Path) -> str:
    """What the paths of the files inside `path` start with."""
    return path.as_posix().rstrip("/") + "/"


# -- parsing ----------------------------------------------------------------------------------


def last_traceback(text: str) -> tuple[Traceback, range] | None:
    """The last traceback printed in `text` and the lines it spans (indices into
    ``text.splitlines()``), or None. Chained exceptions print one traceback each; the last is
    the one that ended the process. Per-rank prefixes (``[rank0]: ``) are read through."""
    lines = [_PREFIX.sub("", line) for line in text.splitlines()]
    starts = [i for i, line in enumerate(lines) if line.strip().endswith(HEADER)]
    for start in reversed(starts):
        parsed = _parse(lines, start)
        if parsed is not None:
            return parsed
    return None


def _parse(lines: Sequence[str], start: int) -> tuple[Traceback, range] | None:
    frames: list[Frame] = []
    source: list[str] = []
    i = start + 1
    while i < len(lines):
        line = lines[i].rstrip()
        match = _FRAME.match(line)
        if match:
            _close(frames, source)
            frames.append(Frame(match["file"], int(match["line"]), match["function"] or ""))
        elif line.startswith(" ") and frames:
            source.append(line)
        elif line.strip():
            break
        i += 1
    _close(frames, source)
    if i >= len(lines):
        return None  # cut off before its exception (a log still being written)
    exception = lines[i].strip()
    match = _EXCEPTION.match(exception)
    kind, message = (match["type"], match["message"] or "") if match else (exception, "")
    return Traceback(tuple(frames), kind, message.strip()), range(start, i + 1)


def _close(frames: list[Frame], source: list[str]) -> None:
    """Give the last frame the source lines read after it."""
    if frames and source:
        last = frames[-1]
        frames[-1] = Frame(last.file, last.line, last.function, tuple(source))
    source.clear()


# -- showing ----------------------------------------------------------------------------------


def display_path(path: str, root: str | None) -> str:
    """`path` relative to `root` (the job's code directory) when it lies inside, else whole."""
    if root and os.path.isabs(path):
        try:
            relative = os.path.relpath(path, root)
        except ValueError:
            return path
        if not relative.startswith(os.pardir):
            return relative
    return path


def users_root(tracebacks: Iterable[Traceback]) -> str | None:
    """The directory holding every user file of these tracebacks (the job's code, as a rule),
    to show their paths from; None when they share no deeper directory than ``/x``."""
    dirs = {
        os.path.dirname(f.file)
        for tb in tracebacks
        for f in tb.frames
        if f.users and os.path.isabs(f.file)
    }
    if not dirs:
        return None
    common = os.path.commonpath(sorted(dirs))
    return common if len(Path(common).parts) > 2 else None


def fold(tb: Traceback, root: str | None = None) -> list[str]:
    """The traceback as Python prints it, but the user's frames first: the frames that started
    the program (runpy, the worker) are left out before the first user frame, and each run of
    the framework's frames is one line, ``… 12 frames in torch …``. Paths are shown from
    `root`. With no user frame at all, every frame is folded."""
    start = next((i for i, f in enumerate(tb.frames) if f.users), 0)
    lines: list[str] = []
    run: list[Frame] = []
    for frame in tb.frames[start:]:
        if not frame.users:
            run.append(frame)
            continue
        lines += _folded(run)
        run = []
        where = f'  File "{display_path(frame.file, root)}", line {frame.line}'
        lines.append(f"{where}, in {frame.function}" if frame.function else where)
        lines += frame.source
    lines += _folded(run)
    lines.append(tb.exception)
    return lines


def _folded(run: Sequence[Frame]) -> list[str]:
    if not run:
        return []
    names = list(dict.fromkeys(str(framework_of(f.file)) for f in run))
    frames = "frame" if len(run) == 1 else "frames"
    return [f"  … {len(run)} {frames} in {', '.join(names)} …"]


def process_name(log: str) -> str:
    """The process a log belongs to: ``w0.out`` is worker w0's, ``driver.stderr`` the
    driver's."""
    for suffix in _LOG_SUFFIXES:
        if log.endswith(suffix):
            return log[: -len(suffix)]
    return log


def natural(name: str) -> tuple[str, int]:
    """Sort key putting w2 before w10."""
    match = re.match(r"^(.*?)(\d+)$", name)
    return (match[1], int(match[2])) if match else (name, -1)


def who(workers: Iterable[str]) -> str:
    """``worker w0`` or ``workers w0, w1``, in natural order."""
    names = sorted(dict.fromkeys(workers), key=natural)
    return f"worker{'s' if len(names) > 1 else ''} {', '.join(names)}"


def fold_logs(logs: Mapping[str, str], output_lines: int = 10) -> str:
    """What a user reads of a failed job's logs: each distinct traceback once, folded
    (:func:`fold`), headed by the processes whose logs end in it; then each log's last
    `output_lines` lines besides its traceback (what the program printed before it died)."""
    found: dict[tuple[object, ...], tuple[Traceback, list[str]]] = {}
    output: dict[str, list[str]] = {}
    for name, text in logs.items():
        lines = text.splitlines()
        parsed = last_traceback(text)
        if parsed is not None:
            tb, span = parsed
            found.setdefault(tb.key(), (tb, []))[1].append(process_name(name))
            lines = lines[: span.start] + lines[span.stop :]
        kept = [line for line in lines if line.strip()][-output_lines:] if output_lines else []
        if kept:
            output[name] = kept
    root = users_root(tb for tb, _ in found.values())
    parts: list[str] = []
    for tb, names in found.values():
        label = ", ".join(sorted(names, key=natural))
        parts.append("\n".join([f"{label}: {HEADER}", *fold(tb, root)]))
    if output:
        parts.append(
            "\n".join(f"==> {name} <==\n" + "\n".join(kept) for name, kept in output.items())
        )
    return "\n\n".join(parts)
