"""/edt/api/v1/jobs/{job_id}/artifacts and /result.zip: what a job left in its RESULT_DIR.

Files are sent in chunks, each read off the event loop, so a multi-gigabyte checkpoint or
result directory neither blocks the server nor sits in its memory.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO
from urllib.parse import quote

from tornado import web
from tornado.iostream import StreamClosedError

from ..jobs.archives import CHUNK, zip_directory
from .base import APIError, EDTHandler, api_errors


@contextmanager
def artifact_errors() -> Iterator[None]:
    """`api_errors`, plus: a path that is no artifact of the job is 404 (a bad one is 400)."""
    try:
        with api_errors():
            yield
    except APIError as err:
        if err.status_code == 400:
            err.field = "path"
        raise
    except FileNotFoundError as err:
        raise APIError(404, str(err), "path") from err


def attachment(name: str) -> str:
    """A Content-Disposition that survives any file name (RFC 6266 with RFC 5987 fallback)."""
    plain = "".join(c if c.isascii() and c.isprintable() and c not in '"\\' else "_" for c in name)
    return f"attachment; filename=\"{plain}\"; filename*=UTF-8''{quote(name, safe='')}"


class ArtifactsHandler(EDTHandler):
    async def get(self, job_id: str) -> None:
        with api_errors():
            artifacts = await self.service.artifacts(self.user_name, job_id)
        self.write_json({"artifacts": artifacts})


class ArtifactHandler(EDTHandler):
    async def get(self, job_id: str, path: str) -> None:
        with artifact_errors():
            f, size = await self.service.open_artifact(self.user_name, job_id, path)
        with f:
            self.set_header("Content-Type", "application/octet-stream")
            self.set_header("Content-Disposition", attachment(path.rsplit("/", 1)[-1]))
            self.set_header("Content-Length", str(size))
            await send_file(self, f, size)


async def send_file(handler: web.RequestHandler, f: BinaryIO, size: int) -> None:
    """Send `size` bytes of `f` and finish, each chunk read off the event loop (the headers
    are the caller's)."""
    left = size  # a file still growing is sent as large as it was when opened
    try:
        while left > 0:
            data = await asyncio.to_thread(f.read, min(CHUNK, left))
            if not data:
                break  # truncated meanwhile: the client sees a short body
            left -= len(data)
            handler.write(data)
            await handler.flush()
    except StreamClosedError:
        return
    handler.finish()


class ResultZipHandler(EDTHandler):
    async def get(self, job_id: str) -> None:
        with api_errors():
            root = self.service.result_dir(self.user_name, job_id)
        self.set_header("Content-Type", "application/zip")
        self.set_header("Content-Disposition", attachment(f"{job_id}-result.zip"))
        chunks = zip_directory(root)
        try:
            while (data := await asyncio.to_thread(next, chunks, None)) is not None:
                self.write(data)
                await self.flush()
        except StreamClosedError:
            return
        finally:
            chunks.close()
        self.finish()
