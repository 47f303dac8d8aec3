"""The elastic process group: membership generations and an order-fixed reduction.

One TCPStore, hosted by the job's controller, carries the control state (see ``control.py``).
Generation ``g`` of the group is a fresh torch.distributed group whose rendezvous lives under the
prefix ``g<g>/`` of that store, so re-forming costs a few milliseconds and no process restarts.

Gradients are summed by an exact, order-fixed reduce-scatter and all-gather (``exchange.py``):
every element is added in micro-batch index order, as on one device, so the sum is
bit-identical whatever the worker count; transfers start from gradient hooks during backward.
Per-micro-batch scalars (loss, metrics, BatchNorm buffers) are all-gathered with each rank's
control values (the generation it has seen, a fingerprint of its optimizer hyperparameters, ...)
and folded in the same order on every rank.

Devices and backends (decided per job: every worker of a job is of one kind):

- A worker whose ``CUDA_VISIBLE_DEVICES`` names GPUs trains on ``cuda:<LOCAL_RANK>`` (its job's
  GPUs on its node are visible in local-rank order, as under torchrun); one given a virtual
  device (the variable empty or unset) trains on the CPU. A plain process uses CUDA when it is
  available unless ``Trainer(device=...)`` says otherwise. See :func:`select_device`.
- CPU workers form a ``gloo`` group, exactly as before. CUDA workers form one group with two
  backends, ``cpu:gloo,cuda:nccl`` (:func:`select_backend`): a collective on a CUDA tensor goes
  over NCCL, one on a CPU tensor over gloo. So the gradient exchange and the device-resident part of
  the training state travel GPU to GPU over NCCL, while the small control values (the cursor
  agreement) and the pickled skeleton of the state stay on gloo, where a dead peer surfaces as
  an error within the group's timeout. ``EDT_BACKEND`` overrides the choice (``gloo`` on a CUDA
  worker stages CUDA tensors through host memory; handy when NCCL misbehaves).
- NCCL work is asynchronous on the host, so after a step's reduction a CUDA worker waits for it
  in :meth:`ElasticGroup.settle`: it polls a CUDA event, gives up after the group's timeout, and
  meanwhile watches its peers' heartbeats (``hb/<worker>`` counters that a thread of each CUDA
  worker bumps every ``HEARTBEAT_S`` through its own store connection). A peer silent for
  ``STALE_S`` is dead: the step fails then rather than at the timeout (a dead peer never makes
  an NCCL kernel fail on its own; on one machine recovery takes about STALE_S plus a re-form).
  The NCCL communicator is then aborted, not destroyed (destroying waits for peers that will
  never come), and the next generation builds a new one under a new store prefix.
- The worker owns this failure handling, so it sets ``TORCH_NCCL_ASYNC_ERROR_HANDLING=0``, as
  torch asks of ``_abort_process_group`` users: 1 and 3 (the default) would kill a survivor
  whose peer died, and 2 would abort the communicator behind its back, after which the failed
  step's kernels end and the event reports "done" over garbage. With 0 a failed NCCL step never
  completes by itself, so "done" means "valid". Not covered: a peer dying inside the creation of
  a generation's NCCL communicator (a blocking call of some 100 ms during a re-form).
"""

from __future__ import annotations

import json
import os
import pickle
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ParamSpec, Protocol, TypeVar

import torch
import torch.distributed as dist

from . import partition as part
from . import store_keys as keys
from .exchange import Comm, Op, OrderedExchange
from .state import recv_state, send_state

__all__ = [
    "ElasticGroup",
    "Group",
    "GroupError",
    "JobContext",
    "LeaveJob",
    "SoloGroup",
    "names_gpu",
    "select_backend",
    "select_device",
]

T = TypeVar("T")
P = ParamSpec("P")

HEARTBEAT_S = 0.25  # how often a CUDA worker bumps its heartbeat counter
STALE_S = 2.0  # a peer whose counter has not moved for this long is dead


def names_gpu(visible: str | None) -> bool:
    """Whether a ``CUDA_VISIBLE_DEVICES`` value names at least one GPU.

    Unset, empty, or starting with a negative index ("-1" hides every GPU) names none.
    """
    if visible is None:
        return False
    first = visible.split(",")[0].strip()
    return bool(first) and not first.startswith("-")


