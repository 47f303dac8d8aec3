"""Runs job processes on the nodes of a Ray cluster, each kept by an actor of its own.

Ray places actors, not arbitrary processes, and does not stop what an actor starts. So every
process of a job (its driver, each worker) gets a *keeper*: a named actor pinned to
the process's node (hard node affinity), holding the process's GPUs in Ray's accounting and no
CPU (`num_cpus=0`: CPU accounting must not cap how many workers a node runs). The keeper starts
the process there as a `LocalLauncher` would (its own session, its log files), tells its exit
code, delivers signals to its whole process group, and kills what is left of the group before
it goes. The process dies with its keeper (`PR_SET_PDEATHSIG`), so a node that fails takes
its processes with it, as a real machine would.

No file system is assumed shared: a process placed on another node than the launcher's runs in
a copy of its job directory there, and what it writes comes back with each poll of its keeper
(`launch/mirror.py`), unless the launcher is told `shared_fs`.

Keepers are named ``<job id>/<process name>`` in the launcher's namespace. A driver's keeper
outlives the service (`lifetime="detached"`), so a restarted service finds a running job's
processes again (`adopt`); a worker's belongs to its driver (`detached=False`: Ray ends an
actor with its owner), so a driver that dies, even one stopped while it was placing a worker,
leaves no keeper holding a GPU behind it. A keeper that cannot be reached (its node died)
counts as a process killed by SIGKILL, lost with its node (`ProcessHandle.vanished`): the job
loses that worker, and nothing is placed on that node for a while (`RayLauncher.available`).
How soon a silent keeper counts as lost is the caller's to say as well (`abandon`): a driver's
controller does it within a second of the worker's group failing (`runtime/control.py`).

`ray` is imported only when a RayLauncher is made: the rest of jupyter-edt needs no Ray.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from .accounts import current_account, hand_over
from .base import Launcher, ProcessHandle, ProcessSpec
from .local import LocalLauncher, LocalProcess
from .mirror import Chunk, Mirror, apply, pack

log = logging.getLogger(__name__)

#: What a driver reads to start its workers through a RayLauncher (`Launcher.driver_env`).
LAUNCHER_ENV = "EDT_LAUNCHER"
ADDRESS_ENV = "EDT_RAY_ADDRESS"
NAMESPACE_ENV = "EDT_RAY_NAMESPACE"
SHARED_FS_ENV = "EDT_RAY_SHARED_FS"
#: The namespace keepers are named in, unless the launcher is given another.
NAMESPACE = "jupyter-edt"
#: How long one call to a keeper may take before it counts as unanswered (while a restarted
#: service finds its drivers' keepers again).
CALL_TIMEOUT_S = 10.0
#: How long starting processes may take (their keepers made, placed, and each process started).
START_TIMEOUT_S = 120.0
#: How often a handle asks its keeper whether the process has ended.
ASK_EVERY_S = 0.05
#: How long a keeper may stay unreachable before its process counts as lost (past the time
#: Ray takes to declare a silent node dead, when calls fail with ActorDiedError instead).
UNREACHABLE_S = 60.0
#: How long a keeper may be silent before Ray's node table is asked whether its node died.
NODE_CHECK_AFTER_S = 0.5
#: How old a reading of Ray's node table may be.
NODE_TABLE_MAX_AGE_S = 1.0
#: How long no process is placed on a node whose processes vanished (unless Ray's node table
#: drops it sooner): past Ray's default health checks (~15 s), which take a dead node out.
NODE_RETRY_S = 30.0
#: The exit code of a process whose keeper is gone (its node died): as if SIGKILLed.
LOST = -signal.SIGKILL


def keeper_name(spec: ProcessSpec) -> str:
    return f"{spec.job_id}/{spec.name}"


class Keeper:
    """The actor that keeps one process (made a Ray actor class by `RayLauncher`). Given its
    job directory `packed`, it runs the process in a copy of it on this node (`Mirror`), and
    each `poll` returns what the process wrote there since the last."""

    def __init__(self) -> None:
        # Ray points this actor at the GPU it counted for it, which need not be the one the
        # allocator chose: a process's devices come from its spec and its environment only.
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        self._launcher = LocalLauncher(own_session=True, die_with_parent=True)
        self._process: LocalProcess | None = None
        self._mirror: Mirror | None = None

    def start(
        self, spec: ProcessSpec, job_dir: str | None = None, packed: bytes | None = None
    ) -> dict[str, Any]:
        from ..runtime.jobdir import process_start_time

        if job_dir is not None and packed is not None:
            root = Path(tempfile.mkdtemp(prefix=f"edt-{spec.job_id}-{spec.name}-"))
            self._mirror = Mirror(root, Path(job_dir))
            self._mirror.unpack(packed)
            if spec.account is not None:
                hand_over(root, spec.account)
            spec = self._mirror.relocate(spec)
        self._process = self._launcher.start_sync(spec)
        pid = self._process.pid
        return {"pid": pid, "started": process_start_time(pid), "node": _this_node()}

    def poll(self) -> tuple[int | None, list[Chunk]]:
        """The process's exit code (None while it runs), and what it wrote since the last
        poll (after its end: everything it wrote)."""
        assert self._process is not None
        code = self._process.returncode
        return code, [] if self._mirror is None else self._mirror.collect()

    def identity(self) -> dict[str, Any] | None:
        """Which process it keeps: pid, start time (with the pid, one process) and node; None
        before it has started one."""
        from ..runtime.jobdir import process_start_time

        if self._process is None:
            return None
        pid = self._process.pid
        return {"pid": pid, "started": process_start_time(pid), "node": _this_node()}

    def send_signal(self, sig: int) -> None:
        assert self._process is not None
        self._process.send_signal(sig)

    def finish(self) -> None:
        """Kill what is left of the process's group, then end this actor (its GPUs and name
        are free again)."""
        import ray

        if self._process is not None:
            self._process.send_signal(signal.SIGKILL)
        if self._mirror is not None:
            self._mirror.remove()
        ray.actor.exit_actor()


def _ended_on_purpose(err: Exception) -> bool:
    """Whether Ray says an actor died because it was told to (`ray.kill`, `exit_actor`)."""
    said = str(err)
    return any(why in said for why in ("ray.kill", "exit_actor", "intentionally", "intended"))


def _this_node() -> str:
    import ray

    return ray.get_runtime_context().get_node_id()


class RayProcess(ProcessHandle):
    """A process kept by a keeper actor. Its exit code is asked of the keeper (at most every
    `ASK_EVERY_S`: a controller polls its workers every few milliseconds) and remembered; once
    it is known, the keeper kills what is left of the process's group and ends, giving its
    GPUs back to Ray.

    Nothing here waits for a keeper: a question is sent, and its answer read when it has come
    (a keeper on a dead node may never answer, and a controller must not stall on it). The
    process is lost (`LOST`, `vanished`) when its keeper dies, when Ray's node table shows its
    node dead while it is silent, when it stays silent past `UNREACHABLE_S`, or when the caller
    `abandon`s it sooner (its peers' group failed on it)."""

    def __init__(
        self,
        spec: ProcessSpec,
        keeper: Any,
        pid: int,
        node: str,
        code: int | None = None,
        launcher: RayLauncher | None = None,
    ) -> None:
        self.spec = spec
        self.pid = pid  # -1: it never started (`code` is then its end)
        self.node = node
        self.vanished = code == LOST
        self._keeper = keeper
        self._launcher = launcher
        self._code: int | None = code
        self._checked = float("-inf")  # when the keeper's answers were last looked at
        self._pending: Any = None  # the poll under way
        self._unanswered_since: float | None = None
        self._lock = threading.Lock()  # a controller's threads both read the exit code

    @property
    def returncode(self) -> int | None:
        """Checked at most every `ASK_EVERY_S` (callers poll every few milliseconds, and each
        look at Ray costs the cores the job's processes need); between checks, what is known."""
        with self._lock:
            now = time.monotonic()
            if self._code is not None or now - self._checked < ASK_EVERY_S:
                return self._code
            self._checked = now
            self._hear()
            if self._code is None and self._pending is None:
                if self._unanswered_since is None:
                    self._unanswered_since = now
                self._pending = self._keeper.poll.remote()
            return self._code

    @property
    def silent_s(self) -> float:
        since = self._unanswered_since
        return 0.0 if since is None or self._code is not None else time.monotonic() - since

    def abandon(self) -> None:
        with self._lock:
            if self._code is None:
                self._lose(f"silent for {self.silent_s:.1f} s after its peers' group failed")

    def send_signal(self, sig: int) -> None:
        """Sent, not awaited (calls to one actor arrive in order: before the next poll)."""
        if self._code is None:
            with contextlib.suppress(Exception):
                self._keeper.send_signal.remote(sig)

    def _hear(self) -> None:
        """Read the answer to the poll under way, if it has come; lose the process if its
        keeper is gone."""
        import ray
        from ray.exceptions import ActorUnavailableError, RayActorError

        if self._pending is not None and ray.wait([self._pending], timeout=0)[0]:
            answer, self._pending = self._pending, None
            try:
                code, chunks = ray.get(answer)
            except ActorUnavailableError:
                pass  # not reached this time (a busy or a dead node): asked again
            except RayActorError as err:  # ActorDiedError: its process, or its node, died
                # a keeper ended on purpose (killed, or finished through another handle of
                # the same process) leaves its node usable; any other death is its node's,
                # which Ray's node table may not show yet
                node_lost = not _ended_on_purpose(err) or (
                    self._launcher is not None and self._launcher.node_dead(self.node, fresh=True)
                )
                self._lose(f"its keeper died: {type(err).__name__}", node_lost=node_lost)
                return
            else:
                self._unanswered_since = None
                self._copy_back(chunks)
                if code is not None:
                    self._code = code
                    self._finish()
                return
        silent = self.silent_s
        if silent > UNREACHABLE_S:
            self._lose(f"its keeper did not answer for {silent:.0f} s")
        elif (
            silent > NODE_CHECK_AFTER_S
            and self._launcher is not None
            and self._launcher.node_dead(self.node)
        ):
            self._lose(f"Ray's node table shows its node {self.node[:8]} dead")

    def _copy_back(self, chunks: list[Chunk]) -> None:
        if chunks and self.spec.job_dir is not None:
            try:
                apply(self.spec.job_dir, chunks)
            except (OSError, ValueError) as err:
                log.warning("What %s wrote on its node was not copied back: %s", self.pid, err)

    def _lose(self, why: str, *, node_lost: bool = True) -> None:
        """The process counts as killed with its node (`node_lost`: nothing is placed there
        for a while); its keeper is killed (if it still runs, its process dies with it), so
        nothing the job no longer counts goes on."""
        log.warning("%s on Ray node %s is lost: %s", keeper_name(self.spec), self.node[:8], why)
        self._code = LOST
        self.vanished = True
        self._pending = None
        if node_lost and self._launcher is not None:
            self._launcher.lost_on(self.node)
        if self._keeper is not None:
            import ray

            with contextlib.suppress(Exception):
                ray.kill(self._keeper)

    def _finish(self) -> None:
        """The keeper kills the group's leftovers and ends; not waited for."""
        if self._keeper is not None:
            with contextlib.suppress(Exception):
                self._keeper.finish.remote()


class RayLauncher(Launcher):
    """Starts each process on the node its spec names (`ProcessSpec.node`, a Ray node id; None:
    the node this launcher runs on), holding `len(spec.devices)` of Ray's GPUs there.

    `address`: the cluster (as `ray.init` takes it: ``"auto"``, ``host:port``, ``ray://...``);
    connects on first use, unless this process is already connected. `detached`: the keepers
    outlive this process (the service's drivers); else they end with it (a driver's workers).
    """

    def __init__(
        self,
        address: str | None = "auto",
        namespace: str = NAMESPACE,
        shared_fs: bool = False,
        detached: bool = True,
    ) -> None:
        self.address = address
        self.namespace = namespace
        self.shared_fs = shared_fs
        self.detached = detached
        self._keeper_class: Any = None
        self._lost: dict[str, float] = {}  # node -> when a process there vanished
        self._table_read = float("-inf")
        self._dead: set[str] = set()  # nodes Ray's node table shows dead, as last read

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
        return {
            LAUNCHER_ENV: "ray",
            ADDRESS_ENV: address,
            NAMESPACE_ENV: self.namespace,
            SHARED_FS_ENV: "1" if self.shared_fs else "0",
        }

    def reachable_host(self) -> str:
        import ray

        self.connect()
        return ray.util.get_node_ip_address()

    def node(self) -> str:
        """The Ray node this launcher runs on."""
        self.connect()
        return _this_node()

    def available(self, node: str | None) -> bool:
        """Not a node whose processes vanished less than `NODE_RETRY_S` ago, nor one Ray's
        node table shows dead."""
        if not node:
            return True
        lost = self._lost.get(node)
        if lost is not None and time.monotonic() - lost < NODE_RETRY_S:
            return False
        return not self.node_dead(node)

    def lost_on(self, node: str) -> None:
        """A process on `node` vanished: nothing more is placed there for a while."""
        if node:
            self._lost[node] = time.monotonic()

    def node_dead(self, node: str, *, fresh: bool = False) -> bool:
        """Whether Ray's node table (read at most every `NODE_TABLE_MAX_AGE_S`, unless
        `fresh`) shows `node` dead. Ray takes a crashed node out after its health checks fail
        (~15 s by default; `health_check_period_ms` and `health_check_failure_threshold` on the
        head)."""
        import ray

        now = time.monotonic()
        if fresh or now - self._table_read >= NODE_TABLE_MAX_AGE_S:
            self._table_read = now
            with contextlib.suppress(Exception):  # the GCS unreachable: keep the last reading
                self._dead = {n["NodeID"] for n in ray.nodes() if not n.get("Alive")}
        return node in self._dead

    def start_sync(self, spec: ProcessSpec) -> RayProcess:
        return self.start_all_sync([spec])[0]

    def start_all_sync(self, specs: Sequence[ProcessSpec]) -> list[ProcessHandle]:
        """Every keeper is asked for before any answer is awaited: Ray makes their actors (a
        worker process each, about a second) side by side, so n processes start in about the
        time of one."""
        import ray

        self.connect()
        begun = [self._begin(spec) for spec in specs]
        deadline = time.monotonic() + START_TIMEOUT_S
        started: list[ProcessHandle] = []
        try:
            for spec, keeper, answer in begun:
                started.append(self._end(spec, keeper, answer, deadline))
        except BaseException:
            for _, keeper, _ in begun[len(started) :]:
                if keeper is None:
                    continue
                with contextlib.suppress(Exception):
                    ray.kill(keeper)
            self._stop_all_sync(started)
            raise
        return started

    def _begin(self, spec: ProcessSpec) -> tuple[ProcessSpec, Any, Any]:
        """Make the process's keeper on its node and ask it to start the process; the answer
        is awaited by `_end`. Nothing is tried on a node that is not `available` (no keeper:
        the process vanishes at once)."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = _this_node()
        node = spec.node or here
        if not self.available(node):
            return replace(spec, node=node), None, None
        gpus = spec.gpus if spec.gpus is not None else len(spec.devices or ())
        if spec.account is None and os.geteuid() != 0:
            # a keeper may run as root: the process runs as whoever asked for it
            spec = replace(spec, account=current_account())
        spec = replace(spec, node=node)
        copy: tuple[str | None, Any] = (None, None)
        if spec.job_dir is not None and node != here and not self.shared_fs:
            copy = (str(spec.job_dir), ray.put(pack(spec.job_dir)))
        options = self._keeper_class.options(
            name=keeper_name(spec),
            namespace=self.namespace,
            lifetime="detached" if self.detached else None,
            num_cpus=0,
            num_gpus=gpus,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
            max_restarts=0,
        )
        try:
            keeper = options.remote()
        except ValueError as err:  # the name is taken: by a keeper of a process now gone?
            if "already taken" not in str(err):
                raise
            self._free_name(keeper_name(spec))
            keeper = options.remote()
        return spec, keeper, keeper.start.remote(spec, *copy)

    def _free_name(self, name: str) -> None:
        """Free the name of an earlier keeper that cannot be reached: a job resumed after its
        driver's node crashed asks for its driver's name again before Ray has declared that
        node dead (a busy cluster takes tens of seconds), and its detached keeper still holds
        the name. A keeper that answers keeps it: a second process of that name is refused."""
        import ray
        from ray.exceptions import ActorUnavailableError, GetTimeoutError, RayActorError

        try:
            old = ray.get_actor(name, namespace=self.namespace)
        except ValueError:  # gone meanwhile
            return
        try:
            ray.get(old.identity.remote(), timeout=CALL_TIMEOUT_S)
        except (RayActorError, ActorUnavailableError, GetTimeoutError):
            log.warning("%s: an earlier keeper of that name is unreachable; ending it", name)
            with contextlib.suppress(Exception):
                ray.kill(old, no_restart=True)
        else:
            raise ValueError(f"{name} is already kept by a running keeper") from None
        deadline = time.monotonic() + UNREACHABLE_S
        while time.monotonic() < deadline:
            try:
                ray.get_actor(name, namespace=self.namespace)
            except ValueError:
                return
            time.sleep(0.2)
        raise ValueError(f"{name}: the name of an unreachable keeper was not freed in time")

    def _end(self, spec: ProcessSpec, keeper: Any, answer: Any, deadline: float) -> RayProcess:
        import ray
        from ray.exceptions import ActorUnschedulableError, GetTimeoutError, RayActorError

        node = spec.node or ""
        if keeper is None:
            log.warning("%s not started: Ray node %s is gone", keeper_name(spec), node[:8])
            return RayProcess(spec, None, -1, node, code=LOST, launcher=self)
        try:
            started = ray.get(answer, timeout=max(0.0, deadline - time.monotonic()))
        except (ActorUnschedulableError, RayActorError, GetTimeoutError) as err:
            # its node is gone (the inventory has not caught up yet) or never made room: to
            # the caller, a process that vanished at once, as on a node that fails
            log.warning("%s could not start on Ray node %s: %s", keeper_name(spec), node, err)
            self.lost_on(node)
            with contextlib.suppress(Exception):
                ray.kill(keeper)
            return RayProcess(spec, None, -1, node, code=LOST, launcher=self)
        except BaseException:
            with contextlib.suppress(Exception):
                ray.kill(keeper)
            raise
        return RayProcess(spec, keeper, started["pid"], started["node"], launcher=self)

    def adopt(
        self, spec: ProcessSpec, pid: int, started: int, exit_code: Callable[[], int | None]
    ) -> RayProcess | None:
        """The process a previous service started, if its keeper still keeps that very one.

        A keeper that does not answer yet is asked again until `UNREACHABLE_S` (right after a
        restart, on a busy node, Ray takes seconds to reach an actor): taking a running job for
        lost would start a second driver beside the first."""
        import ray
        from ray.exceptions import ActorUnavailableError, GetTimeoutError, RayActorError

        self.connect()
        name = keeper_name(spec)
        try:
            keeper = ray.get_actor(name, namespace=self.namespace)
        except ValueError:  # no such keeper: its process ended, or its node is gone
            return None
        deadline = time.monotonic() + UNREACHABLE_S
        while True:
            try:
                kept = ray.get(keeper.identity.remote(), timeout=CALL_TIMEOUT_S)
                break
            except (GetTimeoutError, ActorUnavailableError) as err:
                if time.monotonic() < deadline:
                    continue
                log.warning(
                    "%s did not answer for %.0f s; taken for lost: %s", name, UNREACHABLE_S, err
                )
                with contextlib.suppress(Exception):  # never two drivers of one job
                    ray.kill(keeper)
                return None
            except RayActorError:  # it died, or its node did
                return None
        if kept is None or (kept["pid"], kept["started"]) != (pid, started):
            log.warning("%s keeps another process than %s's: %s", name, pid, kept)
            with contextlib.suppress(Exception):  # it keeps another, or an ended, process
                keeper.finish.remote()
            return None
        return RayProcess(spec, keeper, pid, kept["node"], launcher=self)
