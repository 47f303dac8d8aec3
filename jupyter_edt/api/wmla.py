"""/edt/api/wmla/v1/execs: WMLA's deep-learning execs API over the job service.

Submit with ``POST execs?args=<args>`` and a multipart ``file`` part (a gzip tar
``<name>.modelDir.tar``), streamed like the native upload (``uploads.py``); then list, get,
delete, stop, read the log and download the result. Authentication, owner scoping and error
bodies are the native API's; the logic is in ``compat/execs.py``.
"""

from __future__ import annotations

from tornado import web

from ..compat.execs import Execs
from .artifacts import ResultZipHandler
from .base import APIError, EDTHandler, api_errors
from .uploads import FormError, SubmitHandler, UploadForm

WMLA_PREFIX = "/edt/api/wmla/v1"
EXEC_ID = r"(?P<exec_id>[^/]+)"


class ExecForm(UploadForm):
    """The execs upload: one ``file`` part; the args come in the query string."""

    def close(self) -> None:
        if self._state != "end":
            raise FormError("The multipart body ends before its closing boundary.", "body")
        if "file" not in self.seen:
            raise FormError("The archive is missing: send it as the 'file' part.", "file")


class ExecsMixin:
    @property
    def execs(self) -> Execs:
        return Execs(self.service)  # type: ignore[attr-defined]


@web.stream_request_body
class ExecsHandler(ExecsMixin, SubmitHandler):
    form_class = ExecForm  # the native upload's streaming, without a spec part

    async def get(self) -> None:
        with api_errors():
            self.write_json({"execs": self.execs.list(self.user_name)})

    async def post(self) -> None:
        self._posting = True
        if self._form is None:
            raise APIError(
                400, "Send the .modelDir.tar as the 'file' part of multipart/form-data.", "file"
            )
        form = self._received_form()
        with api_errors():
            view = await self.execs.submit(
                self.user_name,
                self.get_argument("args", None),
                self._upload,
                form.filename,
                max_bytes=self.max_upload_bytes,
            )
        self.set_header("Location", self.request.path.rstrip("/") + "/" + view["id"])
        self.write_json(view, status=201)


class ExecHandler(ExecsMixin, EDTHandler):
    async def get(self, exec_id: str) -> None:
        with api_errors():
            self.write_json(self.execs.get(self.user_name, exec_id))

    async def delete(self, exec_id: str) -> None:
        with api_errors():
            self.write_json(await self.execs.delete(self.user_name, exec_id))


class ExecStopHandler(ExecsMixin, EDTHandler):
    async def post(self, exec_id: str) -> None:
        with api_errors():
            self.write_json(await self.execs.stop(self.user_name, exec_id))


class ExecLogHandler(ExecsMixin, EDTHandler):
    async def get(self, exec_id: str) -> None:
        with api_errors():
            text = self.execs.log(self.user_name, exec_id, self.get_argument("logType", "outlog"))
        self.write_json(text)


class ExecResultHandler(ExecsMixin, ResultZipHandler):
    async def get(self, exec_id: str) -> None:  # type: ignore[override]
        with api_errors():
            self.execs.result_dir(self.user_name, exec_id)  # an exec of this user, or 404
        await super().get(exec_id)


wmla_handlers = [
    (rf"{WMLA_PREFIX}/execs/?", ExecsHandler),
    (rf"{WMLA_PREFIX}/execs/{EXEC_ID}", ExecHandler),
    (rf"{WMLA_PREFIX}/execs/{EXEC_ID}/stop", ExecStopHandler),
    (rf"{WMLA_PREFIX}/execs/{EXEC_ID}/log", ExecLogHandler),
    (rf"{WMLA_PREFIX}/execs/{EXEC_ID}/result", ExecResultHandler),
]