def select_device(
    requested: str | torch.device = "auto",
    *,
    in_job: bool,
    visible: str | None,
    cuda_available: bool,
    local_rank: int = 0,
) -> str:
    """The device to train on, from the request, the environment and CUDA's availability.

    In a job worker the allocation decides: ``cuda:<local_rank>`` when ``CUDA_VISIBLE_DEVICES``
    names GPUs (the job's GPUs on the node, in local-rank order, as torchrun's workers see
    them), else ``cpu``; ``requested="cpu"`` forces the CPU, any
    other request follows the allocation. In a plain process ``"auto"`` means ``cuda`` when
    available, else ``cpu``, and an explicit request is taken as it is.
    """
    req = str(requested)
    if req != "auto":
        try:
            dev = torch.device(req)
        except RuntimeError as e:
            raise ValueError(f"device must be 'auto', 'cpu' or 'cuda[:n]', got {req!r}") from e
        if dev.type not in ("cpu", "cuda"):
            raise ValueError(f"device must be 'auto', 'cpu' or 'cuda[:n]', got {req!r}")
        if dev.type == "cpu":
            return "cpu"
        if not in_job:
            if not cuda_available:
                raise ValueError(f"device={req!r} but CUDA is not available in this process")
            return str(dev)
    if in_job:
        if not names_gpu(visible):
            return "cpu"
        if not cuda_available:
            raise RuntimeError(
                f"CUDA_VISIBLE_DEVICES={visible!r} gives this worker a GPU, but "
                "torch.cuda.is_available() is False (a CPU-only torch, or a driver problem)"
            )
        return f"cuda:{local_rank}"
    return "cuda" if cuda_available else "cpu"


def select_backend(device_type: str, override: str | None = None) -> str:
    """The torch.distributed backend of a job whose workers train on ``device_type``.

    ``gloo`` for CPU workers; ``cpu:gloo,cuda:nccl`` for CUDA workers (NCCL carries CUDA
    tensors, gloo the CPU control values). ``override`` (``EDT_BACKEND``): ``gloo`` forces gloo
    for everything, ``nccl`` means the CUDA default, anything else is used as it is.
    """
    if not override:
        return "cpu:gloo,cuda:nccl" if device_type == "cuda" else "gloo"
    if override == "nccl":
        if device_type != "cuda":
            raise ValueError("EDT_BACKEND=nccl needs a CUDA device; this worker has none")
        return "cpu:gloo,cuda:nccl"
    return override


class GroupError(RuntimeError):
    """A collective failed: a peer died or timed out. The current step is dropped."""


class LeaveJob(Exception):
    """This worker is not in the new generation: it exits cleanly."""


@dataclass(frozen=True)
class JobContext:
    """How a worker process finds its job; read from the environment its controller gave it:
    ``EDT_*`` variables, and ``RESULT_DIR``, the job contract's name for the result directory."""

    store_host: str
    store_port: int
    worker_id: str
    result_dir: str | None
    log_dir: str | None
    timeout_s: float = 30.0
    join_timeout_s: float = 300.0
    backend: str | None = None  # None: chosen from the device (see select_backend)
    run: str | None = None  # this run of the job's workers (one driver's), in their events

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> JobContext | None:
        """The context of a job worker, or None in a plain process."""
        env = dict(os.environ) if env is None else env
        if "EDT_STORE" not in env:
            return None
        host, _, port = env["EDT_STORE"].rpartition(":")
        return cls(
            store_host=host,
            store_port=int(port),
            worker_id=env["EDT_WORKER_ID"],
            result_dir=env.get("RESULT_DIR"),
            log_dir=env.get("EDT_LOG_DIR"),
            timeout_s=float(env.get("EDT_TIMEOUT_S", "30")),
            join_timeout_s=float(env.get("EDT_JOIN_TIMEOUT_S", "300")),
            backend=env.get("EDT_BACKEND") or None,
            run=env.get("EDT_RUN") or None,
        )


