"""The Jupyter server extension: the job service in the user's server (the embedded mode), or,
with `service_url`, the API forwarded to a shared ``jupyter edt serve`` (the remote mode)."""

from __future__ import annotations

import functools
import getpass
import os

from jupyter_server.auth.identity import IdentityProvider, PasswordIdentityProvider, User
from jupyter_server.extension.application import ExtensionApp
from tornado.httpclient import AsyncHTTPClient
from traitlets import Bool, Float, Unicode, default

from . import __version__
from .api import routes
from .api.credentials import ACCESS_TOKEN_LIFETIME_S
from .api.forward import forward_handlers
from .api.jupyter import JupyterFront, JupyterSocketFront
from .host import JobHost, load_policy
from .jobs.users import Identity

__all__ = ["EDTApp", "load_policy", "main"]


class EDTApp(JobHost, ExtensionApp):
    """Hosts the job service (allocator, inventory, launcher, store) in Jupyter.

    Every setting below can be given on the command line (`--EDTApp.virtual_gpus=2`) or in a
    `jupyter_server_config.py` (`c.EDTApp.virtual_gpus = 2`).
    """

    name = "jupyter_edt"
    version = __version__
    description = "Elastic distributed training for JupyterLab"
    extension_url = "/lab"
    load_other_extensions = True

    load_magics = Bool(
        True,
        config=True,
        help="""Load the jupyter-edt magics (%%edt_submit, ...) in the IPython kernels this
        server starts, so that notebooks need no `%load_ext jupyter_edt`.""",
    )

    owner = Unicode(
        config=True,
        help="""Who owns the jobs of a single-user server. Jupyter's own token and password
        logins do not name a user (each new browser or client is a new anonymous user), so
        on such a server every job belongs to this name: by default the account the server
        runs as. Where an identity provider names users (JupyterHub), its names are used.""",
    )

    service_url = Unicode(
        config=True,
        help="""The URL of a shared `jupyter edt serve` (default: $EDT_SERVICE_URL, which a
        JupyterHub spawner can set). When set, this server runs no job service of its own:
        it forwards the API to that service in its user's name (the remote mode).""",
    )

    service_token = Unicode(
        config=True,
        help="""The token this server calls the shared service with (default: the server's
        JupyterHub token, $JUPYTERHUB_API_TOKEN, which needs the service's access scope:
        `c.Spawner.server_token_scopes`).""",
    )

    access_token_lifetime = Float(
        ACCESS_TOKEN_LIFETIME_S,
        config=True,
        help="""Seconds an access token from GET /auth/v1/logon (WMLA's clients send it as
        X-Auth-Token) is good for. Tokens are signed with a key derived from the server's
        cookie secret, so they outlive a restart that keeps it.""",
    )

    @default("owner")
    def _default_owner(self) -> str:
        return os.environ.get("JUPYTERHUB_USER") or getpass.getuser()

    @default("service_url")
    def _default_service_url(self) -> str:
        return os.environ.get("EDT_SERVICE_URL", "")

    @default("service_token")
    def _default_service_token(self) -> str:
        return os.environ.get("JUPYTERHUB_API_TOKEN", "")

    @property
    def remote(self) -> bool:
        return bool(self.service_url)

    @functools.cached_property
    def forward_client(self) -> AsyncHTTPClient:
        """The forwarder's own HTTP client: a long download through it must not hold one of
        the few connections of the server's shared client."""
        return AsyncHTTPClient(force_instance=True, max_clients=64)

    def user_name(self, user: User) -> str:
        """The name jobs are recorded under for an authenticated Jupyter user."""
        provider = type(self.serverapp.identity_provider)
        if provider in (IdentityProvider, PasswordIdentityProvider):
            return self.owner
        return user.username

    def identity(self, user: User) -> Identity:
        """The caller the job service is told of (administrators: `admin_users`)."""
        return Identity(self.user_name(user))

    def initialize_settings(self) -> None:
        # Kernels inherit the server's environment; notebook/autoload.py reads this.
        if self.load_magics:
            os.environ["EDT_LOAD_MAGICS"] = "1"
        else:
            os.environ.pop("EDT_LOAD_MAGICS", None)
        self.settings["edt"] = self
        if self.remote:
            if not self.service_token:
                raise ValueError(
                    "EDTApp.service_url is set but no token to call it with: set "
                    "EDTApp.service_token, or run the server under JupyterHub."
                )
            self.log.info("jupyter-edt: forwarding to the shared service at %s", self.service_url)
        else:
            self.open_job_service()

    async def _start_jupyter_server_extension(self, serverapp: object) -> None:
        if not self.remote:
            await self.start_job_service()

    def initialize_handlers(self) -> None:
        if self.remote:
            self.handlers.extend(forward_handlers)
        else:
            self.handlers.extend(routes(JupyterFront, JupyterSocketFront))

    async def stop_extension(self) -> None:
        if not self.remote:
            await self.stop_job_service()


main = launch_new_instance = EDTApp.launch_instance
