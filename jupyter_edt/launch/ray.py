"""Runs job processes on the nodes of a Ray cluster, each kept by an actor of its own.

Ray places actors, not arbitrary processes, and does not stop what an actor starts. So every
process of a job (its driver, each worker) gets a *keeper*: a detached, named actor pinned to
the process's node (hard node affinity), holding the process's GPUs in Ray's accounting and no
CPU (`num_cpus=0`: CPU accounting must not cap how many workers a node runs). The keeper starts
the process there as a `LocalLauncher` would (its own session, its log files), tells its exit
code, delivers signals to its whole process group, and kills what is left of the group before
it goes. The process dies with its keeper (`PR_SET_PDEATHSIG`), so a node that fails takes
its processes with it, as a real machine would.

Keepers are named ``<job id>/<process name>`` in the launcher's namespace and outlive the
service (`lifetime="detached"`), so a restarted service finds a running job's processes again
(`adopt`). A keeper that cannot be reached (its node died) counts as a process killed by
SIGKILL: the job loses that worker, as when a GPU fails.

`ray` is imported only when a RayLauncher is made: the rest of jupyter-edt needs no Ray.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from .base import Launcher, ProcessHandle, ProcessSpec
from .local import LocalLauncher, LocalProcess

log = logging.getLogger(__name__)

#: What a driver reads to start its workers through a RayLauncher (`Launcher.driver_env`).
LAUNCHER_ENV = "EDT_LAUNCHER"
ADDRESS_ENV = "EDT_RAY_ADDRESS"
NAMESPACE_ENV = "EDT_RAY_NAMESPACE"
#: The namespace keepers are named in, unless the launcher is given another.
NAMESPACE = "jupyter-edt"
#: How long one call to a keeper may take before it counts as unanswered.
CALL_TIMEOUT_S = 10.0
#: How often a handle asks its keeper whether the process has ended.
ASK_EVERY_S = 0.05
#: The exit code of a process whose keeper is gone (its node died): as if SIGKILLed.
LOST = -signal.SIGKILL


def keeper_name(spec: ProcessSpec) -> str:
    return f"{spec.job_id}/{spec.name}"


class Keeper:
    """The actor that keeps one process (made a Ray actor class by `RayLauncher`)."""

    def __init__(self) -> None:
        self._launcher = LocalLauncher(own_session=True, die_with_parent=True)
        self._process: LocalProcess | None = None

    def start(self, spec: ProcessSpec) -> dict[str, Any]:
        from ..runtime.jobdir import process_start_time

        self._process = self._launcher.start_sync(spec)
        pid = self._process.pid
        return {"pid": pid, "started": process_start_time(pid), "node": _this_node()}

    def identity(self) -> dict[str, Any]:
        """Which process it keeps: pid, start time (with the pid, one process) and node."""
        from ..runtime.jobdir import process_start_time

        assert self._process is not None
        pid = self._process.pid
        return {"pid": pid, "started": process_start_time(pid), "node": _this_node()}

    def returncode(self) -> int | None:
        assert self._process is not None
        return self._process.returncode

    def send_signal(self, sig: int) -> None:
        assert self._process is not None
        self._process.send_signal(sig)

    def finish(self) -> None:
        """Kill what is left of the process's group, then end this actor (its GPUs and name
        are free again)."""
        import ray

        if self._process is not None:
            self._process.send_signal(signal.SIGKILL)
        ray.actor.exit_actor()


def _this_node() -> str:
    import ray

    return ray.get_runtime_context().get_node_id()


class RayProcess(ProcessHandle):
    """A process kept by a keeper actor. Its exit code is asked of the keeper (at most every
    `ASK_EVERY_S`: a controller polls its workers every few milliseconds) and remembered; once
    it is known, the keeper kills what is left of the process's group and ends, giving its
    GPUs back to Ray."""

    def __init__(self, spec: ProcessSpec, keeper: Any, pid: int, node: str) -> None:
        self.spec = spec
        self.pid = pid
        self.node = node
        self._keeper = keeper
        self._code: int | None = None
        self._asked = float("-inf")

    @property
    def returncode(self) -> int | None:
        if self._code is not None:
            return self._code
        now = time.monotonic()
        if now - self._asked < ASK_EVERY_S:
            return None
        self._asked = now
        code = self._call("returncode", default=LOST)
        if code is not None:
            self._code = code
            self._finish()
        return code

    def send_signal(self, sig: int) -> None:
        if self._code is None:
            self._call("send_signal", sig, default=None)

    def _finish(self) -> None:
        """The keeper kills the group's leftovers and ends; not waited for."""
        with contextlib.suppress(Exception):
            self._keeper.finish.remote()

    def _call(self, method: str, *args: Any, default: Any) -> Any:
        """Call the keeper; `default` when it is gone (its node died), None when it did not
        answer in time (it may yet)."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        try:
            return ray.get(getattr(self._keeper, method).remote(*args), timeout=CALL_TIMEOUT_S)
        except GetTimeoutError:
            return None
        except RayActorError:  # ActorDiedError, ActorUnavailableError
            return default


class RayLauncher(Launcher):
    """Starts each process on the node its spec names (`ProcessSpec.node`, a Ray node id; None:
    the node this launcher runs on), holding `len(spec.devices)` of Ray's GPUs there.

    `address`: the cluster (as `ray.init` takes it: ``"auto"``, ``host:port``, ``ray://...``);
    connects on first use, unless this process is already connected.
    """

    def __init__(self, address: str | None = "auto", namespace: str = NAMESPACE) -> None:
        self.address = address
        self.namespace = namespace
        self._keeper_class: Any = None

    def connect(self) -> None:
        import ray

        if not ray.is_initialized():
            ray.init(
                address=self.address,
                namespace=self.namespace,
                log_to_driver=False,
                configure_logging=False,
            )
        if self._keeper_class is None:
            self._keeper_class = ray.remote(Keeper)

    def driver_env(self) -> dict[str, str]:
        import ray

        self.connect()
        address = ray.get_runtime_context().gcs_address
        return {LAUNCHER_ENV: "ray", ADDRESS_ENV: address, NAMESPACE_ENV: self.namespace}

    def reachable_host(self) -> str:
        import ray

        self.connect()
        return ray.util.get_node_ip_address()

    def node(self) -> str:
        """The Ray node this launcher runs on."""
        self.connect()
        return _this_node()

    def start_sync(self, spec: ProcessSpec) -> RayProcess:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self.connect()
        node = spec.node or _this_node()
        gpus = spec.gpus if spec.gpus is not None else len(spec.devices or ())
        keeper = self._keeper_class.options(
            name=keeper_name(spec),
            namespace=self.namespace,
            lifetime="detached",
            num_cpus=0,
            num_gpus=gpus,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
            max_restarts=0,
        ).remote()
        try:
            started = ray.get(keeper.start.remote(replace(spec, node=node)), timeout=120)
        except BaseException:
            with contextlib.suppress(Exception):
                ray.kill(keeper)
            raise
        return RayProcess(spec, keeper, started["pid"], started["node"])

    def adopt(
        self, spec: ProcessSpec, pid: int, started: int, exit_code: Callable[[], int | None]
    ) -> RayProcess | None:
        """The process a previous service started, if its keeper still keeps that very one."""
        import ray

        self.connect()
        try:
            keeper = ray.get_actor(keeper_name(spec), namespace=self.namespace)
            kept = ray.get(keeper.identity.remote(), timeout=CALL_TIMEOUT_S)
        except Exception:  # no such keeper, or it is gone with its node
            return None
        if (kept["pid"], kept["started"]) != (pid, started):
            with contextlib.suppress(Exception):  # it keeps another, or an ended, process
                keeper.finish.remote()
            return None
        return RayProcess(spec, keeper, pid, kept["node"])