class Group(Comm, Protocol):
    """What the trainer and the membership loop use of a group, whichever its kind (and what
    the gradient exchange uses: ``exchange.Comm``, with ``rank`` and ``world_size``).

    Two kinds: :class:`SoloGroup` (one plain process: a generation of one member that never
    changes, no controller) and :class:`ElasticGroup` (a job's worker, in generations ordered
    by the controller). Code written against this protocol needs no test of the kind; the one
    difference that shows is ``elastic``: whether a controller orders this worker about (a
    solo process starts by itself, from its own checkpoints).
    """

    @property
    def generation(self) -> int: ...

    @property
    def members(self) -> tuple[str, ...]: ...

    @property
    def worker_id(self) -> str: ...

    @property
    def elastic(self) -> bool: ...

    @property
    def backend(self) -> str | None: ...

    # control plane
    def control(self) -> dict[str, int]: ...

    def control_aside(self) -> dict[str, int]: ...

    def signal_ready(self) -> None: ...

    def next_membership(self, after: int) -> tuple[int, tuple[str, ...]]: ...

    def members_of(self, generation: int) -> tuple[str, ...]: ...

    def hold(self, step: int) -> None: ...

    def report_failure(self) -> None: ...

    def report_formed(self, info: dict[str, object]) -> None: ...

    # data plane
    def form(self, generation: int, members: tuple[str, ...]) -> None: ...

    def destroy(self) -> None: ...

    def close(self) -> None: ...

    def reduce(
        self,
        num_micro_batches: int,
        grads: OrderedExchange | None,
        aux_parts: list[torch.Tensor],
        aux_size: int,
        n_sum: int,
    ) -> torch.Tensor: ...

    def all_gather_object(self, obj: T) -> list[T]: ...

    def all_gather_ints(self, values: list[int]) -> list[list[int]]: ...

    def send_state(self, state: object, dst: int) -> int: ...

    def recv_state(self, src: int) -> Any: ...


