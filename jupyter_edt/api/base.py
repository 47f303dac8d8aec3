"""What every jupyter-edt handler shares: who is calling, JSON answers, and one mapping from
the services' errors to HTTP statuses.

The handlers here say what each operation does, not how callers are authenticated: a *front*
does that (`identify`). The Jupyter server's extension composes them with Jupyter's
authentication (``api/jupyter.py``); ``jupyter edt serve`` with JupyterHub tokens or a token
file (``serve/``). `routes()` (``api/__init__.py``) makes the composed classes.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from tornado import web

from ..jobs.models import JobConflict, SpecError
from ..jobs.reconnect import RETRY_AFTER_S, DatabaseUnreachable
from ..jobs.service import JobService, NotAllowed
from ..jobs.store import UnknownJob
from ..jobs.users import Identity
from ..scheduling.monitor import UnknownNode
from .credentials import Credentials, challenge

if TYPE_CHECKING:
    from ..host import JobHost

log = logging.getLogger(__name__)

# The largest integer SQLite stores, so no id exceeds it; a cursor past it asks for nothing,
# but may not reach a query, which would overflow.
LAST_ID = 2**63 - 1
# Integral JSON numbers up to this size are read as ints (past it, a float cannot tell them apart).
EXACT_INT = 2**53


def _number(text: str) -> int | float:
    """JSON has one number type, and JSON Schema, in which the API's contract is written,
    counts 3.0 (or 3e0) as the integer 3: so does the API. Any other number stays a float."""
    value = Decimal(text)
    if value == value.to_integral_value() and abs(value) <= EXACT_INT:
        return int(value)
    return float(text)


def loads(data: str | bytes) -> Any:
    """Decode a request's JSON."""
    return json.loads(data, parse_float=_number)


class APIError(web.HTTPError):
    """An HTTP error whose JSON body names the offending field, when there is one."""

    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        super().__init__(status, message)
        self.message = message
        self.field = field


@contextmanager
def api_errors() -> Iterator[None]:
    try:
        yield
    except SpecError as err:
        raise APIError(400, err.message, err.field) from err
    except (UnknownJob, UnknownNode) as err:
        raise APIError(404, str(err)) from err
    except NotAllowed as err:
        raise APIError(403, str(err)) from err
    except JobConflict as err:
        raise APIError(409, str(err), err.field) from err
    except ValueError as err:
        raise APIError(400, str(err)) from err


class StreamedBody:
    """For ``@web.stream_request_body`` handlers: an error answers with ``Connection: close``.

    Answered before the request's body was read (``prepare``: not authenticated, too large),
    Tornado closes the connection once the answer is sent, but has sent it as keep-alive. A
    proxy in front that keeps connections (JupyterHub's) could send its next request on that
    one as it closes, and answer its caller 503 (ECONNRESET). The header keeps it from reusing
    the connection."""

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        self.set_header("Connection", "close")  # type: ignore[attr-defined]
        super().write_error(status_code, **kwargs)  # type: ignore[misc]


class EDTHandler(web.RequestHandler):
    """Base of the REST handlers. Before any method runs, the front identifies the caller
    (`identify`: 401 or 403 for a stranger) and the service hears who they are."""

    #: The caller, once `prepare` has identified them.
    identity: Identity
    #: What a WMLA client authenticated with (Basic, or an access token), if it did.
    credentials: Credentials | None = None
    #: Whether the service hears of the caller (not where it answers without a job service:
    #: the logon of a server that forwards to a shared one).
    notes_caller = True

    @property
    def host(self) -> JobHost:
        """What hosts the job service: the Jupyter extension, or `jupyter edt serve`."""
        return self.settings["edt"]

    @property
    def service(self) -> JobService:
        return self.host.job_service

    @property
    def user_name(self) -> str:
        return self.identity.name

    if TYPE_CHECKING:  # a front defines it, after this class in the composed class's MRO

        async def identify(self) -> Identity:
            """Who is calling; raises HTTPError 401 (no credentials) or 403."""

        async def issue_access_token(self) -> tuple[str, int]:
            """An access token for the identified caller, and its expiry (``api/logon.py``)."""

    async def prepare(self) -> None:
        pending = super().prepare()
        if pending is not None:
            await pending
        if self.request.method != "OPTIONS":  # a CORS preflight carries no credentials
            await self.identified()

    async def identified(self) -> Identity:
        """Identify the caller once per request and tell the service who they are."""
        if not hasattr(self, "identity"):
            self.identity = await self.identify()
            if self.notes_caller:
                self.service.users.note(self.identity)
        return self.identity

    @property
    def base_path(self) -> str:
        """The path the server serves under (/user/alice/ behind JupyterHub)."""
        return self.settings.get("base_url", "/")

    def on_finish(self) -> None:
        """Time the answer (the Prometheus metrics' API latency), where a job service runs."""
        super().on_finish()
        telemetry = getattr(self.host, "telemetry", None)
        if telemetry is not None:
            telemetry.request_finished(
                type(self).__name__,
                self.request.method or "",
                self.get_status(),
                self.request.request_time(),
            )

    def write_json(self, body: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(body))

    @classmethod
    def allowed_methods(cls) -> list[str]:
        """The HTTP methods this handler defines (OPTIONS, Jupyter's CORS answer, excluded)."""
        names = ("get", "head", "post", "put", "patch", "delete")
        return [m.upper() for m in names if getattr(cls, m) is not getattr(web.RequestHandler, m)]

    def json_body(self) -> Any:
        try:
            return loads(self.request.body or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise APIError(400, f"The request body is not valid JSON: {err}", "body") from err

    def log_exception(self, typ: Any, value: Any, tb: Any) -> None:
        if isinstance(value, DatabaseUnreachable):  # the store logged it: a line, no traceback
            log.warning("%s %s: 503: %s", self.request.method, self.request.path, value)
            return
        super().log_exception(typ, value, tb)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        if status_code == 405:  # RFC 9110: a 405 names the methods the resource has
            self.set_header("Allow", ", ".join(self.allowed_methods()))
        if status_code == 401:  # and a 401 the scheme that authenticates
            self.set_header(
                "WWW-Authenticate", challenge(self.request, self.base_path, self.credentials)
            )
        if not write_api_error(self, **kwargs):
            super().write_error(status_code, **kwargs)


def write_api_error(handler: web.RequestHandler, **kwargs: Any) -> bool:
    """Answer an `APIError` as JSON naming its field (from `write_error`), and a job database
    that stayed out of reach as 503 with a Retry-After; False for any other error, which the
    handler's own `write_error` answers."""
    exc = kwargs.get("exc_info", (None, None, None))[1]
    if isinstance(exc, DatabaseUnreachable):
        handler.set_status(503)
        handler.set_header("Retry-After", str(RETRY_AFTER_S))
        exc = APIError(503, str(exc))
    if not isinstance(exc, APIError):
        return False
    body: dict[str, Any] = {"message": exc.message}
    if exc.field is not None:
        body["field"] = exc.field
    handler.set_header("Content-Type", "application/json")
    handler.finish(json.dumps(body))
    return True
