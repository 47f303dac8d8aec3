"""The job service's configuration and lifetime, shared by both ways of hosting it: the
Jupyter server extension (`EDTApp`, the embedded mode) and ``jupyter edt serve`` (`EDTService`,
the shared mode). Each setting is a trait of `JobHost`, so it is given the same way to both
(``c.EDTApp.virtual_gpus = 2``, ``c.EDTService.virtual_gpus = 2``, or ``c.JobHost...`` for both).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from jupyter_core.paths import jupyter_data_dir
from traitlets import Bool, Dict, Enum, Float, Int, List, Type, Unicode, default, observe, validate
from traitlets.config import LoggingConfigurable
from traitlets.utils.importstring import import_item

from .compat.plugin import WMLAPlugin
from .jobs.reconnect import DatabaseUnreachable
from .jobs.runner import DriverRunner
from .jobs.service import JobService
from .jobs.store import JobStore
from .launch.accounts import Account
from .launch.base import Launcher
from .launch.forkserver import ForkServer
from .launch.local import LocalLauncher
from .scheduling.inventory import Inventory, VirtualInventory, open_inventory
from .scheduling.monitor import InventoryMonitor
from .scheduling.policy import POLICIES, Policy, ShareRules
from .telemetry import Telemetry

#: Short names `launcher_class` takes beside import paths.
LAUNCHERS = {
    "local": "jupyter_edt.launch.local.LocalLauncher",
    "ray": "jupyter_edt.launch.ray.RayLauncher",
}


class LauncherType(Type):
    """A Launcher subclass, its import path, or one of the `LAUNCHERS` names."""

    def validate(self, obj: object, value: object) -> object:
        if isinstance(value, str):
            value = LAUNCHERS.get(value, value)
        return super().validate(obj, value)


class JobHost(LoggingConfigurable):
    """The traits of the job service, and its start and stop."""

    devices = Enum(
        ["auto", "nvml", "virtual", "ray"],
        default_value="auto",
        config=True,
        help="""Where devices come from. 'auto' uses the NVIDIA GPUs that NVML reports and
        falls back to virtual GPUs when NVML is absent (no library, no driver, no GPU), or,
        with the Ray launcher, the GPUs of the Ray cluster's nodes; 'nvml' fails instead of
        falling back; 'virtual' always uses virtual GPUs; 'ray' the Ray cluster's GPUs.""",
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
        `jupyter_edt.scheduling.policy.Policy` subclass of your own. Changes live (SIGHUP,
        PATCH /edt/api/v1/admin/config).""",
    )

    launcher_class = LauncherType(
        default_value=LocalLauncher,
        klass=Launcher,
        config=True,
        help="""Where the job service starts each job's processes: 'local' (processes on this
        machine, the default), 'ray' (on the nodes of the Ray cluster at `ray_address`, each
        worker on the node of its GPU), or a `jupyter_edt.launch.base.Launcher` subclass or
        its import path.""",
    )

    warm_imports = List(
        Unicode(),
        config=True,
        help="""Modules the fork server imports besides torch and the runtime, so that the jobs'
        processes that import them start warm: e.g. ["transformers.trainer",
        "lightning.pytorch"] where restart jobs use the integrations (their framework's import
        is most of a restarted worker's start). A module that does not import is skipped. The
        'local' launcher with `warm_workers` only.""",
    )

    warm_workers = Bool(
        True,
        config=True,
        help="""Start jobs' processes (drivers, workers, replacements) on this machine from a
        fork server that has imported torch and the runtime once: a process is ready in tens
        of milliseconds instead of the seconds an interpreter and torch take, so new GPUs train
        sooner. The server never runs a job's code and holds no GPU memory; each process is
        forked for one job, as its user. False: every process starts cold. The 'local'
        launcher only.""",
    )

    ray_address = Unicode(
        "auto",
        config=True,
        help="""The Ray cluster the 'ray' launcher uses, as `ray.init` takes it: 'auto' (the
        cluster this machine's `ray start` joined), 'host:port' of its head, or 'ray://...'.""",
    )

    ray_shared_filesystem = Bool(
        False,
        config=True,
        help="""Whether every Ray node sees `jobs_dir` at the same path (NFS, say). Without one
        (the default), a process placed on another node runs in a copy of its job directory
        there (its code, the newest checkpoint), and what it writes (events, logs,
        checkpoints, the result) is copied back as it goes.""",
    )

    ray_namespace = Unicode(
        "jupyter-edt",
        config=True,
        help="""The Ray namespace jobs' processes are named in: a restarted service finds the
        running ones there. Give each service sharing a cluster its own.""",
    )

    database_url = Unicode(
        config=True,
        help="""SQLAlchemy URL of the job store. Defaults to an SQLite file in the Jupyter
        data directory. PostgreSQL (for a shared service): postgresql+psycopg://user@host/db,
        with the psycopg driver (`pip install 'jupyter-edt[postgresql]'`); a transaction whose
        connection is lost is run again for up to `database_patience` seconds, the service's
        log says so.""",
    )

    database_patience = Float(
        30.0,
        config=True,
        help="""How long a transaction is run again while the job database cannot be reached
        (a PostgreSQL that restarts or fails over). Past it, the API answers 503 with a
        Retry-After, and the service carries on once the database answers again.""",
    )

    jobs_dir = Unicode(
        config=True,
        help="""Directory for each job's submitted code, logs and results. Defaults to
        `jobs/` in the Jupyter data directory's `jupyter_edt` folder.""",
    )

    data_root = Unicode(
        config=True,
        help="""Where WMLA execs find their data (WMLA's DLI_DATA_FS; default: $DLI_DATA_FS):
        `--cs-datastore-meta type=fs,data_path=<p>` gives the program DATA_DIR=<data_root>/<p>,
        and a <p> that leaves it is refused. `{username}` stands for the submitting user, for
        one root per user under a Hub (`/data/{username}`).""",
    )

    min_rescale_interval = Float(
        30.0,
        config=True,
        help="""Seconds a job keeps its GPU count after a rescale before it is rescaled again,
        unless a waiting job needs GPUs to start.""",
    )

    restart_interval = Float(
        60.0,
        config=True,
        help="""Seconds a restart job (a torchrun program, resized by restarting every worker)
        keeps its GPU count after a resize before it is resized again, unless a waiting job
        needs its GPUs to start.""",
    )

    restart_cost = Float(
        30.0,
        config=True,
        help="""Seconds a restart of every worker is assumed to cost a restart job (decision to
        first step) until its own restarts have been measured: it is grown only when the time
        saved pays for that.""",
    )

    restart_grace = Float(
        30.0,
        config=True,
        help="""Seconds a restart or rigid job's workers have after SIGTERM (a resize, a
        suspension) to checkpoint and exit before they are killed, as torchrun gives them.""",
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

    admin_users = List(
        Unicode(),
        config=True,
        help="""Users who see and change every user's jobs, and the settings that change
        live (GET|PATCH /edt/api/v1/admin/config). Changes live (SIGHUP, that API).""",
    )

    admin_groups = List(
        Unicode(),
        config=True,
        help="""Groups whose members are administrators, as `admin_users` are. Groups come
        from each caller's identity (JupyterHub groups, the token file), and from
        `user_groups`. Changes live (SIGHUP, PATCH /edt/api/v1/admin/config).""",
    )

    job_python = Unicode(
        config=True,
        help="""The Python that runs each job's driver, and through it its workers (default:
        the one running the service). When jobs run as their users' accounts, every account
        must be able to execute it and import jupyter_edt and torch with it.""",
    )

    @default("job_python")
    def _default_job_python(self) -> str:
        return sys.executable

    user_weights = Dict(
        value_trait=Float(),
        per_key_traits=None,
        config=True,
        help="""Each user's weight in the fair share between users (default 1): a user of
        weight 2 gets twice the GPUs of a user of weight 1 when both want more. Changes live
        (SIGHUP, PATCH /edt/api/v1/admin/config).""",
    )

    user_quotas = Dict(
        value_trait=Int(),
        config=True,
        help="""The most GPUs each named user's jobs may hold at once. A job its quota keeps
        from starting waits with a reason that starts with "quota". A lowered quota shrinks
        the jobs over it. Changes live (SIGHUP, PATCH /edt/api/v1/admin/config).""",
    )

    group_quotas = Dict(
        value_trait=Int(),
        config=True,
        help="""The most GPUs all the users of each named group may hold at once. Groups come
        from each caller's identity (JupyterHub groups, the token file), and from
        `user_groups`. Changes live (SIGHUP, PATCH /edt/api/v1/admin/config).""",
    )

    user_groups = Dict(
        value_trait=List(Unicode()),
        config=True,
        help="""Groups of users, by user name, beside those their identity provider names.
        Changes live (SIGHUP, PATCH /edt/api/v1/admin/config).""",
    )

    inventory: Inventory
    monitor: InventoryMonitor
    job_service: JobService
    #: Its Prometheus metrics (GET /edt/api/v1/metrics), made with the job service.
    telemetry: Telemetry
    _ticker: asyncio.Task[None] | None = None
    _forkserver: ForkServer | None = None
    _warming: asyncio.Task[None] | None = None

    @default("database_url")
    def _default_database_url(self) -> str:
        return f"sqlite:///{jupyter_data_dir()}/jupyter_edt/edt.sqlite"

    @default("jobs_dir")
    def _default_jobs_dir(self) -> str:
        return f"{jupyter_data_dir()}/jupyter_edt/jobs"

    @default("data_root")
    def _default_data_root(self) -> str:
        return os.environ.get("DLI_DATA_FS", "")

    def _option(self, trait: str) -> str:
        return f"{type(self).__name__}.{trait}"

    @validate("max_upload_bytes")
    def _check_max_upload_bytes(self, proposal: dict) -> int:
        value = proposal["value"]
        if value < 1:
            raise ValueError(f"{self._option('max_upload_bytes')} must be positive, got {value}.")
        return value

    @validate("policy")
    def _check_policy(self, proposal: dict) -> str:
        load_policy(proposal["value"], self._option("policy"))  # now, not at the first job
        return proposal["value"]

    @validate("max_restarts")
    def _check_max_restarts(self, proposal: dict) -> int:
        value = proposal["value"]
        if value < 0:
            raise ValueError(f"{self._option('max_restarts')} must be 0 or more, got {value}.")
        return value

    @validate("database_patience")
    def _check_database_patience(self, proposal: dict) -> float:
        value = proposal["value"]
        if value < 0:
            raise ValueError(
                f"{self._option('database_patience')} must be 0 or more seconds, got {value}."
            )
        return value

    @validate("virtual_gpus")
    def _check_virtual_gpus(self, proposal: dict) -> int:
        value = proposal["value"]
        if value < 0:
            raise ValueError(f"{self._option('virtual_gpus')} must be 0 or more, got {value}.")
        return value

    @observe("warm_workers")
    def _warm_workers_changed(self, change: dict) -> None:
        """Turned off on a running service: its fork server stops (running processes go on)
        and new ones start cold; turned on: a new one starts."""
        service = getattr(self, "job_service", None)
        launcher = getattr(getattr(service, "runner", None), "launcher", None)
        if not isinstance(launcher, LocalLauncher):
            return
        if change["new"]:
            server = self._start_forkserver()
            launcher.use_forkserver(server.name, server.wait_ready)
        else:
            launcher.use_forkserver(None)
            self._stop_forkserver()

    def _start_forkserver(self) -> ForkServer:
        """This host's fork server, started if it runs none (call it on the main thread: the
        server dies with the thread that started it). It runs the jobs' interpreter, whose
        children run as the jobs' users."""
        if self._forkserver is None:
            self._forkserver = ForkServer(self.job_python, self.warm_imports)
            self._forkserver.start()
        return self._forkserver

    def _stop_forkserver(self) -> None:
        """Running jobs' processes do not depend on it: they go on."""
        if self._forkserver is not None:
            self._forkserver.stop()
            self._forkserver = None

    @observe("virtual_gpus")
    def _virtual_gpus_changed(self, change: dict) -> None:
        inventory = getattr(self, "inventory", None)
        if isinstance(inventory, VirtualInventory):
            inventory.resize(change["new"])

    def share_rules(self) -> ShareRules:
        """The configured weights and quotas; ValueError naming the option when one is bad."""
        try:
            return ShareRules(
                weights=dict(self.user_weights),
                user_quotas=dict(self.user_quotas),
                group_quotas=dict(self.group_quotas),
            )
        except ValueError as err:
            raise ValueError(f"{type(self).__name__}: {err}") from err

    def open_job_service(self) -> JobService:
        """Read the devices, open the store and make the job service (nothing runs yet)."""
        rules = self.share_rules()
        self.inventory = self.open_inventory()
        if self.inventory.source == "ray":
            self.log.info("jupyter-edt: scheduling on the GPUs of the Ray cluster's nodes.")
        elif self.inventory.source == "virtual":
            self.log.info(
                "jupyter-edt: scheduling on %d virtual GPUs (CPU worker slots).",
                self.virtual_gpus,
            )
        else:
            self.log.info("jupyter-edt: scheduling on the NVIDIA GPUs that NVML reports.")
        self.monitor = InventoryMonitor(self.inventory)
        self.monitor.record(self.inventory.read(), time.time())
        # a lost database connection is told in this service's log, with the retries
        store = JobStore(
            self.database_url,
            metrics_cap=self.metrics_cap,
            log=self.log,
            reconnect_s=self.database_patience,
        )
        self.job_service = JobService(
            store,
            self.monitor,
            self.make_runner(),
            policy=self.policy,
            load_policy=lambda name: load_policy(name, self._option("policy")),
            min_rescale_interval=self.min_rescale_interval,
            admin_users=self.admin_users,
            admin_groups=self.admin_groups,
            rules=rules,
            groups=self.user_groups,
            max_restarts=self.max_restarts,
            admit_user=self.account_of(),
            restart_interval=self.restart_interval,
            restart_cost=self.restart_cost,
        )
        self.telemetry = Telemetry(self.job_service, self.monitor)
        return self.job_service

    def account_of(self) -> Callable[[str], Account | None] | None:
        """The Unix account each user's jobs run as (it raises `NoAccount`, a sentence, for a
        user without one); None: every job runs as this process's own account."""
        return None

    def uses_ray(self) -> bool:
        from .launch.ray import RayLauncher

        return issubclass(self.launcher_class, RayLauncher)

    def open_inventory(self) -> Inventory:
        """The devices' source: the Ray cluster's GPUs with the Ray launcher (unless
        `devices` says otherwise), else NVML's or virtual ones."""
        if self.devices == "ray" or (self.devices == "auto" and self.uses_ray()):
            from .scheduling.ray_inventory import RayInventory

            return RayInventory(self.ray_address, namespace=self.ray_namespace)
        return open_inventory(self.devices, self.virtual_gpus, logger=self.log)

    def make_launcher(self) -> Launcher:
        if self.uses_ray():
            return self.launcher_class(
                self.ray_address,
                namespace=self.ray_namespace,
                shared_fs=self.ray_shared_filesystem,
            )
        if self.warm_workers and issubclass(self.launcher_class, LocalLauncher):
            server = self._start_forkserver()
            return self.launcher_class(
                forkserver=server.name,
                warm_python=self.job_python,
                forkserver_ready=server.wait_ready,
            )
        return self.launcher_class()

    def make_runner(self) -> DriverRunner:
        account_of = self.account_of()
        return DriverRunner(
            self.make_launcher(),
            self.jobs_dir,
            python=self.job_python,
            driver_module=self.driver_module,
            plugins=[WMLAPlugin(Path(self.jobs_dir) / ".fabric")],  # WMLA programs run as-is
            accounts=None if account_of is None else lambda job: account_of(job.user),
            restart_grace=self.restart_grace,
            max_restarts=self.max_restarts,
        )

    async def start_job_service(self) -> None:
        """Take up the jobs a previous run left (re-attach, resume or fail them), then read
        the devices and reschedule every `refresh_interval` seconds."""
        outcome = await self.job_service.recover(resume_lost=self.resume_lost_jobs)
        for kind, ids in outcome.items():
            if ids:
                self.log.info("jupyter-edt: %s jobs after restart: %s", kind, ", ".join(ids))
        self._ticker = asyncio.create_task(self._tick())
        if self._forkserver is not None:
            self._warming = asyncio.create_task(self._announce_warm(self._forkserver))

    async def _announce_warm(self, forkserver: ForkServer) -> None:
        t0 = time.monotonic()
        if await asyncio.to_thread(forkserver.wait_ready, 300):
            took = time.monotonic() - t0
            self.log.info("jupyter-edt: warm processes ready (preloaded in %.1f s)", took)
        else:
            self.log.warning("jupyter-edt: the fork server did not start: processes start cold")

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.refresh_interval)
            try:
                if await self.monitor.refresh(time.time()):
                    ids = ", ".join(d.id for d in self.monitor.devices)
                    self.log.warning("jupyter-edt: the devices changed; now: %s", ids)
                await self.job_service.reschedule()
            except DatabaseUnreachable as err:  # the store said so: a line, no traceback
                self.log.warning("jupyter-edt: rescheduling waits for the job database: %s", err)
            except Exception:
                self.log.exception("jupyter-edt: a device reading or reschedule failed")

    async def stop_job_service(self) -> None:
        """Stop following jobs; their processes keep running, for the next start to take up."""
        for task in (self._ticker, self._warming):
            if task is not None:
                task.cancel()
        await self.job_service.close()
        await self.job_service.runner.close()
        self.job_service.store.close()
        self.inventory.close()
        self._stop_forkserver()


def load_policy(name: str, option: str = "policy") -> Policy:
    """The policy `name` names: one of `POLICIES`, or a `Policy` subclass by its import path.
    ValueError, naming the `option`, for anything else."""
    if name in POLICIES:
        return POLICIES[name]()
    choices = f"one of {', '.join(POLICIES)} or the import path of a Policy subclass"
    try:
        found = import_item(name)
    except (ImportError, AttributeError, ValueError) as err:
        raise ValueError(f"{option} must be {choices}; {name!r} is neither ({err}).") from err
    if not (isinstance(found, type) and issubclass(found, Policy)):
        raise ValueError(f"{option} must be {choices}; {name!r} is not a Policy subclass.")
    return found()
