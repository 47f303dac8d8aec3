"""POST /edt/api/v1/jobs with an uploaded code archive (multipart/form-data).

The body is streamed: an archive may be far larger than what should sit in memory, and
larger than the server's default body limit, so the request is authenticated and authorised
before a byte of it is read, its size is capped at `EDTApp.max_upload_bytes`, and the archive
part goes straight to an anonymous temporary file. JSON submissions take the same route and
reach `JobsHandler.post` unchanged.
"""

from __future__ import annotations

import io
import json
import tempfile
from email.message import Message
from typing import IO

from tornado import web

from ..jobs.models import JobSpec, SpecError
from .base import APIError, StreamedBody, api_errors, loads
from .jobs import JobsHandler

SPEC_LIMIT = 1 << 20  # the JSON spec part
FORM_OVERHEAD = 64 << 10  # boundaries and part headers
HEADERS_LIMIT = 16 << 10  # one part's headers


class FormError(ValueError):
    def __init__(self, message: str, field: str, status: int = 400) -> None:
        super().__init__(message)
        self.field = field
        self.status = status


class UploadForm:
    """An incremental multipart/form-data parser for exactly two parts: `spec` (JSON, kept in
    memory) and `file` (the archive, written to `file`). Feed it the body as it arrives."""

    def __init__(self, boundary: bytes, file: IO[bytes], *, max_file: int) -> None:
        self.delimiter = b"\r\n--" + boundary
        self.file = file
        self.max_file = max_file
        self.spec = io.BytesIO()
        self.filename: str | None = None
        self.seen: set[str] = set()
        # a CRLF in front lets the first boundary match the same delimiter as the others
        self._buffer = b"\r\n"
        self._state = "preamble"
        self._part: str | None = None
        self._size = 0

    def feed(self, data: bytes) -> None:
        self._buffer += data
        while self._step():
            pass

    def close(self) -> None:
        if self._state != "end":
            raise FormError("The multipart body ends before its closing boundary.", "body")
        if "spec" not in self.seen:
            raise FormError("The job spec is missing: send it as the 'spec' part.", "spec")
        if "file" not in self.seen:
            raise FormError("The archive is missing: send it as the 'file' part.", "file")

    def _step(self) -> bool:
        """Consume what the buffer allows; False when more data is needed."""
        buf = self._buffer
        if self._state in ("preamble", "body"):
            at = buf.find(self.delimiter)
            if at < 0:
                keep = len(self.delimiter) - 1
                if len(buf) > keep:
                    self._emit(buf[: len(buf) - keep])
                    self._buffer = buf[len(buf) - keep :]
                return False
            self._emit(buf[:at])
            self._buffer = buf[at + len(self.delimiter) :]
            self._state = "after-delimiter"
            return True
        if self._state == "after-delimiter":
            if len(buf) < 2:
                return False
            if buf.startswith(b"--"):
                self._state, self._buffer = "end", b""
                return False
            end = buf.find(b"\r\n")
            if end < 0:
                if len(buf) > 256:
                    raise FormError("A multipart boundary line is malformed.", "body")
                return False
            self._buffer, self._state = buf[end + 2 :], "headers"
            return True
        if self._state == "headers":
            end = 0 if buf.startswith(b"\r\n") else buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > HEADERS_LIMIT:
                    raise FormError("A multipart part's headers are too long.", "body")
                return False
            headers, rest = buf[:end], buf[end + (2 if end == 0 else 4) :]
            self._open_part(headers.decode("utf-8", "replace"))
            self._buffer, self._state = rest, "body"
            return True
        self._buffer = b""  # the epilogue after the closing boundary is ignored
        return False

    def _open_part(self, raw_headers: str) -> None:
        message = Message()
        for line in raw_headers.split("\r\n"):
            name, sep, value = line.partition(":")
            if sep:
                message[name.strip()] = value.strip()
        name = message.get_param("name", header="content-disposition")
        if not isinstance(name, str) or name not in ("spec", "file"):
            raise FormError(
                f"Unexpected form part {name!r}: send only 'spec' and 'file'.",
                name if isinstance(name, str) and name else "body",
            )
        if name in self.seen:
            raise FormError(f"The form part {name!r} is given twice.", name)
        self.seen.add(name)
        self._part = name
        if name == "file":
            self.filename = message.get_filename() or "upload"

    def _emit(self, data: bytes) -> None:
        if not data or self._state == "preamble":
            return
        if self._part == "spec":
            if self.spec.tell() + len(data) > SPEC_LIMIT:
                raise FormError(f"The spec part is larger than {SPEC_LIMIT} bytes.", "spec")
            self.spec.write(data)
        else:
            self._size += len(data)
            if self._size > self.max_file:
                raise FormError(
                    f"The archive is larger than the {self.max_file} bytes allowed "
                    "(EDTApp.max_upload_bytes).",
                    "file",
                    413,
                )
            self.file.write(data)


