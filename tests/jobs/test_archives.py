"""Uploaded archives are unpacked safely and all or nothing; result files go out without
following links."""

from __future__ import annotations

import io
import os
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest
from archive_files import make_tar, make_zip, tar_file, tar_special

from jupyter_edt.api.uploads import FormError, UploadForm
from jupyter_edt.jobs.archives import list_artifacts, open_artifact, safe_extract, zip_directory

LIMITS = {"max_bytes": 1 << 20, "max_files": 100}


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir()) if parent.exists() else []


# good archives ------------------------------------------------------------------------------


def test_a_tar_gz_unpacks_with_its_tree_and_executable_bits(tmp_path):
    data = make_tar(
        [
            tar_special("./", tarfile.DIRTYPE),
            tar_file("./main.py", b"print('hi')\n"),
            tar_file("./pkg/util.py", b"X = 1\n"),
            tar_file("./run.sh", b"#!/bin/sh\n", mode=0o4755),
        ]
    )
    dest = tmp_path / "out" / "code"
    names = safe_extract(data, dest, **LIMITS)
    assert names == ["main.py", "pkg/util.py", "run.sh"]
    assert (dest / "main.py").read_bytes() == b"print('hi')\n"
    assert (dest / "pkg" / "util.py").read_bytes() == b"X = 1\n"
    assert stat.S_IMODE((dest / "run.sh").stat().st_mode) == 0o755  # no setuid carried over
    assert stat.S_IMODE((dest / "main.py").stat().st_mode) == 0o644
    assert leftovers(dest.parent) == ["code"]


@pytest.mark.parametrize("mode", ["w", "w:bz2", "w:xz"])
def test_plain_and_other_compressed_tars_are_told_by_content(tmp_path, mode):
    data = make_tar([tar_file("main.py", b"1")], mode=mode)
    path = tmp_path / "looks-like.zip"  # the name says zip; the content decides
    path.write_bytes(data)
    assert safe_extract(path, tmp_path / "code", **LIMITS) == ["main.py"]


def test_a_colon_is_an_ordinary_character_in_a_member_name(tmp_path):
    """Only a drive (`C:/`) is absolute; the fuzzer found `\\x1b:x.py` (a legal entrypoint)
    refused as if it were one."""
    data = make_tar([tar_file("\x1b:x.py", b"1"), tar_file("a:b/c.py", b"2"), tar_file("1:.py")])
    names = safe_extract(data, tmp_path / "code", **LIMITS)
    assert names == ["\x1b:x.py", "a:b/c.py", "1:.py"]
    assert (tmp_path / "code" / "a:b" / "c.py").read_bytes() == b"2"


def test_a_zip_unpacks_from_a_file_object(tmp_path):
    data = make_zip({"main.py": b"print(1)", "pkg/": b"", "pkg/a.py": b"A", "win\\b.py": b"B"})
    names = safe_extract(io.BytesIO(data), tmp_path / "code", **LIMITS)
    assert names == ["main.py", "pkg/a.py", "win/b.py"]
    assert (tmp_path / "code" / "pkg" / "a.py").read_bytes() == b"A"
    assert (tmp_path / "code" / "win" / "b.py").read_bytes() == b"B"


# refusals -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("archive", "message"),
    [
        (make_tar([tar_file("../evil.py")]), r"'\.\./evil\.py' points outside"),
        (make_tar([tar_file("a/../../evil.py")]), "points outside"),
        (make_tar([tar_file("/etc/evil")]), "'/etc/evil' has an absolute path"),
        (make_zip({"../evil.py": b"x"}), r"'\.\./evil\.py' points outside"),
        (make_zip({"ok/..\\..\\evil.py": b"x"}), "points outside"),
        (make_zip({"/abs.py": b"x"}), "absolute path"),
        (make_zip({"C:/win.py": b"x"}), "absolute path"),
        (make_zip({"c:\\win.py": b"x"}), "absolute path"),
        (make_tar([tar_file("D:")]), "absolute path"),
        (
            make_tar([tar_file("main.py"), tar_special("link", tarfile.SYMTYPE, "/etc/passwd")]),
            r"'link' is a symbolic link \(to '/etc/passwd'\)",
        ),
        (
            make_tar([tar_file("main.py"), tar_special("hard", tarfile.LNKTYPE, "main.py")]),
            "'hard' is a hard link",
        ),
        (make_tar([tar_special("dev", tarfile.CHRTYPE)]), "'dev' is a device"),
        (make_tar([tar_special("pipe", tarfile.FIFOTYPE)]), "'pipe' is a fifo"),
        (make_zip({"main.py": b"x"}, symlinks={"link": "/etc"}), "'link' is a symbolic link"),
        (make_tar([tar_file("a", b"1"), tar_file("a/b", b"2")]), "'a/b' cannot be unpacked"),
        (b"this is no archive at all" * 40, "not a readable tar, tar.gz or zip"),
        (b"", "not a readable tar"),
        (make_tar([tar_file("main.py", b"x" * 5000)])[:60], "not a readable tar"),
        (make_zip({"main.py": b"x" * 5000})[:-30], "zip archive is corrupt"),
    ],
    ids=[
        "tar-dotdot",
        "tar-dotdot-inside",
        "tar-absolute",
        "zip-dotdot",
        "zip-backslash-dotdot",
        "zip-absolute",
        "zip-drive",
        "zip-drive-backslash",
        "tar-bare-drive",
        "tar-symlink",
        "tar-hardlink",
        "tar-device",
        "tar-fifo",
        "zip-symlink",
        "tar-file-dir-clash",
        "garbage",
        "empty",
        "truncated-tar-gz",
        "truncated-zip",
    ],
)
def test_bad_archives_are_refused_naming_the_problem_and_leave_nothing(tmp_path, archive, message):
    dest = tmp_path / "code"
    with pytest.raises(ValueError, match=message):
        safe_extract(archive, dest, **LIMITS)
    assert leftovers(tmp_path) == []


