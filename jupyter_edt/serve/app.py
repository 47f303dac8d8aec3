"""`EDTService`: the application behind ``jupyter edt serve``."""

from __future__ import annotations

import asyncio
import getpass
import os
import secrets
import signal
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from tornado import web
from tornado.httpserver import HTTPServer
from tornado.log import access_log
from traitlets import Bool, Float, Int, Type, Unicode, default
from traitlets.config import Application, catch_config_error

from ..api import routes
from ..api.credentials import ACCESS_TOKEN_LIFETIME_S, AccessTokens, scrubbed_uri
from ..host import JobHost
from ..launch.accounts import Account, lookup_account
from ..version import __version__
from .auth import Authenticator, HubAuthenticator, TokenFileAuthenticator
from .front import ServiceFront, ServiceSocketFront, service_handlers
from .reload import reload_live_settings


class EDTService(JobHost, Application):
    """The job service of a machine, shared by its users (``jupyter edt serve``).

    Give settings on the command line (``--EDTService.virtual_gpus=4``) or in a config file
    (``--config=edt_config.py``, with ``c.EDTService.virtual_gpus = 4``); ``--help-all`` lists
    them all. Jobs survive a restart of the service, as in the embedded mode."""

    name = "jupyter-edt-serve"
    version = __version__
    description = "The jupyter-edt job service, shared by the users of a machine"

    aliases = {
        "ip": "EDTService.ip",
        "port": "EDTService.port",
        "config": "EDTService.config_file",
        "log-level": "Application.log_level",
    }

    config_file = Unicode("", config=True, help="A Python config file to load.")
    ip = Unicode(
        config=True, help="The address to listen on (default from the Hub's URL, else 127.0.0.1)."
    )
    port = Int(config=True, help="The port to listen on (default from the Hub's URL, else 8765).")
    base_url = Unicode(
        config=True,
        help="The path the API is served under: the Hub's service prefix (/services/edt/) by "
        "default, so the same URLs work through the Hub's proxy and directly.",
    )
    authenticator_class = Type(
        klass=Authenticator,
        config=True,
        help="""How callers are identified: HubAuthenticator (JupyterHub tokens; the default
        when the Hub started the service or gave it a token) or TokenFileAuthenticator (a
        file of tokens, for a team without a Hub).""",
    )
    run_as_users = Bool(
        config=True,
        help="""Run each job as the Unix account named like its user (uid, gid, groups,
        home), its directory readable by that account only. Needs root; the default when
        the service runs as root.""",
    )
    allow_shared_account = Bool(
        False,
        config=True,
        help="""Serve several users although jobs do not run as their users (the service is
        not root, or `run_as_users` is off): every job then runs as the service's own
        account, and each user's jobs can read the others' files. For a trusted team only.""",
    )

    access_token_lifetime = Float(
        ACCESS_TOKEN_LIFETIME_S,
        config=True,
        help="""Seconds an access token from GET /auth/v1/logon (WMLA's clients send it as
        X-Auth-Token) is good for. Tokens are signed with a key made at each start, so a
        restart asks their holders to log on again.""",
    )

    @default("run_as_users")
    def _default_run_as_users(self) -> bool:
        return os.geteuid() == 0

    classes = [HubAuthenticator, TokenFileAuthenticator]

    def _service_url(self) -> Any:
        return urlparse(os.environ.get("JUPYTERHUB_SERVICE_URL", "http://127.0.0.1:8765"))

    @default("ip")
    def _default_ip(self) -> str:
        return self._service_url().hostname or "127.0.0.1"

    @default("port")
    def _default_port(self) -> int:
        return self._service_url().port or 8765

    @default("base_url")
    def _default_base_url(self) -> str:
        return os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/")

    @default("authenticator_class")
    def _default_authenticator_class(self) -> type[Authenticator]:
        hub = "JUPYTERHUB_API_URL" in os.environ or "JUPYTERHUB_API_TOKEN" in os.environ
        return HubAuthenticator if hub else TokenFileAuthenticator

    @catch_config_error
    def initialize(self, argv: Any = None) -> None:
        super().initialize(argv)
        if self.config_file:
            self.load_config_file(self.config_file)
        self.authenticator = self.authenticator_class(parent=self, log=self.log)

    def check(self) -> None:
        """Refuse a configuration that cannot serve users safely, with a sentence."""
        self.authenticator.check()
        account = getpass.getuser()
        if self.run_as_users and os.geteuid() != 0:
            raise ValueError(
                f"EDTService.run_as_users needs root, and the service runs as {account!r}."
            )
        if not self.run_as_users and not self.allow_shared_account:
            raise ValueError(
                f"Every job would run as {account!r}, the service's own account, so each "
                "user's jobs could read the others' files. Run the service as root so that "
                "each job runs as its user, or set EDTService.allow_shared_account = True "
                "for a trusted team."
            )

    def account_of(self) -> Callable[[str], Account | None] | None:
        return lookup_account if self.run_as_users else None

    def _warn_unreachable(self) -> None:
        """Jobs running as users need to reach their interpreter and the jobs directory."""
        for path in (Path(self.job_python), Path(self.jobs_dir)):
            for parent in [*reversed(path.absolute().parents), path.absolute()]:
                if parent.exists() and not parent.stat().st_mode & stat.S_IXOTH:
                    self.log.warning(
                        "jupyter-edt: %s is not searchable by other accounts, so jobs running "
                        "as their users cannot reach %s; see EDTService.job_python/jobs_dir.",
                        parent,
                        path,
                    )
                    break

    def make_app(self) -> web.Application:
        base = "/" + self.base_url.strip("/")
        prefix = "" if base == "/" else base
        handlers = [
            (prefix + path, handler)
            for path, handler in service_handlers + routes(ServiceFront, ServiceSocketFront)
        ]
        return web.Application(
            handlers,  # type: ignore[arg-type]
            edt=self,
            edt_auth=self.authenticator,
            edt_access_tokens=AccessTokens(secrets.token_bytes(32), self.access_token_lifetime),
            log_function=log_request,
            base_url=prefix + "/",
            websocket_ping_interval=20,
        )

    async def serve(self) -> None:
        """Run until SIGTERM or SIGINT; the jobs keep running for the next start. SIGHUP
        reloads the settings that change live (``reload.py``)."""
        self.check()
        if self.run_as_users:
            self._warn_unreachable()
        self.open_job_service()
        await self.start_job_service()
        server = HTTPServer(self.make_app(), max_body_size=self.max_upload_bytes + (1 << 20))
        server.listen(self.port, self.ip)
        self.log.info(
            "jupyter-edt: serving %s at http://%s:%d%s",
            self.authenticator_class.__name__,
            self.ip,
            self.port,
            self.base_url,
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        reloads: set[asyncio.Task[object]] = set()  # held until done
        loop.add_signal_handler(signal.SIGHUP, self._reload_soon, reloads)
        try:
            await stop.wait()
        finally:
            server.stop()
            await self.stop_job_service()
            self.log.info("jupyter-edt: stopped; running jobs are taken up at the next start")

    def _reload_soon(self, reloads: set[asyncio.Task[object]]) -> None:
        task = asyncio.ensure_future(reload_live_settings(self, self.job_service.live))
        reloads.add(task)
        task.add_done_callback(reloads.discard)

    def start(self) -> None:
        asyncio.run(self.serve())


def log_request(handler: web.RequestHandler) -> None:
    """Tornado's access log line, with the values of secret query arguments scrubbed (no
    request header is logged: neither Authorization nor X-Auth-Token reaches the log)."""
    status = handler.get_status()
    log = access_log.info if status < 400 else access_log.warning
    if status >= 500:
        log = access_log.error
    request = handler.request
    uri = scrubbed_uri(request)
    log(
        "%d %s %s (%s) %.2fms",
        status,
        request.method,
        uri,
        request.remote_ip,
        1000.0 * request.request_time(),
    )


main = EDTService.launch_instance
