"""Submitting a job as an uploaded archive, and reading a job's artifacts, over the REST API.

No devices (virtual_gpus=0): jobs stay QUEUED, and the tests write result files into the job
directory themselves, as a job would.
"""

from __future__ import annotations

import asyncio
import io
import json
import tarfile
import zipfile
from pathlib import Path

import pytest
from archive_files import make_tar, make_zip, tar_file, tar_special
from jobprograms import DEADLINE_S, program
from multiuser import as_user
from tornado.httpclient import HTTPClientError
from tornado.websocket import websocket_connect

pytestmark = pytest.mark.multi_user


BOUNDARY = "edt-test-boundary-7f3a"


def multipart(spec, archive: bytes, filename: str = "code.tar.gz") -> tuple[bytes, dict]:
    spec_bytes = spec if isinstance(spec, bytes) else json.dumps(spec).encode()
    body = (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="spec"\r\n'
        "Content-Type: application/json\r\n\r\n"
    ).encode()
    body += spec_bytes + b"\r\n"
    body += (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    body += archive + f"\r\n--{BOUNDARY}--\r\n".encode()
    return body, {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}


async def upload(jp_fetch, user: str, spec, archive: bytes, filename: str = "code.tar.gz"):
    body, headers = multipart(spec, archive, filename)
    response = await jp_fetch(
        "edt", "api", "v1", "jobs", method="POST", body=body, headers={**headers, **as_user(user)}
    )
    return response.code, json.loads(response.body)


async def fetch(jp_fetch, user: str, *path: str, **kw):
    return await jp_fetch("edt", "api", "v1", "jobs", *path, headers=as_user(user), **kw)


async def refused(coro) -> tuple[int, dict]:
    with pytest.raises(HTTPClientError) as caught:
        await coro
    return caught.value.code, json.loads(caught.value.response.body)


async def jobs_of(jp_fetch, user: str) -> list[dict]:
    return json.loads((await fetch(jp_fetch, user)).body)["jobs"]


def job_dirs(jobs_dir: Path) -> list[str]:
    """Job directories, and anything left in the upload staging area."""
    if not jobs_dir.exists():
        return []
    names = [p.name for p in jobs_dir.iterdir() if p.name != ".uploads"]
    staged = jobs_dir / ".uploads"
    return sorted(
        names + ([f".uploads/{p.name}" for p in staged.iterdir()] if staged.exists() else [])
    )


SPEC = {"name": "from-archive", "max_gpus": 2, "args": ["--epochs", "1"]}
CODE_TAR = make_tar([tar_file("main.py", b"print('hi')\n"), tar_file("pkg/util.py", b"X = 1\n")])
CODE_ZIP = make_zip({"main.py": b"print('hi')\n", "pkg/util.py": b"X = 1\n"})


# uploads ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("archive", "filename"), [(CODE_TAR, "code.tgz"), (CODE_ZIP, "c.zip")])
async def test_an_uploaded_archive_becomes_a_queued_job_with_that_code(
    jp_fetch, jobs_dir, archive, filename
):
    code, job = await upload(jp_fetch, "alice", SPEC, archive, filename)
    assert code == 201 and job["state"] == "QUEUED" and job["user"] == "alice"
    assert job["spec"]["archive"] == filename and job["spec"]["code"] is None
    assert job["spec"]["args"] == ["--epochs", "1"]
    code_dir = jobs_dir / job["id"] / "code"
    assert (code_dir / "main.py").read_text() == "print('hi')\n"
    assert (code_dir / "pkg" / "util.py").read_text() == "X = 1\n"
    assert job_dirs(jobs_dir) == [job["id"]]  # nothing left in staging
    assert [j["id"] for j in await jobs_of(jp_fetch, "alice")] == [job["id"]]


@pytest.mark.parametrize(
    ("spec", "archive", "field", "message"),
    [
        (SPEC, b"not an archive" * 10, "file", "not a readable tar"),
        (SPEC, make_zip({"main.py": b"x", "../evil.py": b"x"}), "file", "points outside"),
        (
            SPEC,
            make_tar([tar_file("main.py"), tar_special("l", tarfile.SYMTYPE, "/etc")]),
            "file",
            "symbolic link",
        ),
        (SPEC, make_tar([tar_file("/abs.py")]), "file", "absolute path"),
        (SPEC, make_tar([tar_file("proj/main.py")]), "entrypoint", "it has proj/main.py"),
        ({**SPEC, "entrypoint": "train.py"}, CODE_TAR, "entrypoint", "no train.py"),
        ({**SPEC, "code": "print(1)"}, CODE_TAR, "code", "not be given with"),
        ({"name": "x"}, CODE_TAR, "max_gpus", "required"),
        (b"{nope", CODE_TAR, "spec", "not valid JSON"),
    ],
)
async def test_a_bad_upload_names_the_field_and_leaves_no_job_and_no_files(
    jp_fetch, jobs_dir, spec, archive, field, message
):
    code, body = await refused(upload(jp_fetch, "alice", spec, archive))
    assert code == 400 and body["field"] == field and message in body["message"]
    assert await jobs_of(jp_fetch, "alice") == []
    assert job_dirs(jobs_dir) == []


# a small limit keeps the bombs small; 4 KiB is far below anything real
SMALL_LIMIT = {"devices": "virtual", "virtual_gpus": 0, "max_upload_bytes": 4096}


@pytest.mark.parametrize("edt_config", [SMALL_LIMIT])
async def test_an_archive_unpacking_past_max_upload_bytes_is_refused(jp_fetch, jobs_dir):
    bomb = make_zip({"main.py": b"x", "zeros.bin": bytes(1 << 20)})
    assert len(bomb) < 4096
    code, body = await refused(upload(jp_fetch, "alice", SPEC, bomb, "bomb.zip"))
    assert code == 400 and body["field"] == "file" and "unpacks to more than" in body["message"]
    assert await jobs_of(jp_fetch, "alice") == [] and job_dirs(jobs_dir) == []


@pytest.mark.parametrize("edt_config", [SMALL_LIMIT])
async def test_an_upload_over_max_upload_bytes_gets_413(jp_fetch, jobs_dir):
    big = make_tar([tar_file("main.py", bytes(range(256)) * 64)], mode="w")  # ~17 KiB
    code, body = await refused(upload(jp_fetch, "alice", SPEC, big))
    assert code == 413 and body["field"] == "file" and "max_upload_bytes" in body["message"]
    assert await jobs_of(jp_fetch, "alice") == [] and job_dirs(jobs_dir) == []
    small = make_tar([tar_file("main.py", b"print(1)")])
    assert (await upload(jp_fetch, "alice", SPEC, small))[0] == 201


@pytest.mark.parametrize("edt_config", [SMALL_LIMIT])
async def test_a_declared_length_over_the_limit_is_refused_before_the_body_is_read(
    jp_fetch, jobs_dir
):
    huge = bytes(2 << 20)  # past max_upload_bytes plus the room for the spec part
    code, body = await refused(upload(jp_fetch, "alice", SPEC, huge))
    assert code == 413 and body["field"] == "file"
    assert job_dirs(jobs_dir) == []


async def test_json_cannot_claim_an_archive_and_plain_json_still_works(jp_fetch):
    code, body = await refused(
        fetch(jp_fetch, "alice", method="POST", body=json.dumps({**SPEC, "archive": "x.tgz"}))
    )
    assert code == 400 and body["field"] == "archive" and "multipart" in body["message"]
    response = await fetch(
        jp_fetch, "alice", method="POST", body=json.dumps({"code": "print(1)", "max_gpus": 1})
    )
    assert response.code == 201 and json.loads(response.body)["spec"]["archive"] is None


async def test_an_upload_without_credentials_is_refused_before_its_body_is_read(
    http_server_client, jp_base_url, jobs_dir
):
    body, headers = multipart(SPEC, CODE_TAR)
    with pytest.raises(HTTPClientError) as caught:
        await http_server_client.fetch(
            f"{jp_base_url}edt/api/v1/jobs", method="POST", body=body, headers=headers
        )
    assert caught.value.code == 403
    assert job_dirs(jobs_dir) == []


# artifacts ----------------------------------------------------------------------------------


async def finished_job(jp_fetch, jobs_dir: Path) -> dict:
    """Alice's job, with what a job leaves in its RESULT_DIR (and a link it must not leak)."""
    response = await fetch(
        jp_fetch, "alice", method="POST", body=json.dumps({"code": "x", "max_gpus": 1})
    )
    job = json.loads(response.body)
    result = jobs_dir / job["id"] / "result"
    (result / "checkpoints").mkdir(parents=True)
    (result / "model.pt").write_bytes(b"\x00weights\xff" * 1000)
    (result / "checkpoints" / "step 10.pt").write_bytes(b"ckpt")
    (jobs_dir / "secret.txt").write_text("not yours")
    (result / "leak").symlink_to(jobs_dir / "secret.txt")
    return job


async def test_artifacts_list_download_and_zip(jp_fetch, jobs_dir):
    job_id = (await finished_job(jp_fetch, jobs_dir))["id"]
    listed = json.loads((await fetch(jp_fetch, "alice", job_id, "artifacts")).body)
    assert [(a["path"], a["size"]) for a in listed["artifacts"]] == [
        ("checkpoints/step 10.pt", 4),
        ("model.pt", 9_000),
    ]

    response = await fetch(jp_fetch, "alice", job_id, "artifacts", "model.pt")
    assert response.body == b"\x00weights\xff" * 1000
    assert response.headers["Content-Type"] == "application/octet-stream"
    assert response.headers["Content-Disposition"].startswith('attachment; filename="model.pt"')
    nested = await fetch(jp_fetch, "alice", job_id, "artifacts", "checkpoints/step 10.pt")
    assert nested.body == b"ckpt"

    response = await fetch(jp_fetch, "alice", job_id, "result.zip")
    assert response.headers["Content-Type"] == "application/zip"
    assert f"{job_id}-result.zip" in response.headers["Content-Disposition"]
    with zipfile.ZipFile(io.BytesIO(response.body)) as zf:
        assert sorted(zf.namelist()) == ["checkpoints/step 10.pt", "model.pt"]
        assert zf.read("model.pt") == b"\x00weights\xff" * 1000


async def test_a_job_without_results_has_no_artifacts_and_an_empty_zip(jp_fetch):
    response = await fetch(
        jp_fetch, "alice", method="POST", body=json.dumps({"code": "x", "max_gpus": 1})
    )
    job_id = json.loads(response.body)["id"]
    assert json.loads((await fetch(jp_fetch, "alice", job_id, "artifacts")).body) == {
        "artifacts": []
    }
    empty = await fetch(jp_fetch, "alice", job_id, "result.zip")
    assert zipfile.ZipFile(io.BytesIO(empty.body)).namelist() == []


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("../code/main.py", 400),
        ("..%2Fcode%2Fmain.py", 400),
        ("checkpoints/..%2F..%2Fsecret.txt", 400),
        ("%2Fetc%2Fpasswd", 400),
        ("leak", 404),
        ("checkpoints", 404),
        ("missing.pt", 404),
    ],
)
async def test_artifact_paths_that_escape_or_name_no_file_are_refused(
    jp_fetch, http_server_client, jp_base_url, jobs_dir, path, status
):
    """The URL is sent as written (jp_fetch would escape it), as a hostile client would."""
    job = await finished_job(jp_fetch, jobs_dir)
    url = f"{jp_base_url}edt/api/v1/jobs/{job['id']}/artifacts/{path}"
    code, body = await refused(http_server_client.fetch(url, headers=as_user("alice")))
    assert code == status and body["field"] == "path"
    assert "not yours" not in json.dumps(body)