@web.stream_request_body
class SubmitHandler(StreamedBody, JobsHandler):
    """`JobsHandler` that also takes a multipart upload: a `spec` part (the JSON spec,
    without `code` or `script`) and a `file` part (a .tar, .tar.gz or .zip of the code)."""

    #: the multipart form this handler reads (a subclass may take other parts)
    form_class: type[UploadForm] = UploadForm
    _form: UploadForm | None = None
    _body: bytearray | None = None
    _upload: IO[bytes] | None = None
    _error: FormError | None = None
    _posting = False

    @property
    def max_upload_bytes(self) -> int:
        return int(self.host.max_upload_bytes)

    async def prepare(self) -> None:
        await super().prepare()  # strangers are refused here, before the body is read
        if self.request.method != "POST":
            return
        limit = self.max_upload_bytes + SPEC_LIMIT + FORM_OVERHEAD
        length = self.request.headers.get("Content-Length")
        if length is not None and length.isdigit() and int(length) > limit:
            raise APIError(
                413,
                f"The upload is larger than the {self.max_upload_bytes} bytes allowed "
                "(EDTApp.max_upload_bytes).",
                "file",
            )
        self.request.connection.set_max_body_size(limit)  # type: ignore[union-attr]
        content_type = self.request.headers.get("Content-Type", "")
        if not content_type.lower().startswith("multipart/form-data"):
            self._body = bytearray()
            return
        message = Message()
        message["content-type"] = content_type
        boundary = message.get_param("boundary")
        if not isinstance(boundary, str) or not boundary:
            raise APIError(400, "The multipart Content-Type has no boundary.", "body")
        self._upload = tempfile.TemporaryFile()  # noqa: SIM115 - closed in on_finish
        self._form = self.form_class(
            boundary.encode("latin-1"), self._upload, max_file=self.max_upload_bytes
        )

    def data_received(self, chunk: bytes) -> None:
        if self._error is not None:
            return
        if self._body is not None:
            self._body += chunk
        elif self._form is not None:
            try:
                self._form.feed(chunk)
            except FormError as err:  # raised from post(), once the body is in
                self._error = err

    async def post(self) -> None:
        self._posting = True
        if self._form is None:
            self.request.body = bytes(self._body or b"")
            await super().post()
            return
        form = self._received_form()
        with api_errors():
            try:
                data = loads(form.spec.getvalue() or b"null")
            except (json.JSONDecodeError, UnicodeDecodeError) as err:
                raise APIError(400, f"The spec part is not valid JSON: {err}", "spec") from err
            try:
                spec = JobSpec.from_dict(data, archive=form.filename)
            except SpecError as err:
                if err.field == "body":  # the spec as a whole: here, the spec part
                    raise APIError(400, err.message, "spec") from err
                raise
            job = await self.service.submit_archive(
                self.user_name,
                spec,
                self._upload,
                max_bytes=self.max_upload_bytes,
            )
        self.set_header("Location", self.request.path.rstrip("/") + "/" + job.id)
        self.write_json(job.to_dict(), status=201)

    def _received_form(self) -> UploadForm:
        """The whole multipart body, checked: an error met while it streamed in, or at its
        end, becomes the 4xx answer naming the part."""
        form = self._form
        assert form is not None
        if self._error is None:
            try:
                form.close()
            except FormError as err:
                self._error = err
        if self._error is not None:
            raise APIError(self._error.status, str(self._error), self._error.field)
        assert self._upload is not None and form.filename is not None
        return form

    def on_finish(self) -> None:
        super().on_finish()
        self._close_upload()

    def _close_upload(self) -> None:
        if self._upload is not None:
            self._upload.close()
            self._upload = None

    def on_connection_close(self) -> None:
        """A client gone mid-upload leaves no temporary file; one gone while its archive is
        being unpacked leaves it to post(), which still reads it."""
        super().on_connection_close()
        if not self._posting:
            self._close_upload()
