"""Uploaded code archives in, job artifacts out, without trusting either side's paths.

An upload is untrusted: it may name files outside the destination, carry links or devices, or
unpack to far more than it weighs. A result directory is written by the job's own code, which
may leave symlinks pointing anywhere. So nothing here ever follows a link, and every path is
checked component by component before it is used.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import io
import lzma
import os
import re
import shutil
import stat
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import IO, Any, BinaryIO

CHUNK = 1 << 20
# a tar stream holds headers and padding besides the file data; allow this much per member
TAR_OVERHEAD_PER_MEMBER = 4096

_WINDOWS_DRIVE = re.compile(r"[A-Za-z]:(/|$)")  # backslashes are already slashes here
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
_OPENERS: tuple[tuple[bytes, Callable[[BinaryIO], IO[bytes]]], ...] = (
    (b"\x1f\x8b", lambda f: gzip.GzipFile(fileobj=f, mode="rb")),
    (b"BZh", lambda f: bz2.BZ2File(f, "rb")),
    (b"\xfd7zXZ\x00", lambda f: lzma.LZMAFile(f, "rb")),  # noqa: SIM115 - closed by the caller
)
_UNREADABLE = (
    tarfile.TarError,
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    EOFError,
    zlib.error,
    lzma.LZMAError,
    NotImplementedError,
    OSError,  # gzip.BadGzipFile, and what the file system refuses
)


# extraction --------------------------------------------------------------------------------


def safe_extract(
    archive: bytes | str | os.PathLike[str] | BinaryIO,
    dest: Path,
    *,
    max_bytes: int,
    max_files: int,
) -> list[str]:
    """Unpack a .tar, .tar.gz/.tgz (or .bz2, .xz) or .zip archive into `dest`, all or nothing.

    The format is told by content, never by name. Raises ValueError, with a sentence naming the
    problem and the member, for absolute or escaping paths, links, devices, fifos, more than
    `max_files` members, more than `max_bytes` unpacked (declared sizes are checked first and
    the bytes actually written are counted too), and unreadable archives. The tree is built in
    a temporary directory beside `dest` and renamed into place only when all of it passed;
    `dest` must not exist yet. Returns the regular files' relative paths.
    """
    dest = Path(dest)
    if dest.exists():
        raise FileExistsError(f"{dest} already exists.")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".partial"))
    try:
        with _as_file(archive) as f:
            head = f.read(8)
            f.seek(0)
            if head.startswith(_ZIP_MAGIC):
                names = _extract_zip(f, tmp, max_bytes, max_files)
            else:
                names = _extract_tar(f, head, tmp, max_bytes, max_files)
        os.rename(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return names


@contextlib.contextmanager
def _as_file(archive: bytes | str | os.PathLike[str] | BinaryIO) -> Iterator[BinaryIO]:
    if isinstance(archive, bytes | bytearray | memoryview):
        yield io.BytesIO(archive)
    elif isinstance(archive, str | os.PathLike):
        with open(archive, "rb") as f:
            yield f
    else:
        archive.seek(0)
        yield archive


class _Budget:
    """Counts members and unpacked bytes against the limits, naming the member at fault."""

    def __init__(self, max_bytes: int, max_files: int) -> None:
        self.max_bytes = max_bytes
        self.max_files = max_files
        self.files = 0
        self.declared = 0
        self.written = 0

    def member(self, name: str, declared_size: int) -> None:
        self.files += 1
        if self.files > self.max_files:
            raise ValueError(f"The archive has more than {self.max_files} members (at {name!r}).")
        self.declared += declared_size
        if self.declared > self.max_bytes:
            raise ValueError(
                f"The archive unpacks to more than {self.max_bytes} bytes "
                f"(at member {name!r}, declared {declared_size} bytes)."
            )

    def copy(self, name: str, src: IO[bytes], target: Path, executable: bool) -> None:
        """Write one member, counting the bytes really produced, whatever was declared."""
        with _unpacking(name):
            target.parent.mkdir(parents=True, exist_ok=True)
            out = open(target, "wb")  # noqa: SIM115 - only the file system errors are mapped
        with out:
            while data := src.read(CHUNK):
                self.written += len(data)
                if self.written > self.max_bytes:
                    raise ValueError(
                        f"The archive unpacks to more than {self.max_bytes} bytes "
                        f"(at member {name!r}, which holds more than it declares)."
                    )
                out.write(data)
        target.chmod(0o755 if executable else 0o644)

    def mkdir(self, name: str, target: Path) -> None:
        with _unpacking(name):
            target.mkdir(parents=True, exist_ok=True)


@contextlib.contextmanager
def _unpacking(name: str) -> Iterator[None]:
    """A member that clashes with another (a file where a directory is) is the archive's
    fault, not the server's: say so with the member's name."""
    try:
        yield
    except OSError as err:
        raise ValueError(
            f"The archive member {name!r} cannot be unpacked: {err.strerror or err}."
        ) from err


def _member_path(name: str) -> PurePosixPath | None:
    """The member's path relative to the destination; None for the root itself.

    `./` prefixes are dropped (`tar -C dir .` writes them); anything absolute or climbing out
    is refused rather than silently rewritten, so the user learns what the archive holds. A
    colon is an ordinary character in a POSIX name (`x:y.py` is a file here); only a drive
    (`C:`, `C:/...`) is a Windows path that was absolute where the archive was made.
    """
    if "\x00" in name:
        raise ValueError(f"The archive member {name!r} has a NUL character in its name.")
    if name.startswith("/") or _WINDOWS_DRIVE.match(name):
        raise ValueError(f"The archive member {name!r} has an absolute path.")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ValueError(f"The archive member {name!r} points outside the archive ('..').")
    return PurePosixPath(*parts) if parts else None


def _extract_tar(f: BinaryIO, head: bytes, root: Path, max_bytes: int, max_files: int) -> list[str]:
    budget = _Budget(max_bytes, max_files)
    names: list[str] = []
    try:
        with contextlib.ExitStack() as stack:
            raw: IO[bytes] = f
            for magic, opener in _OPENERS:
                if head.startswith(magic):
                    raw = stack.enter_context(opener(f))
                    break
            # tarfile reads pax and long-name headers whole into memory: cap the unpacked
            # stream so a compressed header bomb is refused like a compressed file bomb
            stream = _Capped(raw, max_bytes + TAR_OVERHEAD_PER_MEMBER * (max_files + 2))
            tar = stack.enter_context(tarfile.open(fileobj=stream, mode="r|"))
            for member in tar:
                rel = _member_path(member.name)
                if not (member.isreg() or member.isdir()):
                    raise ValueError(
                        f"The archive member {member.name!r} is {_tar_kind(member)}; only "
                        "regular files and directories are accepted."
                    )
                budget.member(member.name, member.size if member.isreg() else 0)
                if rel is None:
                    continue
                target = root / rel
                if member.isdir():
                    budget.mkdir(member.name, target)
                    continue
                src = tar.extractfile(member)
                assert src is not None  # a regular file always has a reader
                budget.copy(member.name, src, target, bool(member.mode & 0o111))
                names.append(rel.as_posix())
    except ValueError:
        raise
    except _UNREADABLE as err:
        raise ValueError(
            f"The upload is not a readable tar, tar.gz or zip archive ({_describe(err)})."
        ) from err
    return names


def _tar_kind(member: tarfile.TarInfo) -> str:
    if member.issym():
        return f"a symbolic link (to {member.linkname!r})"
    if member.islnk():
        return f"a hard link (to {member.linkname!r})"
    if member.ischr() or member.isblk():
        return "a device"
    if member.isfifo():
        return "a fifo"
    return "of an unsupported kind"


def _extract_zip(f: BinaryIO, root: Path, max_bytes: int, max_files: int) -> list[str]:
    names: list[str] = []
    try:
        with zipfile.ZipFile(f) as zf:
            infos = zf.infolist()
            # everything the central directory declares is checked before a byte is unpacked
            budget = _Budget(max_bytes, max_files)
            plan: list[tuple[zipfile.ZipInfo, PurePosixPath | None]] = []
            for info in infos:
                name = info.filename.replace("\\", "/")  # some Windows tools write backslashes
                rel = _member_path(name)
                mode = info.external_attr >> 16
                kind = stat.S_IFMT(mode)
                if kind and kind not in (stat.S_IFREG, stat.S_IFDIR):
                    what = "a symbolic link" if kind == stat.S_IFLNK else "a device or fifo"
                    raise ValueError(
                        f"The archive member {info.filename!r} is {what}; only regular files "
                        "and directories are accepted."
                    )
                if info.flag_bits & 0x1:
                    raise ValueError(f"The archive member {info.filename!r} is encrypted.")
                budget.member(info.filename, 0 if info.is_dir() else info.file_size)
                plan.append((info, rel))
            for info, rel in plan:
                if rel is None:
                    continue
                target = root / rel
                if info.is_dir():
                    budget.mkdir(info.filename, target)
                    continue
                with zf.open(info) as src:
                    budget.copy(
                        info.filename, src, target, bool((info.external_attr >> 16) & 0o111)
                    )
                names.append(rel.as_posix())
    except ValueError:
        raise
    except _UNREADABLE as err:
        raise ValueError(f"The zip archive is corrupt or unreadable ({_describe(err)}).") from err
    return names


def _describe(err: BaseException) -> str:
    return str(err) or type(err).__name__


class _Capped(io.RawIOBase):
    """A read-only stream that refuses to yield more than `limit` bytes in all."""

    def __init__(self, raw: IO[bytes], limit: int) -> None:
        self.raw = raw
        self.limit = limit
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer)
        data = self.raw.read(len(view))
        self.count += len(data)
        if self.count > self.limit:
            raise ValueError(f"The archive unpacks to more than {self.limit} bytes.")
        view[: len(data)] = data
        return len(data)


# result directories ------------------------------------------------------------------------


def _walk(root: Path) -> Iterator[tuple[str, os.stat_result]]:
    """Regular files under `root` as (relative posix path, stat), never through a link."""
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        try:
            with os.scandir(root / rel_dir if rel_dir else root) as entries:
                found = sorted(entries, key=lambda e: e.name)
        except (FileNotFoundError, NotADirectoryError):
            continue
        subdirs = []
        for entry in found:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            if entry.is_dir(follow_symlinks=False):
                subdirs.append(rel)
            elif entry.is_file(follow_symlinks=False):
                with contextlib.suppress(FileNotFoundError):
                    yield rel, entry.stat(follow_symlinks=False)
        stack.extend(reversed(subdirs))


def list_artifacts(result_dir: Path) -> list[dict[str, Any]]:
    """Every regular file under the job's result directory, by path (none when it does not
    exist)."""
    found = sorted(_walk(Path(result_dir)), key=lambda item: item[0])
    return [{"path": rel, "size": st.st_size, "modified": st.st_mtime} for rel, st in found]


def open_artifact(result_dir: Path, path: str, *, what: str = "artifact") -> tuple[BinaryIO, int]:
    """Open one file under `result_dir` for reading, with its size (`what` it is, for the
    errors' sentences).

    Whatever the service reads in a job's directory goes through here (artifacts, logs,
    metric files): a job running as its user owns that directory and could put a link to
    a file only the service may read where a log is expected.

    ValueError for a path that is absolute or climbs out; FileNotFoundError for one that does
    not name a regular file reached without links. Each component is opened relative to its
    parent with O_NOFOLLOW (POSIX), so a link swapped in while we look is refused too.
    """
    if not path or "\x00" in path or path.startswith("/") or "\\" in path:
        raise ValueError(f"{path!r} is not a relative artifact path.")
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"{path!r} is not a plain relative path inside the result directory.")
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(result_dir, flags | os.O_DIRECTORY)
    except (FileNotFoundError, NotADirectoryError, OSError) as err:
        raise FileNotFoundError(f"This job has no {what} {path!r}.") from err
    try:
        for part in parts[:-1]:
            parent, fd = fd, os.open(part, flags | os.O_DIRECTORY, dir_fd=fd)
            os.close(parent)
        # O_NONBLOCK: opening a fifo must not hang; it is refused below
        parent, fd = fd, os.open(parts[-1], flags | os.O_NONBLOCK, dir_fd=fd)
        os.close(parent)
    except OSError as err:  # ENOENT, ENOTDIR, and ELOOP for a link
        os.close(fd)
        raise FileNotFoundError(f"This job has no {what} {path!r}.") from err
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):  # a directory, fifo or device
        os.close(fd)
        raise FileNotFoundError(f"This job has no {what} {path!r}.")
    return os.fdopen(fd, "rb"), st.st_size


def open_inside(root: Path, path: Path) -> tuple[BinaryIO, int]:
    """`open_artifact` for a file found under `root` (a glob's match, say)."""
    return open_artifact(root, path.relative_to(root).as_posix(), what="file")


class _Chunks(io.RawIOBase):
    """A write-only, non-seekable sink: zipfile then writes data descriptors, so the archive
    can be handed out piece by piece as it is made."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.position = 0
        self.pending = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        chunk = bytes(data)
        self.parts.append(chunk)
        self.position += len(chunk)
        self.pending += len(chunk)
        return len(chunk)

    def tell(self) -> int:
        return self.position

    def take(self) -> bytes:
        data = b"".join(self.parts)
        self.parts.clear()
        self.pending = 0
        return data


def zip_directory(src: Path, *, chunk_size: int = CHUNK) -> Iterator[bytes]:
    """The regular files under `src` as a zip archive, produced in chunks of about
    `chunk_size` bytes, so a large result directory streams without being held in memory or
    written to disk. Links are skipped, never followed. A missing `src` gives an empty zip."""
    sink = _Chunks()
    with zipfile.ZipFile(sink, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        for rel, st in _walk(Path(src)):
            try:
                f, size = open_artifact(Path(src), rel)
            except (FileNotFoundError, ValueError):
                continue  # removed or replaced by a link since the walk saw it
            with f:
                info = zipfile.ZipInfo(rel, _zip_time(st.st_mtime))
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = (stat.S_IFREG | (st.st_mode & 0o777)) << 16
                info.file_size = size
                # files still being written may grow past what stat said: leave room for it
                with zf.open(info, "w", force_zip64=size > (1 << 30)) as out:
                    while data := f.read(chunk_size):
                        out.write(data)
                        if sink.pending >= chunk_size:
                            yield sink.take()
    if tail := sink.take():
        yield tail


def _zip_time(mtime: float) -> tuple[int, int, int, int, int, int]:
    """Zip stores local times from 1980 to 2107; clamp what lies outside."""
    t = datetime.fromtimestamp(min(max(mtime, 315532800), 4354819199))
    return (max(t.year, 1980), t.month, t.day, t.hour, t.minute, t.second)
