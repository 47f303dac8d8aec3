"""A job directory's copy on a node that does not see the service's file system.

A process placed on another node (by the Ray launcher) runs in a copy of its job's directory
there: the launching side *packs* what a process reads (the code, the newest checkpoint), the
node *unpacks* it into a directory of its own and *relocates* the process's paths into it, and
from then on *collects* what the process writes (events, logs, checkpoints, the result) as
chunks that the launching side *applies* to the real job directory. So the API, the sidebar and
the result zip see what remote workers wrote as if they had written it in place.

Chunks follow how files are written: a file that grew in place (a log, an events file) sends
only what was added; one replaced (an atomic save renames a new file over the old one) or
rewritten is sent whole; one removed (an old checkpoint) is removed. Logs (files in a `logs`
or `log` directory) are only ever appended to, as on one machine: a resumed job's copy sends
its processes' lines after those of the job's earlier runs. Dot files are temporary (atomic
saves write `.name.tmp-*` first) and never sent.

Standard library only, as the rest of `launch/`.
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath

from .base import ProcessSpec

#: What a node's copy sends back: the job directory's parts that processes write. Results are
#: read first: a process records an epoch (logs) before it checkpoints it (result), so a
#: collection that finds the checkpoint then also finds the record, however the two writes
#: and the walk interleave; a node lost after that collection loses neither, and a job resumed
#: from that checkpoint misses no record.
WRITTEN = ("result", "logs")
#: Bytes of a file's end remembered to tell an append from a rewrite.
TAIL = 64
#: The most bytes one collection sends (the rest follows at the next one).
COLLECT_LIMIT = 64 * 1024 * 1024


#: A chunk's `offset` that appends its data to the file, whatever it holds (a log).
APPEND = -2


@dataclass(frozen=True)
class Chunk:
    """A change to one file, its `path` relative to the job directory: `data` written at
    `offset`, the whole file when `offset` is -1, or added at its end (`APPEND`: a log, which
    may hold an earlier run's lines); `data` None: the file is gone."""

    path: str
    offset: int
    data: bytes | None


@dataclass
class _Sent:
    inode: int
    size: int
    tail: bytes


def pack(job_dir: Path) -> bytes:
    """What a process on another node needs of its job directory: the code, and the newest
    checkpoint (a resumed job starts from it), as a gzip tar."""
    from ..runtime.jobdir import JobDir, checkpoints

    d = JobDir(job_dir)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        if d.code.is_dir():
            tar.add(d.code, arcname=d.code.name)
        newest = checkpoints(d.checkpoints)[-1:]
        for path in newest:
            tar.add(path, arcname=str(path.relative_to(job_dir)))
    return buffer.getvalue()


class Mirror:
    """The copy of `job_dir` at `root` on this node."""

    def __init__(self, root: Path, job_dir: Path) -> None:
        self.root = Path(root)
        self.job_dir = Path(job_dir)
        self._sent: dict[str, _Sent] = {}

    def unpack(self, data: bytes) -> None:
        """Lay out the copy: the packed files, and empty directories for what is written."""
        self.root.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            tar.extractall(self.root, filter="data")
        for part in WRITTEN:
            (self.root / part).mkdir(exist_ok=True)
        for path in self._files():
            self._remember(path)  # what came from the job directory is not sent back

    def relocate(self, spec: ProcessSpec) -> ProcessSpec:
        """`spec` with every path below the job directory moved into the copy: the working
        directory, the log directory, the arguments and the environment's values."""
        return replace(
            spec,
            cwd=Path(self._moved(str(spec.cwd))),
            log_dir=Path(self._moved(str(spec.log_dir))),
            argv=[self._moved(a) for a in spec.argv],
            env={k: self._moved(v) for k, v in spec.env.items()},
        )

    def _moved(self, value: str) -> str:
        job = str(self.job_dir)
        if value == job or value.startswith(job + os.sep):
            return str(self.root) + value[len(job) :]
        return value

    def collect(self, limit: int = COLLECT_LIMIT) -> list[Chunk]:
        """What changed in the written parts since the last collection; files past about
        `limit` bytes wait for the next one (a file is always sent whole)."""
        chunks: list[Chunk] = []
        budget = limit
        present = set()
        for path in self._files():
            rel = str(path.relative_to(self.root))
            present.add(rel)
            if budget <= 0:
                continue
            chunk = self._change(path, rel)
            if chunk is not None:
                chunks.append(chunk)
                budget -= len(chunk.data or b"")
        for rel in [r for r in self._sent if r not in present and r.split("/")[0] in WRITTEN]:
            del self._sent[rel]
            chunks.append(Chunk(rel, -1, None))
        return chunks

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def _files(self) -> Iterator[Path]:
        for part in WRITTEN:
            top = self.root / part
            for dirpath, dirnames, filenames in os.walk(top):
                dirnames[:] = [n for n in dirnames if not n.startswith(".")]
                for name in filenames:
                    if not name.startswith("."):
                        yield Path(dirpath) / name

    def _change(self, path: Path, rel: str) -> Chunk | None:
        try:
            with path.open("rb") as f:
                st = os.fstat(f.fileno())
                sent = self._sent.get(rel)
                if sent is not None and (st.st_ino, st.st_size) == (sent.inode, sent.size):
                    return None
                appended = (
                    sent is not None
                    and st.st_ino == sent.inode
                    and st.st_size > sent.size
                    and _tail_at(f, sent.size) == sent.tail
                )
                offset = sent.size if appended and sent is not None else 0
                f.seek(offset)
                data = f.read(st.st_size - offset)
        except OSError:  # gone or unreadable since the walk: the next collection sees
            return None
        tail = (sent.tail if appended and sent is not None else b"") + data
        self._sent[rel] = _Sent(st.st_ino, offset + len(data), tail[-TAIL:])
        if _append_only(rel) and (appended or sent is None):
            return Chunk(rel, APPEND, data)
        return Chunk(rel, offset if appended else -1, data)

    def _remember(self, path: Path) -> None:
        st = path.stat()
        with path.open("rb") as f:
            tail = _tail_at(f, st.st_size)
        self._sent[str(path.relative_to(self.root))] = _Sent(st.st_ino, st.st_size, tail)


def _append_only(rel: str) -> bool:
    """Whether a file is a log, which every process that writes it appends to (a process's
    output, the runtime's events, WMLA's logs under RESULT_DIR/log/): a job resumed on a node
    starts its copy without the earlier runs' lines, which the job directory keeps."""
    return bool({"log", "logs"} & set(rel.split("/")[:-1]))


def _tail_at(f: io.BufferedReader, end: int) -> bytes:
    f.seek(max(0, end - TAIL))
    return f.read(min(end, TAIL))


def apply(job_dir: Path, chunks: Sequence[Chunk]) -> None:
    """Write what a node's copy sent into the job directory. Paths stay inside it."""
    root = Path(job_dir)
    for chunk in chunks:
        rel = PurePosixPath(chunk.path)
        if rel.is_absolute() or ".." in rel.parts or rel.parts[0] not in WRITTEN:
            raise ValueError(f"A mirrored path must lie in the job's {WRITTEN}: {chunk.path!r}")
        target = root.joinpath(*rel.parts)
        if chunk.data is None:
            target.unlink(missing_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if chunk.offset == -1:  # whole: replace atomically, as the process did
            staged = target.with_name(f".{target.name}.mirror")
            staged.write_bytes(chunk.data)
            os.replace(staged, target)
            continue
        if chunk.offset == APPEND:
            with target.open("ab") as f:
                f.write(chunk.data)
            continue
        with target.open("r+b" if target.exists() else "wb") as f:
            f.seek(chunk.offset)
            f.write(chunk.data)
