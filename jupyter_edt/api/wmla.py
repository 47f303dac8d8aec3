"""WMLA's deep-learning API over the job service, at WMLA's own paths
(``/platform/rest/deeplearning/v1``) and at ``/edt/api/wmla/v1`` (its first home, kept as an
alias): the same handlers on both prefixes, so a WMLA client changes its host name only.

``GET conf`` and ``execs/frameworks`` describe the platform. Submit with ``POST
execs?args=<args>`` and a multipart ``file`` part (a gzip tar ``<name>.modelDir.tar``),
streamed like the native upload (``uploads.py``); ``args`` is read as clients paste it into
the URL (``compat.execargs.exec_query``), ``sigName`` is accepted and names the one pool. Then
list, get, delete, stop, read the logs (``execs/{id}/log``, ``scheduler/applications/{id}/
executor/{n}/logs/stdout|stderr``) and download the result. Authentication, owner scoping and
error bodies are the native API's; the logic is in ``compat/execs.py``.
"""

from __future__ import annotations

from tornado import web
from tornado.httputil import HTTPServerRequest

from ..compat.execargs import exec_query
from ..compat.execs import Execs
from .artifacts import send_file
from .base import APIError, EDTHandler, api_errors
from .uploads import FormError, SubmitHandler, UploadForm

#: WMLA's prefix first; the second is the alias every earlier client used.
WMLA_PREFIXES = ("/platform/rest/deeplearning/v1", "/edt/api/wmla/v1")
WMLA_PREFIX = WMLA_PREFIXES[1]
EXEC_ID = r"(?P<exec_id>[^/]+)"


class ExecForm(UploadForm):
    """The execs upload: one ``file`` part; the args come in the query string."""

    def close(self) -> None:
        if self._state != "end":
            raise FormError("The multipart body ends before its closing boundary.", "body")
        if "file" not in self.seen:
            raise FormError("The archive is missing: send it as the 'file' part.", "file")


def deep_learning_url(request: HTTPServerRequest, base_path: str) -> str:
    """This server's deep-learning API as the caller reached it (an exec's ``schedulerUrl``):
    at WMLA's prefix below `base_path`, or where a proxy or a forwarding user's server says it
    was reached (``X-Forwarded-Proto``, ``-Host``, ``-Prefix``). Only the caller sees it."""
    headers = request.headers

    def said(name: str, default: str) -> str:
        return headers.get(name, "").split(",")[0].strip() or default

    proto = said("X-Forwarded-Proto", request.protocol)
    host = said("X-Forwarded-Host", request.host)
    prefix = said("X-Forwarded-Prefix", base_path).strip("/")
    path = "/".join(part for part in (prefix, WMLA_PREFIXES[0].strip("/")) if part)
    return f"{proto}://{host}/{path}"


class ExecsMixin:
    @property
    def execs(self) -> Execs:
        handler: EDTHandler = self  # type: ignore[assignment]
        host = handler.host
        return Execs(
            host.job_service,
            data_root=getattr(host, "data_root", ""),
            scheduler_url=deep_learning_url(handler.request, handler.base_path),
        )

    async def write_text_or_json(self, text: str, *, text_by_default: bool) -> None:
        """`text` raw for a client that accepts text/plain or octet-stream (and not JSON), as
        one JSON string for one that accepts JSON; else as `text_by_default` says. Raw text
        is flushed before the answer finishes: Jupyter's API handlers mark what `finish`
        sends as JSON."""
        handler: EDTHandler = self  # type: ignore[assignment]
        accept = handler.request.headers.get("Accept", "").lower()
        if "application/json" in accept:
            as_text = False
        elif "text/plain" in accept or "application/octet-stream" in accept:
            as_text = True
        else:
            as_text = text_by_default
        if as_text:
            data = text.encode()
            handler.set_header("Content-Type", "text/plain; charset=UTF-8")
            handler.set_header("Content-Length", str(len(data)))
            handler.write(data)
            await handler.flush()
            handler.finish()
        else:
            handler.write_json(text)


class ConfHandler(ExecsMixin, EDTHandler):
    async def get(self) -> None:
        self.write_json(self.execs.conf())


class FrameworksHandler(ExecsMixin, EDTHandler):
    async def get(self) -> None:
        self.write_json(self.execs.frameworks())


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
                exec_query(self.request.query).get("args"),
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
    """The training log, or with ``logType`` the program's output; a JSON string by default."""

    async def get(self, exec_id: str) -> None:
        with api_errors():
            text = await self.execs.log(self.user_name, exec_id, self.get_argument("logType", None))
        await self.write_text_or_json(text, text_by_default=False)


class ExecutorLogHandler(ExecsMixin, EDTHandler):
    """One executor's (worker's) output; text by default."""

    async def get(self, exec_id: str, executor: str, stream: str) -> None:
        with api_errors():
            text = await self.execs.executor_log(
                self.user_name,
                exec_id,
                executor,
                stream,
                self.get_argument("lastlines", None),
            )
        await self.write_text_or_json(text, text_by_default=True)


class ExecResultHandler(ExecsMixin, EDTHandler):
    """The result zip, built whole before it is sent: clients read its exact size from the
    ``size=`` that ends Content-Disposition before the body, for a progress bar."""

    async def get(self, exec_id: str) -> None:  # type: ignore[override]
        with api_errors():
            f, size = await self.execs.result_zip(self.user_name, exec_id)  # or 404
        with f:
            self.set_header("Content-Type", "application/zip")
            self.set_header(
                "Content-Disposition", f"attachment; filename={exec_id}.zip; size={size}"
            )
            self.set_header("Content-Length", str(size))
            await send_file(self, f, size)  # type: ignore[arg-type]


def _routes(prefix: str) -> list[tuple[str, type[web.RequestHandler]]]:
    executor = r"(?P<executor>[^/]+)/logs/(?P<stream>stdout|stderr)"
    return [
        (rf"{prefix}/conf", ConfHandler),
        (rf"{prefix}/execs/frameworks", FrameworksHandler),  # before execs/{exec_id}
        (rf"{prefix}/execs/?", ExecsHandler),
        (rf"{prefix}/execs/{EXEC_ID}", ExecHandler),
        (rf"{prefix}/execs/{EXEC_ID}/stop", ExecStopHandler),
        (rf"{prefix}/execs/{EXEC_ID}/log", ExecLogHandler),
        (rf"{prefix}/execs/{EXEC_ID}/result", ExecResultHandler),
        (rf"{prefix}/scheduler/applications/{EXEC_ID}/executor/{executor}", ExecutorLogHandler),
    ]


wmla_handlers = [route for prefix in WMLA_PREFIXES for route in _routes(prefix)]
