"""Every trainable parameter's gradient as a view of one flat buffer, summed over the group.

Why one flat buffer: the exact, order-fixed sum (``exchange.py``) cuts it into buckets that
start travelling from the gradient hooks while backward is still running, and the parameters'
``.grad`` views mean the optimizer steps on the sum with no copy. The trainer says where a
step's parts begin and end; this module keeps the views, the hooks and the exchange consistent.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import torch
from torch import nn

from .exchange import BUCKET_BYTES, Comm, OrderedExchange

__all__ = ["GradientBuckets"]


class GradientBuckets:
    """The flat gradient of ``params`` and its exact sum over ``comm`` (one per ``fit``).

    Per step: :meth:`start`; for each of this worker's micro-batches :meth:`new_part` (where the
    exchange is collective; otherwise the micro-batches accumulate in one part), then
    :meth:`begin_round` before its backward and :meth:`collect` and :meth:`end_round` after it;
    then the group's ``reduce(..., self.exchange, ...)`` leaves the sum in :attr:`flat`.
    """

    def __init__(
        self, params: Sequence[nn.Parameter], comm: Comm, bucket_bytes: int | None = None
    ) -> None:
        self.params = list(params)
        total = sum(p.numel() for p in self.params)
        p0 = self.params[0]
        self.flat = torch.zeros(total, dtype=p0.dtype, device=p0.device)
        self.views: list[torch.Tensor] = []
        spans, off = [], 0
        for p in self.params:
            view = self.flat[off : off + p.numel()].view_as(p)
            p.grad = view
            self.views.append(view)
            spans.append((off, off + p.numel()))
            off += p.numel()
        if bucket_bytes is None:  # a worker's EDT_BUCKET_BYTES (the tests use tiny buckets)
            bucket_bytes = int(os.environ.get("EDT_BUCKET_BYTES", BUCKET_BYTES))
        # the exact sum over workers; each parameter's hook lets it start during backward, where
        # there is more than one bucket to start (one goes when backward ends, from end_round)
        self.exchange = OrderedExchange(comm, self.flat, spans, bucket_bytes)
        self._hooks = (
            [p.register_post_accumulate_grad_hook(self._hook(i)) for i, p in enumerate(self.params)]
            if len(self.exchange.buckets) > 1
            else []
        )

    def _hook(self, index: int) -> Callable[[torch.Tensor], None]:
        view = self.views[index]

        def ready(param: torch.Tensor) -> None:
            if param.grad is not view:
                self._into_flat(param, view)
            self.exchange.grad_ready(index)

        return ready

    @staticmethod
    def _into_flat(p: torch.Tensor, view: torch.Tensor) -> None:
        """Make ``p.grad`` its view of ``flat`` again, keeping its value: a gradient that user
        code replaced or set to None (``zero_grad()``) since :meth:`new_part`, or none at all
        since (the parameter took no part in the loss: zero)."""
        if p.grad is None:
            view.zero_()
        elif p.grad.data_ptr() != view.data_ptr():
            view.copy_(p.grad)
        else:
            return
        p.grad = view

    def start(self, num_micro_batches: int) -> None:
        """Begin a step of ``num_micro_batches`` micro-batches on the group's current ranks."""
        self.exchange.start(num_micro_batches)

    def new_part(self) -> None:
        """The next backward starts a new part, once the previous round has been read from
        ``flat``: ``flat`` is zeroed and autograd adds each gradient into its view in place, as
        DDP's ``gradient_as_bucket_view`` does. One kernel, and no Python per parameter: on a
        small model, a call per parameter to copy a fresh gradient in cost more than the copy.
        """
        self.exchange.settle()
        self.flat.zero_()
        for p, view in zip(self.params, self.views, strict=True):
            if p.grad is not view:
                p.grad = view

    def begin_round(self, q: int) -> None:
        """This worker's backward of round ``q`` is next (``OrderedExchange.begin_round``)."""
        self.exchange.begin_round(q)

    def end_round(self) -> None:
        """That backward is over: the rest of its buckets go (``OrderedExchange.end_round``)."""
        self.exchange.end_round()

    def collect(self) -> None:
        """After backward every gradient lives in ``flat`` (the hooks did it for parameters
        that got one), so the flat buffer stays the single source of truth."""
        for p, view in zip(self.params, self.views, strict=True):
            if p.grad is not view:
                self._into_flat(p, view)

    def zero(self) -> None:
        """Forget any gradient (a received state starts a step afresh)."""
        self.flat.zero_()

    def drain(self) -> None:
        """Wait for a failed step's transfers, which must not post into the next group."""
        self.exchange.drain()

    def close(self) -> None:
        """Remove the gradient hooks (``fit`` is over)."""
        for hook in self._hooks:
            hook.remove()
