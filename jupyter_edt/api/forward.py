"""The remote mode's API: the user's Jupyter server forwards /edt/api/*, WMLA's
/platform/rest/* and the events WebSocket to the shared ``jupyter edt serve``, in its user's
name.

The server authenticates the caller as usual (Jupyter's front, WMLA's Basic and access tokens
included); only the server's own user is forwarded, with the server's Hub token (which the Hub
gives the access scope of the service through `c.Spawner.server_token_scopes`), never with the
caller's credentials. A visitor of a shared server is refused rather than acting as its owner.
WMLA's logons are answered here: an access token is this server's, checked here. Bodies and
answers stream through, so uploads and result downloads cost no memory here. The service hears
where the caller reached this server (``X-Forwarded-Proto``, ``-Host``, ``-Prefix``), so the
URLs it names in its answers (an exec's ``schedulerUrl``) are this server's.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Awaitable, Callable
from typing import IO, Any
from urllib.parse import urlsplit

from tornado import httpclient, web, websocket
from tornado.httputil import HTTPHeaders

from . import joined, logon_handlers
from .base import APIError, StreamedBody
from .credentials import challenge
from .jupyter import JupyterFront, JupyterSocketFront
from .openapi import NotFoundHandler

#: Request headers passed on (hop-by-hop ones and the caller's credentials are not).
PASSED_REQUEST = ("Content-Type", "Accept", "Range", "If-None-Match", "If-Modified-Since")
#: Answer headers passed back.
PASSED_ANSWER = (
    "Content-Type", "Content-Disposition", "Content-Length", "Content-Range", "Accept-Ranges",
    "ETag", "Last-Modified", "Location", "Allow", "WWW-Authenticate",
)  # fmt: skip
CHUNK = 1 << 16
#: Where the API's paths begin, below a server's base URL: the native API's and WMLA's.
API_ROOTS = ("/edt/api/", "/platform/rest/")


class _Remote:
    """What both forwarders share: the service's address and who may be forwarded."""

    @property
    def remote(self: Any) -> Any:
        return self.extensionapp

    async def _caller(self: Any) -> None:
        await self.identify()

    async def identify(self: Any) -> Any:
        identity = await super().identify()
        owner = self.remote.owner
        if identity.name != owner:
            raise APIError(
                403,
                f"This Jupyter server belongs to {owner}; jupyter-edt does not act in their name "
                f"for {identity.name}. Use your own server, or the service itself (EDT_URL) "
                "with your own token.",
            )
        return identity

    def write_error(self: Any, status_code: int, **kwargs: Any) -> None:
        if status_code == 401:  # as the API's own handlers do (`EDTHandler.write_error`)
            self.set_header(
                "WWW-Authenticate", challenge(self.request, self.base_url, self.credentials)
            )
        super().write_error(status_code, **kwargs)

    def upstream_url(self: Any, scheme: str = "http") -> str:
        """The service's URL for this request: its path as it came (still percent-encoded:
        an artifact's name may hold any character), below the service's base."""
        base = self.remote.service_url.rstrip("/")
        if scheme == "ws":
            base = "ws" + base[4:]  # http -> ws, https -> wss
        raw = self.request.path
        query = f"?{self.request.query}" if self.request.query else ""
        start = len(self.base_url.rstrip("/"))  # the route matched the path below the base
        return f"{base}{raw[start:]}{query}"

    def upstream_headers(self: Any) -> dict[str, str]:
        headers = {k: v for k in PASSED_REQUEST if (v := self.request.headers.get(k))}
        headers["Authorization"] = f"token {self.remote.service_token}"
        # where the caller reached this server (a proxy in front of it, JupyterHub's, says)
        asked = self.request.headers
        headers["X-Forwarded-Proto"] = asked.get("X-Forwarded-Proto", self.request.protocol)
        headers["X-Forwarded-Host"] = asked.get("X-Forwarded-Host", self.request.host)
        headers["X-Forwarded-Prefix"] = self.base_url.rstrip("/") or "/"
        return headers


