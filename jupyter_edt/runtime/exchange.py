"""The exact gradient sum: a bucketed reduce-scatter and all-gather in micro-batch order.

Why not an all-reduce: its addition order depends on the number of ranks, so results would
depend on the allocation (ARCHITECTURE.md invariant 1). Why not a chain (rank 0 passes its sum
to rank 1, which adds its own, ...): it is exact but serial, one link busy at a time.

Here the flat gradient is cut into buckets, in the order backward produces them (from the end of
the flat buffer to its start), and each bucket into ``W`` chunks; rank ``c`` owns chunk ``c``.

1. Each rank sends chunk ``c`` of its contributions to rank ``c``: rank 0 one (the sum of its
   micro-batches, which autograd accumulated in index order from zero), every other rank one per
   micro-batch, so that nothing is added out of order.
2. The owner adds the contributions of its chunk in micro-batch index order: the same additions,
   element by element, as one device accumulating every micro-batch. The result is
   bit-identical whatever the worker count and whichever worker computed which micro-batch.
3. Each owner sends its summed chunk to every other rank (an all-gather).

Each rank sends and receives about twice the gradient, like a ring all-reduce, and all links
work at once. Step 1 of a bucket starts from a gradient hook as soon as backward has produced
the bucket (on a rank's last micro-batch of the step), so the transfer overlaps the rest of the
backward pass; steps 2 and 3 of bucket ``b`` run while later buckets are still in flight.

Every rank posts its operations in the same order (step 1 of the buckets in index order, then
step 3 in index order), as NCCL needs; the group (``group.py``) turns them into tagged gloo
``isend``/``irecv`` calls, or one ``batch_isend_irecv`` per bucket on NCCL.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol

import torch

from . import partition as part

__all__ = ["BUCKET_BYTES", "Comm", "OrderedExchange", "bucket_ranges", "chunk_range"]

# a bucket's size: small enough to overlap backward, large per message; a worker's
# EDT_BUCKET_BYTES overrides it (the tests use tiny buckets to get many)
BUCKET_BYTES = 4 << 20

Op = tuple[str, torch.Tensor, int, int]  # ("send" | "recv", tensor, peer rank, tag)


class Comm(Protocol):
    """What the exchange needs from a group (each ``group.Group``)."""

    rank: int
    world_size: int
    tagged: bool  # transfers are matched by tag, so ranks may post them in different orders

    def post(self, ops: list[Op]) -> list[Any]: ...

    def wait(self, works: list[Any]) -> None: ...

    def _broadcast(self, t: torch.Tensor, src: int) -> None: ...

    def _staged(self, t: torch.Tensor) -> bool: ...


def bucket_ranges(numel: int, cap: int) -> list[tuple[int, int]]:
    """``[lo, hi)`` ranges of a flat buffer of ``numel`` elements, from its end to its start
    (the order in which backward produces gradients), each at most ``cap`` elements."""
    if cap < 1:
        raise ValueError(f"bucket size must be at least one element, got {cap}")
    return [(max(0, hi - cap), hi) for hi in range(numel, 0, -cap)]


def chunk_range(lo: int, hi: int, c: int, world_size: int) -> tuple[int, int]:
    """Chunk ``c`` of ``world_size`` near-equal chunks of ``[lo, hi)``."""
    n = hi - lo
    return lo + c * n // world_size, lo + (c + 1) * n // world_size


class OrderedExchange:
    """Sums one flat gradient buffer over the group, exactly, once per step.

    Per step: :meth:`start` with the step's micro-batch count; :meth:`arm` before this rank's
    last backward of the step (its earlier micro-batches' gradients as ``extras``, rank 0 has
    none); :meth:`grad_ready` from each parameter's post-accumulate hook; then the group's
    ``reduce`` calls :meth:`flush` and :meth:`complete`, after which ``flat`` holds the total.
    """

    def __init__(
        self,
        comm: Comm,
        flat: torch.Tensor,
        spans: Sequence[tuple[int, int]],
        bucket_bytes: int = BUCKET_BYTES,
    ) -> None:
        self.comm = comm
        self.flat = flat
        cap = max(1, bucket_bytes // flat.element_size())
        self.buckets = bucket_ranges(flat.numel(), cap)
        # the buckets each parameter (its [lo, hi) span of flat) overlaps, and how many
        # parameters each bucket waits for
        self._param_buckets = [
            [b for b, (lo, hi) in enumerate(self.buckets) if lo < p_hi and p_lo < hi]
            for p_lo, p_hi in spans
        ]
        self._needs = [0] * len(self.buckets)
        for bs in self._param_buckets:
            for b in bs:
                self._needs[b] += 1
        self._scratch = torch.empty(0, dtype=flat.dtype, device=flat.device)
        self.world_size = 1
        self._finisher: ThreadPoolExecutor | None = None
        self._finishing: list[Future[None]] = []
        self._idle()

    def _idle(self) -> None:
        self.armed = False
        self.counts: list[int] = []
        self.parts: list[torch.Tensor] = []
        self.posted = 0
        self.error: BaseException | None = None
        self._remaining: list[int] = []
        self._fired: list[bool] = []
        self._recvs: list[list[Any]] = []
        self._sends: list[list[Any]] = []
        self._views: list[list[torch.Tensor]] = []
        self._gathers: list[list[Any]] = []

    # -- per step ------------------------------------------------------------------------------
    def start(self, num_micro_batches: int) -> None:
        """Begin a step of ``num_micro_batches`` micro-batches on the group's current ranks."""
        self.drain()
        self._idle()
        self.rank, self.world_size = self.comm.rank, self.comm.world_size
        blocks = part.deal(num_micro_batches, self.world_size)
        self.counts = [hi - lo for lo, hi in blocks]
        # contributions per rank: rank 0 sends its accumulated sum, the others each micro-batch
        self.n_parts = [min(k, 1) if r == 0 else k for r, k in enumerate(self.counts)]
        self.active = sum(1 for k in self.counts if k)
        self._remaining = list(self._needs)
        self._fired = [False] * len(self._param_buckets)
        self._recvs = [[] for _ in self.buckets]
        self._sends = [[] for _ in self.buckets]
        self._views = [[] for _ in self.buckets]
        self._gathers = [[] for _ in self.buckets]
        self.comm_flat = self.flat
        # where each bucket's received chunks go in the scratch buffer
        others = sum(k for r, k in enumerate(self.n_parts) if r != self.rank)
        sizes = [others * self._size(*self._mine(b)) for b in range(len(self.buckets))]
        self._offsets = [0]
        for n in sizes:
            self._offsets.append(self._offsets[-1] + n)

    def drain(self) -> None:
        """Wait for the finishing thread's work of a failed step (its transfers fail too, within
        the group's timeout), so that it posts nothing into a later generation's group."""
        for f in self._finishing:
            f.exception()
        self._finishing = []

    @property
    def collective(self) -> bool:
        """Whether this step exchanges chunks (else: nothing, or a broadcast from rank 0)."""
        return self.world_size > 1 and self.active > 1

    def arm(self, extras: list[torch.Tensor]) -> None:
        """This rank's last backward of the step is next; ``extras`` are its earlier parts.

        Buckets are posted from the gradient hooks, unless the tensors are staged through the
        host (gloo for a CUDA tensor): then :meth:`flush` posts host copies after backward.
        """
        self.parts = [*extras, self.flat]
        if len(self.parts) != self.n_parts[self.rank]:
            raise RuntimeError(
                f"rank {self.rank} has {len(self.parts)} gradient parts, the plan says "
                f"{self.n_parts[self.rank]} (rank 0 sums its micro-batches in place)"
            )
        self.armed = self.collective and not self.comm._staged(self.flat)

    def grad_ready(self, index: int) -> None:
        """Parameter ``index`` has its gradient: post the buckets complete so far, in order.

        Runs inside autograd; an error is kept and raised by :meth:`flush`.
        """
        if not self.armed or self.error is not None or self._fired[index]:
            return
        self._fired[index] = True
        try:
            for b in self._param_buckets[index]:
                self._remaining[b] -= 1
            while self.posted < len(self.buckets) and self._remaining[self.posted] == 0:
                self._post_next()
        except Exception as e:  # raised again by flush, outside autograd
            self.error = e

    def flush(self) -> None:
        """Post step 1 of every bucket not posted yet (parameters without a gradient, ranks
        without micro-batches, staged or non-overlapped runs)."""
        self.armed = False
        if self.error is not None:
            raise self.error
        if not self.collective:
            return
        if self.comm._staged(self.flat):
            self.comm_flat = self.flat.cpu()
            extras = [p.cpu() for p in self.parts[:-1]]
            self.parts = [*extras, self.comm_flat] if self.parts else []
        while self.posted < len(self.buckets):
            self._post_next()

    def complete(self) -> None:
        """Sum every owned chunk in micro-batch order and all-gather the sums into ``flat``."""
        if self.world_size == 1:
            return
        if not self.collective:  # one micro-batch this step: rank 0 holds the total
            self.comm._broadcast(self.flat, 0)
            return
        if self._finishing:
            for f in self._finishing:
                f.result()
            self._finishing = []
        else:
            for b in range(len(self.buckets)):
                self._finish(b)
        for works in self._gathers:
            self.comm.wait(works)
        if self.comm_flat is not self.flat:
            self.flat.copy_(self.comm_flat)
        self._idle()

    # -- internals -----------------------------------------------------------------------------
    def _tag(self, phase: int, b: int, q: int) -> int:
        return (phase * len(self.buckets) + b) * max(self.n_parts) + q

    def _post_next(self) -> None:
        """Post step 1 of the next bucket. Where transfers are matched by tag (gloo), a thread
        then finishes it (steps 2 and 3) while backward goes on; elsewhere (NCCL, where every
        rank must post in the same order) :meth:`complete` does, after every step 1."""
        b = self.posted
        self._post_parts(b)
        self.posted += 1
        if self.comm.tagged:
            if self._finisher is None:
                self._finisher = ThreadPoolExecutor(1, thread_name_prefix="edt-exchange")
            self._finishing.append(self._finisher.submit(self._finish, b))

    def _finish(self, b: int) -> None:
        """Steps 2 and 3 of bucket ``b`` once its contributions are in."""
        self.comm.wait(self._recvs[b])
        self._sum(b)
        self.comm.wait(self._sends[b])  # our chunks of b are out: their memory may change
        self._gathers[b] = self.comm.post(self._gather_ops(b))

    def _post_parts(self, b: int) -> None:
        """Step 1 of bucket ``b``: our parts' chunks to their owners, the others' to us."""
        me, w = self.rank, self.world_size
        ops: list[Op] = []
        for c in range(w):
            c_lo, c_hi = chunk_range(*self.buckets[b], c, w)
            if c != me and c_hi > c_lo:
                ops.extend(
                    ("send", t[c_lo:c_hi], c, self._tag(0, b, q)) for q, t in enumerate(self.parts)
                )
        n = self._size(*self._mine(b))
        area, views = self._receive_area(b), []
        if n:
            for r, k in enumerate(self.n_parts):
                for q in range(k if r != me else 0):
                    views.append(area[len(views) * n : (len(views) + 1) * n])
                    ops.append(("recv", views[-1], r, self._tag(0, b, q)))
        self._views[b] = views
        works = self.comm.post(ops)
        self._sends[b] = [wk for wk, op in zip(works, ops, strict=True) if op[0] == "send"]
        self._recvs[b] = [wk for wk, op in zip(works, ops, strict=True) if op[0] == "recv"]

    def _mine(self, b: int) -> tuple[int, int]:
        return chunk_range(*self.buckets[b], self.rank, self.world_size)

    @staticmethod
    def _size(lo: int, hi: int) -> int:
        return hi - lo

    def _receive_area(self, b: int) -> torch.Tensor:
        """Bucket ``b``'s part of one scratch buffer sized for the step's receives."""
        total, device = self._offsets[-1], self.comm_flat.device
        if self._scratch.numel() < total or self._scratch.device != device:
            self._scratch = torch.empty(total, dtype=self.flat.dtype, device=device)
        return self._scratch[self._offsets[b] : self._offsets[b + 1]]

    def _sum(self, b: int) -> None:
        """Add our chunk of bucket ``b``'s contributions in micro-batch order into ``flat``."""
        lo, hi = self._mine(b)
        if hi == lo:
            return
        received = iter(self._views[b])
        seq: list[torch.Tensor] = []
        for r, k in enumerate(self.n_parts):
            if r == self.rank:
                seq.extend(t[lo:hi] for t in self.parts)
            else:
                seq.extend(next(received) for _ in range(k))
        acc = seq[0]  # rank 0's sum: on rank 0 our own flat, else a receive buffer
        for t in seq[1:-1]:
            acc.add_(t)
        torch.add(acc, seq[-1], out=self.comm_flat[lo:hi])  # an aliased out is fine here

    def _gather_ops(self, b: int) -> list[Op]:
        """Step 3 of bucket ``b``: our summed chunk to every rank, theirs into ``flat``."""
        me, w = self.rank, self.world_size
        m_lo, m_hi = self._mine(b)
        ops: list[Op] = []
        if m_hi > m_lo:
            ops.extend(
                ("send", self.comm_flat[m_lo:m_hi], c, self._tag(1, b, 0))
                for c in range(w)
                if c != me
            )
        for c in range(w):
            c_lo, c_hi = chunk_range(*self.buckets[b], c, w)
            if c != me and c_hi > c_lo:
                ops.append(("recv", self.comm_flat[c_lo:c_hi], c, self._tag(1, b, 0)))
        return ops