async def test_only_the_owner_or_an_admin_sees_a_jobs_artifacts(jp_fetch, jobs_dir):
    job_id = (await finished_job(jp_fetch, jobs_dir))["id"]
    for path in (("artifacts",), ("artifacts", "model.pt"), ("result.zip",)):
        code, body = await refused(fetch(jp_fetch, "bob", job_id, *path))
        assert code == 404 and job_id in body["message"]
        assert (await fetch(jp_fetch, "root", job_id, *path)).code == 200


# end to end ---------------------------------------------------------------------------------

HELPER = b"""
import os, pathlib
def mark():
    out = pathlib.Path(os.environ["RESULT_DIR"]) / "from-the-archive.txt"
    out.write_text("helper ran")
"""


@pytest.mark.parametrize("edt_config", [{"devices": "virtual", "virtual_gpus": 1}])
async def test_an_uploaded_job_runs_its_archive_and_its_results_download(
    jp_fetch, jp_http_port, jp_base_url
):
    """The runner finds the unpacked tree: main.py imports a module beside it."""
    main = "from pkg.helper import mark\nmark()\n" + program(epochs=1)
    archive = make_zip({"main.py": main.encode(), "pkg/__init__.py": b"", "pkg/helper.py": HELPER})
    url = f"ws://localhost:{jp_http_port}{jp_base_url}edt/api/v1/events?token=alice"
    ws = await websocket_connect(url)
    code, job = await upload(jp_fetch, "alice", {"max_gpus": 1}, archive, "job.zip")
    assert code == 201

    async def final_state() -> str:
        while True:
            event = json.loads(await ws.read_message())
            terminal = ("SUCCEEDED", "FAILED", "CANCELLED")
            if event.get("job_id") == job["id"] and event.get("state") in terminal:
                return event["state"]

    state = await asyncio.wait_for(final_state(), DEADLINE_S)
    ws.close()
    assert state == "SUCCEEDED", (await fetch(jp_fetch, "alice", job["id"])).body
    listed = json.loads((await fetch(jp_fetch, "alice", job["id"], "artifacts")).body)
    assert "from-the-archive.txt" in [a["path"] for a in listed["artifacts"]]
    marker = await fetch(jp_fetch, "alice", job["id"], "artifacts", "from-the-archive.txt")
    assert marker.body == b"helper ran"
    zipped = await fetch(jp_fetch, "alice", job["id"], "result.zip")
    with zipfile.ZipFile(io.BytesIO(zipped.body)) as zf:
        assert set(zf.namelist()) == {a["path"] for a in listed["artifacts"]}
