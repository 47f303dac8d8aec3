"""The flat gradient (``buckets.py``) in one process: each part's gradients are added into
``flat`` in place, whatever user code did to ``.grad`` meanwhile; hooks only where a bucket can
start before backward ends. The sums over workers are ``test_runtime_exchange.py``'s."""

from __future__ import annotations

import torch
from torch import nn

from jupyter_edt.runtime.buckets import GradientBuckets
from jupyter_edt.runtime.group import SoloGroup


def net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2)).double()


def grads_of(m: nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    """A plain backward's gradients of ``m``'s parameters."""
    ref = net()
    ref.load_state_dict(m.state_dict())
    ref(x).square().sum().backward()
    return [p.grad for p in ref.parameters()]


def backward(g: GradientBuckets, m: nn.Module, x: torch.Tensor) -> None:
    g.start(1)
    g.new_part()
    g.begin_round(0)
    m(x).square().sum().backward()
    g.collect()
    g.end_round()


def test_each_part_starts_from_zero_and_leaves_grads_as_views_of_flat() -> None:
    m = net()
    params = list(m.parameters())
    g = GradientBuckets(params, SoloGroup(), bucket_bytes=1 << 20)
    x1, x2 = torch.randn(5, 4, dtype=torch.float64), torch.randn(5, 4, dtype=torch.float64)
    backward(g, m, x1)
    backward(g, m, x2)  # not added to x1's: a new part
    for p, view, want in zip(params, g.views, grads_of(m, x2), strict=True):
        assert p.grad is view
        assert torch.equal(view, want)
    assert g.flat.data_ptr() == params[0].grad.data_ptr()


def test_what_user_code_does_to_grads_during_a_part_ends_up_in_flat() -> None:
    """``zero_grad()`` (grads set to None) before its own backward, as a WMLA step hook does;
    a gradient replaced by another tensor; a parameter with no gradient at all."""
    m = net()
    params = list(m.parameters())
    extra = nn.Parameter(torch.ones(3, dtype=torch.float64))  # takes no part in the loss
    g = GradientBuckets([*params, extra], SoloGroup(), bucket_bytes=1 << 20)
    x = torch.randn(5, 4, dtype=torch.float64)
    backward(g, m, x)  # flat holds a gradient now
    g.start(1)
    g.new_part()
    g.begin_round(0)
    for p in params:
        p.grad = None
    m(x).square().sum().backward()
    params[0].grad = params[0].grad * 2  # a new tensor, not the view
    extra.grad = None
    g.collect()
    g.end_round()
    want = grads_of(m, x)
    want[0] = want[0] * 2
    for p, view, w in zip(params, g.views[:-1], want, strict=True):
        assert p.grad is view
        assert torch.equal(view, w)
    assert extra.grad is g.views[-1] and not extra.grad.any()


def test_hooks_only_where_a_bucket_can_go_before_backward_ends() -> None:
    params = list(net().parameters())
    one = GradientBuckets(params, SoloGroup(), bucket_bytes=1 << 20)
    assert len(one.exchange.buckets) == 1 and one._hooks == []
    one.close()
    many = GradientBuckets(params, SoloGroup(), bucket_bytes=16)
    assert len(many.exchange.buckets) > 1 and len(many._hooks) == len(params)
    many.close()
