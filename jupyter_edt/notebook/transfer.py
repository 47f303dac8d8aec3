"""Moving files to and from the server: code archives up, results down.

Archives are built and received in temporary files, not in memory, so a large data file
shipped with the code, or a result directory of checkpoints, costs disk, not the kernel's RAM.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
import tempfile
import uuid
import zipfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import IO, Any

from .errors import BadRequest, EDTError

# Never worth shipping: caches, version control, notebook checkpoints.
SKIPPED = frozenset({"__pycache__", ".git", ".hg", ".svn", ".ipynb_checkpoints", ".DS_Store"})
SPOOL = 8 << 20  # bytes kept in memory before a temporary file spills to disk
CHUNK = 1 << 20


def code_archive(
    *,
    directory: str | os.PathLike[str] | None = None,
    entry: tuple[str, bytes] | None = None,
    files: Iterable[str | os.PathLike[str]] = (),
) -> IO[bytes]:
    """A .tar.gz of the program: a directory's contents at the top level, and/or one entry
    file (name, content), plus extra files or folders placed next to it by their base name.

    Links are followed (what the program sees is what the user sees); the server refuses
    links inside archives. Two things with the same name are an error naming ``files``.
    """
    members: dict[str, Path] = {}
    if directory is not None:
        root = Path(directory)
        if not root.is_dir():
            raise BadRequest(f"{root} is not a directory", "directory")
        for rel, path in _tree(root):
            members[rel] = path
    taken = {rel.split("/", 1)[0] for rel in members}
    if entry is not None:
        taken.add(entry[0])
    for item in files:
        path = Path(item)
        if not path.exists():
            raise BadRequest(f"{path} does not exist", "files")
        name = path.resolve().name
        if name in taken:
            raise BadRequest(f"two files would be named {name!r} next to the program", "files")
        taken.add(name)
        if path.is_dir():
            for rel, sub in _tree(path):
                members[f"{name}/{rel}"] = sub
        else:
            members[name] = path
    out = tempfile.SpooledTemporaryFile(max_size=SPOOL)  # noqa: SIM115 - returned
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        if entry is not None:
            info = tarfile.TarInfo(entry[0])
            info.size, info.mode = len(entry[1]), 0o644
            tar.addfile(info, io.BytesIO(entry[1]))
        for rel, path in sorted(members.items()):
            try:
                tar.add(str(path.resolve()), arcname=rel, recursive=False)
            except OSError as err:
                raise BadRequest(f"cannot read {path}: {err.strerror or err}", "files") from None
    out.seek(0)
    return out


def _tree(root: Path) -> Iterator[tuple[str, Path]]:
    """(relative posix path, path) of each file under `root`, skipping caches and VCS data."""
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED)
        base = Path(dirpath)
        for name in sorted(filenames):
            path = base / name
            if name in SKIPPED or not path.is_file():
                continue
            yield path.relative_to(root).as_posix(), path


def multipart(spec: Mapping[str, Any], archive: IO[bytes], filename: str) -> tuple[IO[bytes], str]:
    """A multipart/form-data body with the parts the server expects, `spec` then `file`;
    returns the body (rewound, in a temporary file) and its Content-Type."""
    boundary = f"edt-{uuid.uuid4().hex}"
    body = tempfile.SpooledTemporaryFile(max_size=SPOOL)  # noqa: SIM115 - returned
    body.write(
        f'--{boundary}\r\nContent-Disposition: form-data; name="spec"\r\n'
        f"Content-Type: application/json\r\n\r\n".encode()
    )
    body.write(json.dumps(spec).encode())
    body.write(
        f'\r\n--{boundary}\r\nContent-Disposition: form-data; name="file"; '
        f'filename="{filename}"\r\nContent-Type: application/octet-stream\r\n\r\n'.encode()
    )
    shutil.copyfileobj(archive, body, CHUNK)
    body.write(f"\r\n--{boundary}--\r\n".encode())
    body.seek(0)
    return body, f"multipart/form-data; boundary={boundary}"


def size_of(f: IO[bytes]) -> int:
    here = f.tell()
    end = f.seek(0, os.SEEK_END)
    f.seek(here)
    return end


def copy_response(response: Any, dest: IO[bytes]) -> int:
    """Copy an HTTP response body to `dest` in chunks; returns the byte count."""
    total = 0
    while chunk := response.read(CHUNK):
        dest.write(chunk)
        total += len(chunk)
    return total


def extract_zip(archive: IO[bytes], out_dir: Path) -> list[Path]:
    """Unpack the server's result.zip into `out_dir`, refusing any member that would land
    outside it (the server never sends one; a proxy or a bug could)."""
    written = []
    try:
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                if info.is_dir():
                    continue
                target = safe_target(out_dir, info.filename)
                target.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst, CHUNK)
                written.append(target)
    except zipfile.BadZipFile as err:
        raise EDTError(f"The server's result archive is damaged: {err}") from None
    return written


def safe_target(out_dir: Path, rel: str) -> Path:
    """`out_dir / rel`, for a relative path that stays inside `out_dir`."""
    parts = PurePosixPath(rel).parts
    if not parts or PurePosixPath(rel).is_absolute() or any(p in ("..", "") for p in parts):
        raise EDTError(f"Refusing to write {rel!r}: it is not a path inside {out_dir}.")
    return out_dir.joinpath(*parts)