class _Reducer:
    """The order-fixed reduction shared by the solo and the elastic group."""

    rank = 0
    world_size = 1
    tagged = True  # see exchange.Comm

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)

    def reduce(
        self,
        num_micro_batches: int,
        grads: OrderedExchange | None,
        aux_parts: list[torch.Tensor],
        aux_size: int,
        n_sum: int,
    ) -> torch.Tensor:
        """Sum a step's gradients (``grads``, see ``exchange.py``) and fold everyone's
        per-micro-batch ``aux_parts`` in micro-batch order; returns the folded aux.

        ``aux_parts`` are float64 vectors of ``aux_size`` entries, one per micro-batch this rank
        computed: their first ``n_sum`` entries are summed. The rest of the first vector are
        this rank's control values (the generation seen, ...), which take the maximum over
        every rank; a rank without a micro-batch this step passes one vector for them alone.
        Every rank returns the same values.
        """
        if grads is not None:
            grads.flush()
        dealt = part.deal(num_micro_batches, self.world_size)
        rows = max(len(js) for js in dealt)
        mine = torch.zeros(rows, aux_size, dtype=torch.float64, device=self.device)
        for i, p in enumerate(aux_parts):
            mine[i] = p
        every, gathered = self._gather(mine)
        if grads is not None:
            grads.complete()
        self.wait([gathered] if gathered is not None else [])
        every = every.view(self.world_size, rows, aux_size).to(self.device)
        acc = every[0, 0].clone()
        for j in range(1, num_micro_batches):  # micro-batch j is row j // W of rank j % W
            acc[:n_sum] += every[j % self.world_size, j // self.world_size, :n_sum]
        if aux_size > n_sum and self.world_size > 1:
            acc[n_sum:] = every[:, 0, n_sum:].amax(0)
        return acc

    def all_gather_object(self, obj: T) -> list[T]:
        """Every rank's picklable ``obj``, by rank (rare, small exchanges: hyperparameters)."""
        return [obj]

    def _gather(self, t: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """Every rank's ``t``, stacked, and the work to wait for before reading it."""
        return t, None

    def post(self, ops: list[Op]) -> list[Any]:
        raise NotImplementedError

    def wait(self, works: list[Any]) -> None:
        for w in works:
            w.wait()

    def _broadcast(self, t: torch.Tensor, src: int) -> None:
        raise NotImplementedError

    def _staged(self, t: torch.Tensor) -> bool:
        return False


class SoloGroup(_Reducer):
    """One plain process: no collectives, no controller. Its one generation, of itself, is
    formed from the start and never changes, so the membership calls are trivial."""

    generation = 1
    members = ("solo",)
    worker_id = "solo"
    elastic = False
    backend = None

    def control(self) -> dict[str, int]:
        return {"gen": 1, "hold": -1, "ckpt": 0}

    def control_aside(self) -> dict[str, int]:
        return self.control()

    def signal_ready(self) -> None:
        pass

    def next_membership(self, after: int) -> tuple[int, tuple[str, ...]]:
        if after >= self.generation:
            raise RuntimeError("a solo process has one generation only")
        return self.generation, self.members

    def members_of(self, generation: int) -> tuple[str, ...]:
        return self.members

    def hold(self, step: int) -> None:
        pass

    def report_failure(self) -> None:
        pass

    def report_formed(self, info: dict[str, object]) -> None:
        pass

    def form(self, generation: int, members: tuple[str, ...]) -> None:
        pass

    def destroy(self) -> None:
        pass

    def close(self) -> None:
        pass

    def all_gather_ints(self, values: list[int]) -> list[list[int]]:
        return [list(values)]

    def send_state(self, state: object, dst: int) -> int:
        raise RuntimeError("a solo process has no peer to send its state to")

    def recv_state(self, src: int) -> Any:
        raise RuntimeError("a solo process has no peer to receive a state from")


class ElasticGroup(_Reducer):
    """Membership of one worker in a job's elastic group."""

    elastic = True

    def __init__(self, ctx: JobContext, device: torch.device | str = "cpu") -> None:
        super().__init__(device)
        self.ctx = ctx
        self.worker_id = ctx.worker_id
        self.timeout = timedelta(seconds=ctx.timeout_s)
        self.backend = select_backend(self.device.type, ctx.backend)
        # NCCL carries this worker's CUDA tensors; otherwise they are staged through the host
        self.cuda_comm = self.device.type == "cuda" and "nccl" in self.backend
        self.tagged = not self.cuda_comm  # NCCL matches transfers in the order they are posted
        self.store = self._connect()
        self.generation = 0
        self.members: tuple[str, ...] = ()
        self.rank = -1
        self.world_size = 0
        self._beats: dict[str, tuple[int, float]] = {}
        self._stop = threading.Event()
        self._heart: threading.Thread | None = None
        self._aside: dist.TCPStore | None = None  # control_aside's connection
        if self.cuda_comm:
            # failures are handled here (settle, destroy); see the module's docstring
            os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "0"
            self._heart = threading.Thread(target=self._beat, name="edt-heartbeat", daemon=True)
            self._heart.start()

    def _connect(self) -> dist.TCPStore:
        return dist.TCPStore(
            self.ctx.store_host,
            self.ctx.store_port,
            is_master=False,
            timeout=timedelta(seconds=self.ctx.join_timeout_s),
            wait_for_workers=False,
        )

    def _beat(self) -> None:
        """Bump ``hb/<worker>`` every HEARTBEAT_S on a connection of its own (the main thread
        may block on the store, e.g. in :meth:`hold`)."""
        try:
            store = self._connect()
            key = keys.heartbeat_key(self.worker_id)
            store.add(key, 1)
            while not self._stop.wait(HEARTBEAT_S):
                store.add(key, 1)
        except (RuntimeError, OSError):  # the controller's store is gone: the job is over
            return

    # -- control plane -------------------------------------------------------------------------
    def control(self) -> dict[str, int]:
        """The controller's current orders: generation, hold step, checkpoint requests."""
        return json.loads(self.store.get(keys.CTL))

    def control_aside(self) -> dict[str, int]:
        """:meth:`control` on a connection of its own, for one other thread (the main thread
        may be using its own at the same time, as :meth:`_beat` explains)."""
        if self._aside is None:
            self._aside = self._connect()
        return json.loads(self._aside.get(keys.CTL))

    def signal_ready(self) -> None:
        self.store.set(keys.ready_key(self.worker_id), str(os.getpid()))

    def report_failure(self) -> None:
        self.store.add(keys.failed_key(self.generation), 1)

    def report_formed(self, info: dict[str, object]) -> None:
        self.store.set(keys.formed_key(self.generation), json.dumps(info))

    def hold(self, step: int) -> None:
        """Wait at a step boundary until the controller releases ``step``."""
        self.store.set(keys.held_key(step, self.worker_id), "1")
        self.store.wait([keys.release_key(step)], timedelta(seconds=self.ctx.join_timeout_s))

    def next_membership(self, after: int) -> tuple[int, tuple[str, ...]]:
        """Wait for a generation newer than ``after`` that includes this worker.

        Raises LeaveJob when this worker was a member and the newer generation leaves it out.
        """
        deadline = time.monotonic() + self.ctx.join_timeout_s
        g = after
        while True:
            current = self.control()["gen"]
            if current > g:
                g = current
                members = tuple(json.loads(self.store.get(keys.members_key(g))))
                if self.worker_id in members:
                    return g, members
                if self.generation > 0:
                    raise LeaveJob
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no generation after {after} includes {self.worker_id}")
            if not self.store.check([keys.members_key(g + 1)]):
                time.sleep(0.005)  # bounded poll of the store; the deadline above ends it

    # -- data plane ----------------------------------------------------------------------------
    def form(self, generation: int, members: tuple[str, ...]) -> None:
        """Leave the old torch.distributed group and join generation ``generation``."""
        self.destroy()
        self.generation, self.members = generation, members
        self.rank, self.world_size = members.index(self.worker_id), len(members)
        self.guard(
            dist.init_process_group,
            self.backend,
            store=dist.PrefixStore(f"g{generation}/", self.store),
            rank=self.rank,
            world_size=self.world_size,
            timeout=self.timeout,
        )
        if self.cuda_comm:
            self._start_nccl()

    def _start_nccl(self) -> None:
        """Create the generation's NCCL communicator now, inside the pause, with one
        all-reduce of every rank (batched point-to-point calls may then involve only some)."""
        try:  # NCCL's watchdog only reports; keep its timeout longer than settle()'s
            nccl = dist.group.WORLD._get_backend(torch.device("cuda"))  # type: ignore[union-attr]
            nccl._set_default_timeout(timedelta(seconds=2 * self.ctx.timeout_s + 10))
        except (AttributeError, RuntimeError):
            pass
        probe = torch.ones(1, device=self.device)
        self.guard(dist.all_reduce, probe)
        self.settle()

    def members_of(self, generation: int) -> tuple[str, ...]:
        """The target worker set of ``generation``, in rank order."""
        return tuple(json.loads(self.store.get(keys.members_key(generation))))

    def destroy(self) -> None:
        """Close the current group's connections, which also wakes peers blocked on them.

        An NCCL communicator is aborted: that never waits for peers (a dead one would make
        destroying it hang) and it ends any kernel still waiting for one.
        """
        if not dist.is_initialized():
            return
        abort = getattr(dist.distributed_c10d, "_abort_process_group", None)
        if self.cuda_comm and abort is not None:
            try:
                abort()
                return
            except (RuntimeError, ValueError):
                if not dist.is_initialized():
                    return
        dist.destroy_process_group()

    def close(self) -> None:
        """Leave the group for good and stop the heartbeat."""
        self._stop.set()
        self.destroy()

    def all_gather_object(self, obj: T) -> list[T]:
        """Every rank's picklable ``obj``, by rank, over gloo (host memory)."""
        blob = pickle.dumps(obj)
        sizes = [n for (n,) in self.all_gather_ints([len(blob)])]
        mine = torch.zeros(max(sizes), dtype=torch.uint8)
        mine[: len(blob)] = torch.frombuffer(bytearray(blob), dtype=torch.uint8)
        out = [torch.empty_like(mine) for _ in range(self.world_size)]
        self.guard(dist.all_gather, out, mine)
        return [pickle.loads(t[:n].numpy().tobytes()) for t, n in zip(out, sizes, strict=True)]

    def all_gather_ints(self, values: list[int]) -> list[list[int]]:
        """Every rank's small integer vector (used to agree on cursors when re-forming)."""
        mine = torch.tensor(values, dtype=torch.int64)
        out = [torch.empty_like(mine) for _ in range(self.world_size)]
        self.guard(dist.all_gather, out, mine)
        return [t.tolist() for t in out]

    def guard(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Call a collective; any failure (dead peer, timeout) becomes a GroupError."""
        try:
            return fn(*args, **kwargs)
        except GroupError:
            raise
        except (RuntimeError, ValueError) as e:  # DistError subclasses RuntimeError
            raise GroupError(str(e)) from e

    def reduce(
        self,
        num_micro_batches: int,
        grads: OrderedExchange | None,
        aux_parts: list[torch.Tensor],
        aux_size: int,
        n_sum: int,
    ) -> torch.Tensor:
        """As the solo group's, then wait for the device (see :meth:`settle`)."""
        total = super().reduce(num_micro_batches, grads, aux_parts, aux_size, n_sum)
        self.settle()
        return total

    def send_state(self, state: object, dst: int) -> int:
        """Send the training state to rank ``dst``: CUDA tensors over NCCL when the group has
        it, everything else (and everything on a gloo group) from host memory over gloo."""
        if self.cuda_comm:
            return self.guard(send_state, state, dst, on_device=True, settle=self.settle)
        return self.guard(send_state, state, dst)

    def recv_state(self, src: int) -> Any:
        """Receive a state sent by :meth:`send_state`; device tensors land on this device."""
        if self.cuda_comm:
            return self.guard(recv_state, src, device=self.device, settle=self.settle)
        return self.guard(recv_state, src)

    def settle(self) -> None:
        """Wait, boundedly, until the NCCL work enqueued so far has finished.

        Raises GroupError after the group's timeout, or as soon as a peer's heartbeat has been
        still for STALE_S. A no-op on a gloo group, whose calls return only once done.
        """
        if not self.cuda_comm:
            return
        done = torch.cuda.Event()
        done.record()
        now = time.monotonic()
        deadline, next_check, delay = now + self.ctx.timeout_s, now + HEARTBEAT_S, 2e-5
        while not done.query():
            now = time.monotonic()
            if now > deadline:
                raise GroupError(
                    f"NCCL work of generation {self.generation} did not finish within "
                    f"{self.ctx.timeout_s:g} s"
                )
            if now >= next_check:
                self._check_peers(now)
                next_check = now + HEARTBEAT_S
            time.sleep(delay)  # a bounded poll of the event; the deadline above ends it
            delay = min(2 * delay, 1e-3)

    def _check_peers(self, now: float) -> None:
        for w in self.members:
            if w == self.worker_id:
                continue
            beat = int(self.store.add(keys.heartbeat_key(w), 0))
            seen = self._beats.get(w)
            if seen is None or seen[0] != beat:
                self._beats[w] = (beat, now)
            elif now - seen[1] > STALE_S:
                raise GroupError(f"worker {w} stopped: no heartbeat for {now - seen[1]:.1f} s")

    def _staged(self, t: torch.Tensor) -> bool:
        """A CUDA tensor on a group without NCCL travels through a host copy."""
        return t.device.type != "cpu" and not self.cuda_comm

    def post(self, ops: list[Op]) -> list[Any]:
        """Start point-to-point transfers; returns their works for :meth:`wait`.

        On NCCL one batch (so that NCCL uses the generation's communicator, not one per pair
        of ranks, and the sends and receives of the batch progress together); on gloo tagged
        ``isend``/``irecv`` calls, which gloo matches by tag whatever the order of arrival.
        """
        if not ops:
            return []
        if self.cuda_comm:
            p2p = [
                dist.P2POp(dist.isend if kind == "send" else dist.irecv, t, peer)
                for kind, t, peer, _ in ops
            ]
            return self.guard(dist.batch_isend_irecv, p2p)
        return [
            self.guard(dist.isend if kind == "send" else dist.irecv, t, peer, tag=tag)
            for kind, t, peer, tag in ops
        ]

    def wait(self, works: list[Any]) -> None:
        """Wait for works of :meth:`post` or :meth:`_gather` (on NCCL: order the current
        stream after them; :meth:`settle` waits for the device)."""
        for w in works:
            self.guard(w.wait)

    def _gather(self, t: torch.Tensor) -> tuple[torch.Tensor, Any]:
        if self.world_size == 1:  # a job on one GPU: no collective to call
            return t, None
        src = t.cpu() if self._staged(t) else t
        shape = (self.world_size * src.shape[0], *src.shape[1:])  # gloo wants a concatenation
        out = torch.empty(shape, dtype=src.dtype, device=src.device)
        work = self.guard(dist.all_gather_single, out, src, async_op=True)
        return out, work

    def _broadcast(self, t: torch.Tensor, src: int) -> None:
        if self._staged(t):
            host = t.cpu()
            self.guard(dist.broadcast, host, src)
            t.copy_(host)
        else:
            self.guard(dist.broadcast, t, src)