def test_too_many_members(tmp_path):
    data = make_tar([tar_file(f"f{i}.py") for i in range(6)])
    with pytest.raises(ValueError, match=r"more than 5 members \(at 'f5\.py'\)"):
        safe_extract(data, tmp_path / "code", max_bytes=1000, max_files=5)
    assert leftovers(tmp_path) == []


def test_a_zip_bomb_is_refused_by_its_declared_size_before_anything_is_written(tmp_path):
    data = make_zip({"main.py": b"print(1)", "zeros.bin": bytes(8 << 20)})
    assert len(data) < 20_000  # small to upload, 8 MiB unpacked
    with pytest.raises(ValueError, match=r"more than 1048576 bytes \(at member 'zeros\.bin'"):
        safe_extract(data, tmp_path / "code", **LIMITS)
    assert leftovers(tmp_path) == []


def test_a_tar_gz_bomb_is_refused_by_its_declared_size(tmp_path):
    data = make_tar([tar_file("main.py"), tar_file("zeros.bin", bytes(4 << 20))])
    with pytest.raises(ValueError, match="more than 1048576 bytes"):
        safe_extract(data, tmp_path / "code", **LIMITS)
    assert leftovers(tmp_path) == []


def test_a_zip_that_holds_more_than_it_declares_is_refused(tmp_path):
    """The central directory says 100 bytes; the member really inflates to 2 MiB."""
    data = bytearray(make_zip({"main.py": bytes(2 << 20)}))
    local, central = data.find(b"PK\x03\x04"), data.find(b"PK\x01\x02")
    data[local + 22 : local + 26] = (100).to_bytes(4, "little")
    data[central + 24 : central + 28] = (100).to_bytes(4, "little")
    with pytest.raises(ValueError, match=r"corrupt|more than"):
        safe_extract(bytes(data), tmp_path / "code", **LIMITS)
    assert leftovers(tmp_path) == []


def test_bytes_actually_unpacked_are_counted_whatever_the_headers_say(tmp_path):
    """A tar.gz whose pax header alone unpacks to 4 MiB: tarfile would read it into memory,
    so the unpacked stream itself is capped."""
    info = tarfile.TarInfo("main.py")
    info.pax_headers = {"comment": "z" * (4 << 20)}
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(info, io.BytesIO(b""))
    with pytest.raises(ValueError, match="unpacks to more than"):
        safe_extract(out.getvalue(), tmp_path / "code", max_bytes=1 << 20, max_files=10)
    assert leftovers(tmp_path) == []


def test_it_is_all_or_nothing_when_a_late_member_is_bad(tmp_path):
    members = [tar_file(f"ok{i}.py", b"fine") for i in range(5)]
    data = make_tar([*members, tar_special("late", tarfile.SYMTYPE, "/")])
    with pytest.raises(ValueError, match="'late' is a symbolic link"):
        safe_extract(data, tmp_path / "code", **LIMITS)
    assert leftovers(tmp_path) == []


def test_an_existing_destination_is_never_overwritten(tmp_path):
    (tmp_path / "code").mkdir()
    with pytest.raises(FileExistsError):
        safe_extract(make_tar([tar_file("main.py")]), tmp_path / "code", **LIMITS)


# result directories -------------------------------------------------------------------------


