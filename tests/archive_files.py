"""Archives built in memory, as a user uploads them: tars with members of any kind (links,
devices, escaping names), zips with symlinks (used by jobs/test_archives and
api/test_artifacts_api)."""

from __future__ import annotations

import contextlib
import gzip
import io
import stat
import tarfile
import zipfile


def make_tar(members: list[tuple[tarfile.TarInfo, bytes | None]], mode: str = "w:gz") -> bytes:
    """The archive's bytes, the same at every call (gzip's header holds no time): a test's
    parameters, and so its id, must be the same in every pytest worker."""
    out = io.BytesIO()
    gz = mode == "w:gz"
    with contextlib.ExitStack() as stack:
        fileobj = stack.enter_context(gzip.GzipFile(fileobj=out, mode="wb", mtime=0)) if gz else out
        tar = stack.enter_context(tarfile.open(fileobj=fileobj, mode="w" if gz else mode))
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return out.getvalue()


def tar_file(name: str, data: bytes = b"x", mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.mode = mode
    return info, data


def tar_special(name: str, kind: bytes, linkname: str = "") -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    return info, None


def make_zip(files: dict[str, bytes], *, symlinks: dict[str, str] | None = None) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        for name, target in (symlinks or {}).items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, target)
    return out.getvalue()
