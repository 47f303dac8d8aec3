"""The exact gradient sum: a bucketed reduce-scatter and all-gather in micro-batch order.

Why not an all-reduce: its addition order depends on the number of ranks, so results would
depend on the allocation (ARCHITECTURE.md invariant 1). Why not a chain (rank 0 passes its sum
to rank 1, which adds its own, ...): it is exact but serial, one link busy at a time.

Micro-batch ``j`` of a step runs on rank ``j % W`` (``partition.deal``), so a step is a series of
*rounds*: round ``q`` is micro-batches ``qW .. qW+W-1``, one per rank, computed at the same time.
The flat gradient is cut into buckets, in the order backward produces them (from the end of the
flat buffer to its start), and each bucket into ``W`` chunks; rank ``c`` owns chunk ``c``.

1. After each backward, each rank sends chunk ``c`` of that micro-batch's gradient to rank ``c``.
2. The owner adds the round's contributions to its running sum in micro-batch index order: the
   same additions, element by element, as one device accumulating every micro-batch. The result
   is bit-identical whatever the worker count and whichever worker computed which micro-batch.
3. After the last round, each owner sends its summed chunk to every other rank (an all-gather).

Each rank sends and receives about twice the gradient per round, like a ring all-reduce, and
all links work at once. Step 1 of a bucket starts from a gradient hook as soon as backward has
produced the bucket, so the transfer overlaps the rest of the backward pass; steps 2 and 3 of
bucket ``b`` run while later buckets are still in flight.

Why rounds (and not contiguous blocks of micro-batches per rank): a rank that accumulates
several micro-batches would have to keep each apart until the ranks before it had summed
theirs. Round by round, a rank holds its gradient, one round's received chunks and its running
chunk of the sum (about twice the gradient in all, as DDP's buckets), however many micro-batches
it computes. The price is that a rank starts a backward only once the previous round's sums are
done (its forward overlaps them). A step of one round, the usual case, is unchanged.

Every rank posts its operations in the same order (step 1 by round, then bucket, then step 3 by
bucket), as NCCL needs; the group (``group.py``) turns them into tagged gloo ``isend``/``irecv``
calls, or one ``batch_isend_irecv`` per bucket on NCCL.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol

import torch

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

    Per step: :meth:`start` with the step's micro-batch count; for each of this rank's
    micro-batches (round ``q``), :meth:`begin_round` before its backward, :meth:`grad_ready`
    from each parameter's post-accumulate hook and :meth:`end_round` after it; then the group's
    ``reduce`` calls :meth:`flush` and :meth:`complete`, after which ``flat`` holds the total.
    Without a collective (one rank, or one micro-batch), ``flat`` accumulates in place.
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
        self._acc = torch.empty(0, dtype=flat.dtype, device=flat.device)
        self.world_size = 1
        self.rounds = 0
        self._finisher: ThreadPoolExecutor | None = None
        self._finishing: list[Future[None]] = []
        self._idle()

    def _idle(self) -> None:
        self.armed = False
        self.round = -1  # the round posted last (or being posted)
        self._settled = False
        self.posted = 0  # buckets of that round posted
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
        self.num_micro_batches = m = num_micro_batches
        self.rounds = -(-m // self.world_size)
        self.active = min(m, self.world_size)
        self._gathers = [[] for _ in self.buckets]
        self.comm_flat = self.flat
        # one round's received chunks, bucket by bucket (the first round has the most)
        others = self.active - (1 if self.rank < self.active else 0)
        sizes = [others * self._size(*self._mine(b)) for b in range(len(self.buckets))]
        self._offsets = [0]
        for n in sizes:
            self._offsets.append(self._offsets[-1] + n)
        # the running sum of this rank's chunks, between rounds (one round needs none)
        mine = [self._mine(b) for b in range(len(self.buckets))]
        self._acc_at = [0]
        for lo, hi in mine:
            self._acc_at.append(self._acc_at[-1] + (hi - lo if self.rounds > 1 else 0))

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

    def begin_round(self, q: int) -> None:
        """This rank's backward of round ``q`` is next: once round ``q - 1`` is summed (its
        chunks of ``flat`` are read, the receive buffer is free), arm the gradient hooks.

        Buckets are posted from the hooks, unless the tensors are staged through the host
        (gloo for a CUDA tensor): then :meth:`end_round` posts a host copy after backward.
        """
        if not self.collective:
            return
        if q != self.round + 1:
            raise RuntimeError(f"rank {self.rank} begins round {q} after round {self.round}")
        self._settle()
        self.round, self.posted = q, 0
        self._open_round(q)
        self.armed = not self.comm._staged(self.flat)

    def grad_ready(self, index: int) -> None:
        """Parameter ``index`` has its gradient: post the buckets complete so far, in order.

        Runs inside autograd; an error is kept and raised by :meth:`end_round`.
        """
        if not self.armed or self.error is not None or self._fired[index]:
            return
        self._fired[index] = True
        try:
            for b in self._param_buckets[index]:
                self._remaining[b] -= 1
            while self.posted < len(self.buckets) and self._remaining[self.posted] == 0:
                self._post_next()
        except Exception as e:  # raised again by end_round, outside autograd
            self.error = e

    def end_round(self) -> None:
        """After this rank's backward: post every bucket of the round not posted yet
        (parameters without a gradient, staged or non-overlapped runs)."""
        self.armed = False
        if self.error is not None:
            raise self.error
        if not self.collective:
            return
        if self.comm._staged(self.flat):
            self.comm_flat = self.flat.cpu()
        while self.posted < len(self.buckets):
            self._post_next()

    def flush(self) -> None:
        """Post the rounds in which this rank has no micro-batch: it receives and sums its
        chunks of them (and, with staging, gets a host buffer for the all-gather)."""
        self.armed = False
        if self.error is not None:
            raise self.error
        if not self.collective:
            return
        for q in range(self.round + 1, self.rounds):
            self._settle()
            self.round, self.posted = q, 0
            self._open_round(q)
            if self.comm._staged(self.flat) and self.comm_flat is self.flat:
                self.comm_flat = self.flat.cpu()
            while self.posted < len(self.buckets):
                self._post_next()

    def complete(self) -> None:
        """Sum the last round, and all-gather the owned chunks' totals into ``flat``."""
        if self.world_size == 1:
            return
        if not self.collective:  # one micro-batch this step: rank 0 holds the total
            self.comm._broadcast(self.flat, 0)
            return
        self._settle()
        for works in self._gathers:
            self.comm.wait(works)
        if self.comm_flat is not self.flat:
            self.flat.copy_(self.comm_flat)
        self._idle()

    # -- internals -----------------------------------------------------------------------------
    def settle(self) -> None:
        """Wait until the round posted last is summed and this rank's chunks of it are sent:
        from then on ``flat`` may change (before a forward that itself runs a backward, as a
        WMLA step hook does)."""
        self._settle()

    def _settle(self) -> None:
        if self.round < 0 or self._settled:
            return
        self._settled = True
        if self.comm.tagged:
            for f in self._finishing:
                f.result()
            self._finishing = []
        else:
            for b in range(len(self.buckets)):
                self._finish(b)

    def _open_round(self, q: int) -> None:
        self._settled = False
        self._remaining = list(self._needs)
        self._fired = [False] * len(self._param_buckets)
        self._recvs = [[] for _ in self.buckets]
        self._sends = [[] for _ in self.buckets]
        self._views = [[] for _ in self.buckets]

    def _round_ranks(self, q: int) -> range:
        """The ranks with a micro-batch in round ``q``, in micro-batch order."""
        return range(min(self.world_size, self.num_micro_batches - q * self.world_size))

    def _tag(self, phase: int, b: int) -> int:
        n = len(self.buckets)
        return (self.rounds * n + b) if phase else (self.round * n + b)

    def _post_next(self) -> None:
        """Post step 1 of the round's next bucket. Where transfers are matched by tag (gloo), a
        thread then finishes it (steps 2 and, after the last round, 3) while backward goes on;
        elsewhere (NCCL, where every rank must post in the same order) the next round's start
        or :meth:`complete` does."""
        b = self.posted
        self._post_parts(b)
        self.posted += 1
        if self.comm.tagged:
            if self._finisher is None:
                self._finisher = ThreadPoolExecutor(1, thread_name_prefix="edt-exchange")
            self._finishing.append(self._finisher.submit(self._finish, b))

    def _finish(self, b: int) -> None:
        """Step 2 of bucket ``b`` of the round once its contributions are in; after the last
        round, step 3."""
        self.comm.wait(self._recvs[b])
        self._sum(b)
        self.comm.wait(self._sends[b])  # our chunks of b are out: their memory may change
        if self.round == self.rounds - 1:
            self._gathers[b] = self.comm.post(self._gather_ops(b))

    def _post_parts(self, b: int) -> None:
        """Step 1 of bucket ``b``: our chunks to their owners, the round's others to us."""
        me, w = self.rank, self.world_size
        ranks = self._round_ranks(self.round)
        ops: list[Op] = []
        if me in ranks:
            for c in range(w):
                c_lo, c_hi = chunk_range(*self.buckets[b], c, w)
                if c != me and c_hi > c_lo:
                    ops.append(("send", self.comm_flat[c_lo:c_hi], c, self._tag(0, b)))
        n = self._size(*self._mine(b))
        area, views = self._receive_area(b), []
        if n:
            for r in ranks:
                if r != me:
                    views.append(area[len(views) * n : (len(views) + 1) * n])
                    ops.append(("recv", views[-1], r, self._tag(0, b)))
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
        """Bucket ``b``'s part of one scratch buffer sized for a round's receives."""
        total, device = self._offsets[-1], self.comm_flat.device
        if self._scratch.numel() < total or self._scratch.device != device:
            self._scratch = torch.empty(total, dtype=self.flat.dtype, device=device)
        return self._scratch[self._offsets[b] : self._offsets[b + 1]]

    def _running(self, b: int) -> torch.Tensor:
        """Bucket ``b``'s part of the running sum of this rank's chunks."""
        total, device = self._acc_at[-1], self.comm_flat.device
        if self._acc.numel() < total or self._acc.device != device:
            self._acc = torch.empty(total, dtype=self.flat.dtype, device=device)
        return self._acc[self._acc_at[b] : self._acc_at[b + 1]]

    def _sum(self, b: int) -> None:
        """Add the round's contributions to our chunk of bucket ``b`` in micro-batch order:
        into the running sum, and after the last round into ``flat``."""
        lo, hi = self._mine(b)
        if hi == lo:
            return
        received = iter(self._views[b])
        seq = [
            self.comm_flat[lo:hi] if r == self.rank else next(received)
            for r in self._round_ranks(self.round)
        ]
        first, last = self.round == 0, self.round == self.rounds - 1
        if first and last:  # one round: the first contribution is the running sum
            acc = seq.pop(0)
        else:
            acc = self._running(b)
            if first:
                acc.copy_(seq.pop(0))
        if not last:
            for t in seq:
                acc.add_(t)
            return
        for t in seq[:-1]:
            acc.add_(t)
        torch.add(acc, seq[-1], out=self.comm_flat[lo:hi])  # an aliased out is fine here

    def _gather_ops(self, b: int) -> list[Op]:
        """Step 3 of bucket ``b``: our summed chunk to every rank, theirs into ``flat``."""
        me, w = self.rank, self.world_size
        m_lo, m_hi = self._mine(b)
        ops: list[Op] = []
        if m_hi > m_lo:
            ops.extend(
                ("send", self.comm_flat[m_lo:m_hi], c, self._tag(1, b)) for c in range(w) if c != me
            )
        for c in range(w):
            c_lo, c_hi = chunk_range(*self.buckets[b], c, w)
            if c != me and c_hi > c_lo:
                ops.append(("recv", self.comm_flat[c_lo:c_hi], c, self._tag(1, b)))
        return ops