@web.stream_request_body
class ForwardHandler(StreamedBody, _Remote, JupyterFront):
    _request_body: IO[bytes] | None = None

    async def prepare(self) -> None:
        await super().prepare()
        if self.request.method == "OPTIONS":
            return
        await self._caller()
        if self.request.method in ("POST", "PUT", "PATCH"):
            # the service caps uploads itself; this server only passes them on
            self.request.connection.set_max_body_size(self.remote.max_upload_bytes + (1 << 20))  # type: ignore[union-attr]
            self._request_body = tempfile.SpooledTemporaryFile(max_size=CHUNK)  # noqa: SIM115 - on_finish

    def data_received(self, chunk: bytes) -> None:
        if self._request_body is not None:
            self._request_body.write(chunk)

    async def _forward(self) -> None:
        body_producer = None
        if self._request_body is not None:
            self._request_body.seek(0)
            body = self._request_body

            async def body_producer(write: Callable[[bytes], Awaitable[None]]) -> None:
                while chunk := body.read(CHUNK):
                    await write(chunk)

        request = httpclient.HTTPRequest(
            self.upstream_url(),
            method=self.request.method,
            headers=self.upstream_headers(),
            body_producer=body_producer,
            allow_nonstandard_methods=True,
            header_callback=self._upstream_header,
            streaming_callback=self._upstream_chunk,
            follow_redirects=False,
            request_timeout=3600,
            decompress_response=False,
        )
        self._answer_status: int | None = None
        self._answer_headers = HTTPHeaders()
        try:
            response = await self.remote.forward_client.fetch(request, raise_error=False)
        except OSError as err:
            raise APIError(
                502,
                f"The jupyter-edt service at {self.remote.service_url} does not answer ({err}).",
            ) from err
        if response.code == 599:
            raise APIError(
                502,
                f"The jupyter-edt service at {self.remote.service_url} does not answer "
                f"({response.error}).",
            )
        if not self._headers_written:  # an empty answer: its headers as the service set them
            await self.flush()  # (Jupyter's `finish` would make it JSON)
        self.finish()

    def _upstream_header(self, line: str) -> None:
        if line.startswith("HTTP/"):
            self._answer_status = int(line.split(" ", 2)[1])
            self._answer_headers = HTTPHeaders()
            return
        if line.strip():
            self._answer_headers.parse_line(line)
            return
        if self._answer_status is None or 100 <= self._answer_status < 200:
            return  # the end of an interim answer
        self.set_status(self._answer_status)
        self.clear_header("Content-Type")
        for name in PASSED_ANSWER:
            if name in self._answer_headers:
                value = self._answer_headers[name]
                if name == "Location":
                    value = self._local_location(value)
                self.set_header(name, value)

    def _local_location(self, value: str) -> str:
        """The service's path for a new job, as this server's path."""
        path = urlsplit(value).path
        cuts = [c for root in API_ROOTS if (c := path.find(root)) >= 0]
        return value if not cuts else self.base_url.rstrip("/") + path[min(cuts) :]

    def _upstream_chunk(self, chunk: bytes) -> None:
        self.write(chunk)
        self.flush()

    async def get(self, path: str) -> None:
        await self._forward()

    post = put = patch = delete = head = get

    def on_finish(self) -> None:
        if self._request_body is not None:
            self._request_body.close()
            self._request_body = None


class ForwardSocket(_Remote, JupyterSocketFront):
    """The events WebSocket, relayed message by message from the service's."""

    _upstream: websocket.WebSocketClientConnection | None = None

    async def get(self, path: str) -> None:  # type: ignore[override]
        await self._caller()
        request = httpclient.HTTPRequest(
            self.upstream_url("ws"), headers=self.upstream_headers(), request_timeout=30
        )
        try:  # connect first: a refusal is still an HTTP answer to the caller
            self._upstream = await websocket.websocket_connect(request)
        except httpclient.HTTPClientError as err:
            raise web.HTTPError(err.code, err.message) from err
        except OSError as err:
            raise web.HTTPError(502, f"The jupyter-edt service does not answer ({err})") from err
        await super().get(path)

    def open(self, *args: Any, **kwargs: Any) -> None:
        self._pump = asyncio.ensure_future(self._relay())

    async def _relay(self) -> None:
        upstream = self._upstream
        assert upstream is not None
        while (message := await upstream.read_message()) is not None:
            try:
                await self.write_message(message, binary=isinstance(message, bytes))
            except websocket.WebSocketClosedError:
                break
        self.close()

    def on_message(self, message: str | bytes) -> None:
        if self._upstream is not None:
            self._upstream.write_message(message, binary=isinstance(message, bytes))

    def on_close(self) -> None:
        if self._upstream is not None:
            self._upstream.close()


class _OwnerOnly(_Remote, JupyterFront):
    """The front of what this server answers itself in the remote mode: its owner only."""


forward_handlers = [
    (r"/edt/api/(v1/events)", ForwardSocket),
    *joined(logon_handlers, _OwnerOnly, JupyterSocketFront),
    (r"/edt/api/(.*)", ForwardHandler),
    (r"/platform/rest/(.*)", ForwardHandler),
    # the service answers its own unknown paths; /auth/v1/ is this server's (the logon)
    *joined([(r"/auth/v1(?:/.*)?", NotFoundHandler)], _OwnerOnly, JupyterSocketFront),
]
