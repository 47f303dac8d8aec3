"""The Jupyter server extension: configuration, and the wiring of jupyter-edt's services."""

from __future__ import annotations

import asyncio
import getpass
import os
import time
from pathlib import Path

from jupyter_core.paths import jupyter_data_dir
from jupyter_server.auth.identity import IdentityProvider, PasswordIdentityProvider, User
from jupyter_server.extension.application import ExtensionApp
from traitlets import Bool, Enum, Float, Int, List, Type, Unicode, default, observe, validate
from traitlets.utils.importstring import import_item

from . import __version__
from .api import default_handlers, not_found_handlers
from .api.wmla import wmla_handlers
from .compat.plugin import WMLAPlugin
from .jobs.runner import DriverRunner
from .jobs.service import JobService
from .jobs.store import JobStore
from .launch.base import Launcher
from .launch.local import LocalLauncher
from .scheduling.inventory import Inventory, VirtualInventory, open_inventory
from .scheduling.monitor import InventoryMonitor
from .scheduling.policy import POLICIES, Policy


class EDTApp(ExtensionApp):
    """Hosts the GPU inventory (and, as it grows, the allocator and launcher) in Jupyter.

    Every setting below can be given on the command line (`--EDTApp.virtual_gpus=2`) or in a
    `jupyter_server_config.py` (`c.EDTApp.virtual_gpus = 2`).
    """

    name = "jupyter_edt"
    version = __version__
    description = "Elastic distributed training for JupyterLab"
    extension_url = "/lab"
    load_other_extensions = True

    devices = Enum(
        ["auto", "nvml", "virtual"],
        default_value="auto",
        config=True,
        help="""Where devices come from. 'auto' uses the NVIDIA GPUs that NVML reports and
        falls back to virtual GPUs when NVML is absent (no library, no driver, no GPU);
        'nvml' fails instead of falling back; 'virtual' always uses virtual GPUs.""",
    )

    virtual_gpus = Int(
        4,
        config=True,
        help="""Number of virtual GPUs (CPU worker slots) offered when no NVIDIA GPU is used.
        Changed on a running server, it takes effect at the next device reading: the devices
        beyond the new count vanish (their jobs lose them, as with a GPU that fails) or
        appear (and are dealt out).""",
    )

    policy = Unicode(
        "fair-share",
        config=True,
        help="""GPU allocation policy: 'fair-share' (max-min fair between users, then
        between each user's jobs), 'priority' (higher priority first, equal ones fairly),
        'goodput' (spare GPUs where they speed a job up most), or the import path of a
        `jupyter_edt.scheduling.policy.Policy` subclass of your own.""",
    )

    launcher_class = Type(
        default_value=LocalLauncher,
        klass=Launcher,
        config=True,
        help="""Where the job service starts each job's driver: a `jupyter_edt.launch.base.Launcher`
        subclass (or its import path). The default runs it as a process on this machine.""",
    )

    database_url = Unicode(
        config=True,
        help="""SQLAlchemy URL of the job store. Defaults to an SQLite file in the Jupyter
        data directory.""",
    )

    jobs_dir = Unicode(
        config=True,
        help="""Directory for each job's submitted code, logs and results. Defaults to
        `jobs/` in the Jupyter data directory's `jupyter_edt` folder.""",
    )

    min_rescale_interval = Float(
        30.0,
        config=True,
        help="""Seconds a job keeps its GPU count after a rescale before it is rescaled again,
        unless a waiting job needs GPUs to start.""",
    )

    metrics_cap = Int(
        10_000,
        config=True,
        help="""Metric records kept per job; past it, older records are thinned.""",
    )

    resume_lost_jobs = Bool(
        True,
        config=True,
        help="""When the server starts and a running job's processes are gone, queue it again
        to resume from its last checkpoint (True) or mark it FAILED (False).""",
    )

    max_restarts = Int(
        3,
        config=True,
        help="""How many times a job whose driver dies (killed, out of memory) while the server
        runs goes back to the queue to resume from its newest checkpoint. Past that, or
        without a checkpoint, the job fails with the driver's signal or exit code and the end
        of its log. 0: never.""",
    )

    max_upload_bytes = Int(
        512 * 1024 * 1024,
        config=True,
        help="""Largest code archive (.tar, .tar.gz or .zip) a job submission may upload, in
        bytes; it also bounds the archive's unpacked size. Requests over it get 413. This
        route's body limit is raised to it, whatever `ServerApp.max_body_size` says.""",
    )

    refresh_interval = Float(
        5.0,
        config=True,
        help="""Seconds between device readings (NVML memory and utilisation, and whether a
        device vanished). Each reading also lets the allocator act on expired rescale
        intervals.""",
    )

    driver_module = Unicode(
        "jupyter_edt.runtime.driver",
        config=True,
        help="""Module run (`python -m`) as each job's driver. Replace it only with a driver
        that speaks the job-directory protocol of `jupyter_edt.runtime.jobdir` (the events
        benchmark uses a synthetic one).""",
    )

    load_magics = Bool(
        True,
        config=True,
        help="""Load the jupyter-edt magics (%%edt_submit, ...) in the IPython kernels this
        server starts, so that notebooks need no `%load_ext jupyter_edt`.""",
    )

    admin_users = List(
        Unicode(),
        config=True,
        help="""Users who see and change every user's jobs.""",
    )

    owner = Unicode(
        config=True,
        help="""Who owns the jobs of a single-user server. Jupyter's own token and password
        logins do not name a user (each new browser or client is a new anonymous user), so
        on such a server every job belongs to this name: by default the account the server
        runs as. Where an identity provider names users (JupyterHub), its names are used.""",
    )

    inventory: Inventory
    monitor: InventoryMonitor
    job_service: JobService
    _ticker: asyncio.Task[None] | None = None

    @default("owner")
    def _default_owner(self) -> str:
        return getpass.getuser()

    def user_name(self, user: User) -> str:
        """The name jobs are recorded under for an authenticated Jupyter user."""
        provider = type(self.serverapp.identity_provider)
        if provider in (IdentityProvider, PasswordIdentityProvider):
            return self.owner
        return user.username

    @default("database_url")
    def _default_database_url(self) -> str:
        return f"sqlite:///{jupyter_data_dir()}/jupyter_edt/edt.sqlite"

    @default("jobs_dir")
    def _default_jobs_dir(self) -> str:
        return f"{jupyter_data_dir()}/jupyter_edt/jobs"

    @validate("max_upload_bytes")
    def _check_max_upload_bytes(self, proposal: dict) -> int:
        value = proposal["value"]
        if value < 1:
            raise ValueError(f"EDTApp.max_upload_bytes must be positive, got {value}.")
        return value

    @validate("policy")
    def _check_policy(self, proposal: dict) -> str:
        load_policy(proposal["value"])  # a clear error now rather than at the first job
        return proposal["value"]

    @validate("max_restarts")
    def _check_max_restarts(self, proposal: dict) -> int:
        value = proposal["value"]
        if value < 0:
            raise ValueError(f"EDTApp.max_restarts must be 0 or more, got {value}.")
        return value

    @validate("virtual_gpus")
    def _check_virtual_gpus(self, proposal: dict) -> int:
        value = proposal["value"]
        if value < 0:
            raise ValueError(f"EDTApp.virtual_gpus must be 0 or more, got {value}.")
        return value

    @observe("virtual_gpus")
    def _virtual_gpus_changed(self, change: dict) -> None:
        inventory = getattr(self, "inventory", None)
        if isinstance(inventory, VirtualInventory):
            inventory.resize(change["new"])

    def initialize_settings(self) -> None:
        self.inventory = open_inventory(self.devices, self.virtual_gpus, logger=self.log)
        if self.inventory.source == "virtual":
            self.log.info(
                "jupyter-edt: scheduling on %d virtual GPUs (CPU worker slots).",
                self.virtual_gpus,
            )
        else:
            self.log.info("jupyter-edt: scheduling on the NVIDIA GPUs that NVML reports.")
        # Kernels inherit the server's environment; notebook/autoload.py reads this.
        if self.load_magics:
            os.environ["EDT_LOAD_MAGICS"] = "1"
        else:
            os.environ.pop("EDT_LOAD_MAGICS", None)
        self.monitor = InventoryMonitor(self.inventory)
        self.monitor.record(self.inventory.read(), time.time())
        store = JobStore(self.database_url, metrics_cap=self.metrics_cap)
        self.job_service = JobService(
            store,
            self.monitor,
            DriverRunner(
                self.launcher_class(),
                self.jobs_dir,
                driver_module=self.driver_module,
                plugins=[WMLAPlugin(Path(self.jobs_dir) / ".fabric")],  # WMLA programs run as-is
            ),
            policy=load_policy(self.policy),
            min_rescale_interval=self.min_rescale_interval,
            admin_users=self.admin_users,
            max_restarts=self.max_restarts,
        )

    async def _start_jupyter_server_extension(self, serverapp: object) -> None:
        outcome = await self.job_service.recover(resume_lost=self.resume_lost_jobs)
        for kind, ids in outcome.items():
            if ids:
                self.log.info("jupyter-edt: %s jobs after restart: %s", kind, ", ".join(ids))
        self._ticker = asyncio.create_task(self._tick())

    async def _tick(self) -> None:
        """Read the devices and let the allocator act, every `refresh_interval` seconds."""
        while True:
            await asyncio.sleep(self.refresh_interval)
            try:
                if await self.monitor.refresh(time.time()):
                    ids = ", ".join(d.id for d in self.monitor.devices)
                    self.log.warning("jupyter-edt: the devices changed; now: %s", ids)
                await self.job_service.reschedule()
            except Exception:
                self.log.exception("jupyter-edt: a device reading or reschedule failed")

    def initialize_handlers(self) -> None:
        self.handlers.extend(default_handlers)
        self.handlers.extend(wmla_handlers)
        self.handlers.extend(not_found_handlers)  # last

    async def stop_extension(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
        await self.job_service.close()
        await self.job_service.runner.close()
        self.job_service.store.close()
        self.inventory.close()


main = launch_new_instance = EDTApp.launch_instance


def load_policy(name: str) -> Policy:
    """The policy `EDTApp.policy` names: one of `POLICIES`, or a `Policy` subclass by its
    import path. ValueError, naming the option, for anything else."""
    if name in POLICIES:
        return POLICIES[name]()
    choices = f"one of {', '.join(POLICIES)} or the import path of a Policy subclass"
    try:
        found = import_item(name)
    except (ImportError, AttributeError, ValueError) as err:
        raise ValueError(f"EDTApp.policy must be {choices}; {name!r} is neither ({err}).") from err
    if not (isinstance(found, type) and issubclass(found, Policy)):
        raise ValueError(f"EDTApp.policy must be {choices}; {name!r} is not a Policy subclass.")
    return found()