@pytest.fixture
def result(tmp_path) -> Path:
    root = tmp_path / "result"
    (root / "ckpt").mkdir(parents=True)
    (root / "model.pt").write_bytes(b"weights")
    (root / "ckpt" / "step-10.pt").write_bytes(b"0123456789")
    (tmp_path / "secret").write_text("outside")
    (root / "escape").symlink_to(tmp_path / "secret")
    (root / "escape-dir").symlink_to(tmp_path)
    os.mkfifo(root / "pipe")
    return root


def test_artifacts_are_the_regular_files_never_through_links(result):
    listed = list_artifacts(result)
    assert [(a["path"], a["size"]) for a in listed] == [("ckpt/step-10.pt", 10), ("model.pt", 7)]
    assert all(isinstance(a["modified"], float) for a in listed)
    assert list_artifacts(result / "missing") == []


def test_open_artifact_refuses_escapes_links_and_non_files(result):
    f, size = open_artifact(result, "ckpt/step-10.pt")
    with f:
        assert (f.read(), size) == (b"0123456789", 10)
    for bad in ("../secret", "ckpt/../model.pt", "/etc/passwd", "", "a//b", "./model.pt"):
        with pytest.raises(ValueError):
            open_artifact(result, bad)
    for absent in ("escape", "escape-dir/secret", "ckpt", "pipe", "nope.pt", "model.pt/x"):
        with pytest.raises(FileNotFoundError):
            open_artifact(result, absent)
    with pytest.raises(FileNotFoundError):
        open_artifact(result.parent / "missing", "model.pt")


def test_zip_directory_streams_the_files_in_chunks_and_skips_links(result):
    (result / "big.bin").write_bytes(os.urandom(300_000))
    chunks = list(zip_directory(result, chunk_size=64 << 10))
    assert len(chunks) > 2
    with zipfile.ZipFile(io.BytesIO(b"".join(chunks))) as zf:
        assert sorted(zf.namelist()) == ["big.bin", "ckpt/step-10.pt", "model.pt"]
        assert zf.read("ckpt/step-10.pt") == b"0123456789"
        assert zf.read("big.bin") == (result / "big.bin").read_bytes()
        assert zf.testzip() is None


def test_zip_of_a_missing_directory_is_an_empty_zip(tmp_path):
    data = b"".join(zip_directory(tmp_path / "missing"))
    assert zipfile.ZipFile(io.BytesIO(data)).namelist() == []


# the multipart parser of uploads ------------------------------------------------------------


def form_body(boundary: str, parts: list[tuple[str, str | None, bytes]]) -> bytes:
    out = b"preamble to ignore\r\n"
    for name, filename, data in parts:
        disposition = f'form-data; name="{name}"'
        if filename is not None:
            disposition += f'; filename="{filename}"'
        out += f"--{boundary}\r\nContent-Disposition: {disposition}\r\n\r\n".encode()
        out += data + b"\r\n"
    return out + f"--{boundary}--\r\nepilogue".encode()


@pytest.mark.parametrize("chunk", [1, 7, 64, 1 << 20])
def test_upload_form_parses_whatever_the_chunking(chunk):
    boundary = "b0undary"
    # the payload holds near-misses of the delimiter, which must stay data
    payload = b"\r\n--b0undar\r\n--b0und" + bytes(range(256)) * 10 + b"\r\n-"
    body = form_body(boundary, [("spec", None, b'{"max_gpus": 1}'), ("file", "c.tgz", payload)])
    sink = io.BytesIO()
    form = UploadForm(boundary.encode(), sink, max_file=1 << 20)
    for i in range(0, len(body), chunk):
        form.feed(body[i : i + chunk])
    form.close()
    assert form.spec.getvalue() == b'{"max_gpus": 1}'
    assert (form.filename, sink.getvalue()) == ("c.tgz", payload)


@pytest.mark.parametrize(
    ("parts", "field", "status"),
    [
        ([("spec", None, b"{}")], "file", 400),
        ([("file", "a.zip", b"x")], "spec", 400),
        ([("spec", None, b"{}"), ("other", None, b"")], "other", 400),
        ([("file", "a.zip", b"x"), ("file", "b.zip", b"y")], "file", 400),
        ([("spec", None, b"{}"), ("file", "a.zip", b"x" * 101)], "file", 413),
    ],
)
def test_upload_form_refusals_name_the_part(parts, field, status):
    form = UploadForm(b"bb", io.BytesIO(), max_file=100)
    with pytest.raises(FormError) as caught:
        form.feed(form_body("bb", parts))
        form.close()
    assert (caught.value.field, caught.value.status) == (field, status)


def test_upload_form_refuses_a_body_cut_short():
    form = UploadForm(b"bb", io.BytesIO(), max_file=100)
    form.feed(form_body("bb", [("spec", None, b"{}")])[:-20])
    with pytest.raises(FormError, match="ends before"):
        form.close()
