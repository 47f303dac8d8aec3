"""The elastic process group: membership generations and an order-fixed reduction.

One TCPStore, hosted by the job's controller, carries the control state (see ``control.py``).
Generation ``g`` of the group is a fresh torch.distributed group whose rendezvous lives under the
prefix ``g<g>/`` of that store, so re-forming costs a few milliseconds and no process restarts.

The reduction is a chain instead of an all-reduce: rank 0 folds its micro-batches in index
order and passes the partial sum to rank 1, which adds its own micro-batches in index order, and
so on; the last active rank broadcasts the total. Because micro-batches are dealt in contiguous
blocks, the floating-point additions happen in exactly the order of a one-device run, so the sum
is bit-identical whatever the worker count. For two workers it moves the same bytes as a ring
all-reduce.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from . import control as keys

__all__ = ["ElasticGroup", "GroupError", "JobContext", "LeaveJob", "SoloGroup"]


class GroupError(RuntimeError):
    """A collective failed: a peer died or timed out. The current step is dropped."""


class LeaveJob(Exception):
    """This worker is not in the new generation: it exits cleanly."""


@dataclass(frozen=True)
class JobContext:
    """How a worker process finds its job; read from ``EDT_*`` environment variables."""

    store_host: str
    store_port: int
    worker_id: str
    result_dir: str | None
    log_dir: str | None
    timeout_s: float = 30.0
    join_timeout_s: float = 300.0
    backend: str = "gloo"

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
            result_dir=env.get("EDT_RESULT_DIR"),
            log_dir=env.get("EDT_LOG_DIR"),
            timeout_s=float(env.get("EDT_TIMEOUT_S", "30")),
            join_timeout_s=float(env.get("EDT_JOIN_TIMEOUT_S", "300")),
            backend=env.get("EDT_BACKEND", "gloo"),
        )


class _Reducer:
    """The chain reduction shared by the solo and the elastic group."""

    rank = 0
    world_size = 1

    def __init__(self) -> None:
        self._tmp: dict[tuple[int, torch.dtype], torch.Tensor] = {}

    def _buffer(self, like: torch.Tensor) -> torch.Tensor:
        key = (like.numel(), like.dtype)
        if key not in self._tmp:
            self._tmp = {key: torch.empty_like(like)}
        return self._tmp[key]

    def reduce(
        self,
        active: int,
        flat: torch.Tensor | None,
        extras: list[torch.Tensor],
        aux_parts: list[torch.Tensor],
        aux_size: int,
        n_sum: int,
    ) -> torch.Tensor:
        """Fold everyone's micro-batch results in micro-batch order; returns the folded aux.

        ``flat`` holds this rank's last (for rank 0: all, already folded) gradient contribution,
        ``extras`` this rank's earlier ones; on return ``flat`` holds the total on every rank.
        ``aux_parts`` are per-micro-batch float64 vectors: the first ``n_sum`` entries are
        summed, the rest take the maximum (control values such as the generation seen).
        """

        def fold(acc: torch.Tensor | None, part: torch.Tensor) -> torch.Tensor:
            if acc is None:
                return part.clone()
            acc[:n_sum] += part[:n_sum]
            torch.maximum(acc[n_sum:], part[n_sum:], out=acc[n_sum:])
            return acc

        rank, last = self.rank, active - 1
        acc: torch.Tensor | None = None
        if rank < active:
            if rank > 0:
                acc = torch.empty(aux_size, dtype=torch.float64)
                self._recv(acc, rank - 1)
                if flat is not None:
                    incoming = self._buffer(flat)
                    self._recv(incoming, rank - 1)
                    for e in extras:
                        incoming += e
                    flat += incoming  # == incoming + flat: addition commutes exactly
            for part in aux_parts:
                acc = fold(acc, part)
            if rank < last:
                assert acc is not None
                self._send(acc, rank + 1)
                if flat is not None:
                    self._send(flat, rank + 1)
        if acc is None:
            acc = torch.empty(aux_size, dtype=torch.float64)
        if self.world_size > 1:
            self._broadcast(acc, last)
            if flat is not None:
                self._broadcast(flat, last)
        return acc

    def _send(self, t: torch.Tensor, dst: int) -> None:
        raise NotImplementedError

    def _recv(self, t: torch.Tensor, src: int) -> None:
        raise NotImplementedError

    def _broadcast(self, t: torch.Tensor, src: int) -> None:
        raise NotImplementedError


class SoloGroup(_Reducer):
    """One plain process: no collectives, no control plane."""

    generation = 1
    members = ("solo",)
    worker_id = "solo"
    elastic = False

    def control(self) -> dict[str, int]:
        return {"gen": 1, "hold": -1, "ckpt": 0}


class ElasticGroup(_Reducer):
    """Membership of one worker in a job's elastic group."""

    elastic = True

    def __init__(self, ctx: JobContext) -> None:
        super().__init__()
        self.ctx = ctx
        self.worker_id = ctx.worker_id
        self.timeout = timedelta(seconds=ctx.timeout_s)
        self.store = dist.TCPStore(
            ctx.store_host,
            ctx.store_port,
            is_master=False,
            timeout=timedelta(seconds=ctx.join_timeout_s),
            wait_for_workers=False,
        )
        self.generation = 0
        self.members: tuple[str, ...] = ()
        self.rank = -1
        self.world_size = 0

    # -- control plane -------------------------------------------------------------------------
    def control(self) -> dict[str, int]:
        """The controller's current orders: generation, hold step, checkpoint requests."""
        return json.loads(self.store.get(keys.CTL))

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
            self.ctx.backend,
            store=dist.PrefixStore(f"g{generation}/", self.store),
            rank=self.rank,
            world_size=self.world_size,
            timeout=self.timeout,
        )

    def members_of(self, generation: int) -> tuple[str, ...]:
        """The target worker set of ``generation``, in rank order."""
        return tuple(json.loads(self.store.get(keys.members_key(generation))))

    def destroy(self) -> None:
        """Close the current group's connections, which also wakes peers blocked on them."""
        if dist.is_initialized():
            dist.destroy_process_group()

    def all_gather_ints(self, values: list[int]) -> list[list[int]]:
        """Every rank's small integer vector (used to agree on cursors when re-forming)."""
        mine = torch.tensor(values, dtype=torch.int64)
        out = [torch.empty_like(mine) for _ in range(self.world_size)]
        self.guard(dist.all_gather, out, mine)
        return [t.tolist() for t in out]

    def guard(self, fn, *args, **kwargs):  # type: ignore[no-untyped-def]
        """Call a collective; any failure (dead peer, timeout) becomes a GroupError."""
        try:
            return fn(*args, **kwargs)
        except (RuntimeError, ValueError) as e:  # DistError subclasses RuntimeError
            raise GroupError(str(e)) from e

    def _send(self, t: torch.Tensor, dst: int) -> None:
        self.guard(dist.send, t, dst)

    def _recv(self, t: torch.Tensor, src: int) -> None:
        self.guard(dist.recv, t, src)

    def _broadcast(self, t: torch.Tensor, src: int) -> None:
        self.guard(dist.broadcast, t, src)
