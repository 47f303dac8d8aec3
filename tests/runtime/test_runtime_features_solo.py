"""The Trainer's features for real models (issue 26) in one plain process: clipping equals a
plain PyTorch loop with ``clip_grad_norm_`` / ``clip_grad_value_``, a ``step_fn`` equals the
``loss_fn`` it wraps, fp16's loss scale (overflows injected: no GPU needed) is training state,
bad arguments are ValueErrors naming them, and the default threads and loaders per worker."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from jupyter_edt.runtime import Callback, Trainer, resources
from jupyter_edt.runtime import partition as part
from jupyter_edt.runtime.precision import LossScaler

N, BATCH, EPOCHS = 24, 8, 2


def data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    x = torch.randn(N, 5, generator=g, dtype=torch.float64)
    return x, (x[:, 0] > 0).long()


def model() -> nn.Module:
    torch.manual_seed(11)
    return nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 2)).double()


def trainer(m: nn.Module, **kw) -> Trainer:
    x, y = data()
    loss_fn = kw.pop("loss_fn", nn.functional.cross_entropy)
    return Trainer(
        m,
        lambda: (TensorDataset(x, y), TensorDataset(x[:4], y[:4])),
        loss_fn,
        lambda params: torch.optim.SGD(params, lr=0.5),
        device="cpu",
        **kw,
    )


def fit(t: Trainer, **kw) -> dict:
    return t.fit(EPOCHS, BATCH, 2, checkpoint_every=0, micro_batch_size=4, **kw)


@pytest.mark.parametrize(
    ("option", "clip"),
    [
        ("clip_grad_norm", lambda ps: nn.utils.clip_grad_norm_(ps, 0.05)),
        ("clip_grad_value", lambda ps: nn.utils.clip_grad_value_(ps, 0.01)),
    ],
)
def test_clipping_equals_a_plain_loop_that_clips(option, clip) -> None:
    """Two micro-batches a step, accumulated as a plain loop would, then clipped and applied."""
    bound = 0.05 if option == "clip_grad_norm" else 0.01
    m = model()
    history = fit(trainer(m, **{option: bound}))

    plain = model()
    opt = torch.optim.SGD(plain.parameters(), lr=0.5)
    x, y = data()
    losses = []
    for epoch in range(EPOCHS):
        perm = part.epoch_permutation(N, 0, epoch)
        for step in range(N // BATCH):
            batch = part.global_batch(perm, step, BATCH)
            opt.zero_grad()
            total = 0.0
            for mb in part.micro_batches(batch, 4):
                loss = nn.functional.cross_entropy(plain(x[mb]), y[mb]) * (len(mb) / len(batch))
                loss.backward()
                total += float(loss.detach())
            clip(list(plain.parameters()))
            opt.step()
            losses.append(total)
    for a, b in zip(m.state_dict().values(), plain.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert [s["loss"] for s in history["train"]] == pytest.approx(losses, abs=1e-15)
    if option == "clip_grad_norm":  # clipped, and the norm before clipping is in the logs
        assert all(s["grad_norm"] > bound for s in history["train"])


class Probe(nn.Module):
    """Notes whether it is in training mode at each forward."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[bool] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(self.training)
        return x


def test_training_mode_is_set_as_epochs_begin_and_after_a_callbacks_eval() -> None:
    """A part set to eval in on_epoch_begin (frozen BatchNorm, say) stays so for the epoch; a
    model left in eval by a callback trains in training mode from the next step; validation
    runs in eval mode. Each step is 2 micro-batches, each validation 1."""
    first, last = Probe(), Probe()
    m = model()
    net = nn.Sequential(first, m, last)

    class Modes(Callback):
        def on_epoch_begin(self, epoch: int) -> None:
            if epoch == 1:
                first.eval()

        def on_step_end(self, step: int, logs: dict) -> None:
            if logs["global_step"] == 0:
                net.eval()  # to sample, say, and not set back

    fit(trainer(net, callbacks=[Modes()]), validate_every=1)
    steps = N // BATCH
    epoch = [True] * 2 * steps + [False]  # training forwards, then validation's
    assert last.seen == epoch * EPOCHS
    assert first.seen == epoch + [False] * (2 * steps + 1)


def test_a_step_fn_equals_the_loss_fn_it_wraps() -> None:
    def step_fn(net: nn.Module, batch: list[torch.Tensor]):
        x, y = batch
        out = net(x)
        return nn.functional.cross_entropy(out, y), out

    def acc(out, batch):
        return (out.argmax(1) == batch[1]).double().mean()

    a, b = model(), model()
    one = fit(trainer(a, metrics={"acc": lambda out, y: (out.argmax(1) == y).double().mean()}))
    two = fit(trainer(b, loss_fn=None, step_fn=step_fn, metrics={"acc": acc}))
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q)
    assert one["train"] == two["train"] and one["val"] == two["val"]


def test_the_loss_scale_skips_an_overflow_and_is_training_state(tmp_path: Path) -> None:
    scaler = LossScaler(init_scale=8.0, growth_interval=2)
    flat = torch.tensor([8.0, float("inf")])
    assert scaler.unscale(flat) is False and flat[0] == 8.0  # not applied: the step is skipped
    scaler.update(False)
    assert scaler.scale == 4.0
    flat = torch.tensor([8.0, -4.0])
    assert scaler.unscale(flat) is True and flat.tolist() == [2.0, -1.0]
    scaler.update(True)
    scaler.update(True)
    assert (scaler.scale, scaler.growth_tracker) == (8.0, 0)

    # an fp16 trainer's state carries its scale; a checkpoint restores it
    t = trainer(model().float(), precision="fp16")
    t.precision.scaler.load_state_dict({"scale": 512.0, "growth_tracker": 7})
    state = t.state()
    assert state["scaler"] == {"scale": 512.0, "growth_tracker": 7}
    other = trainer(model().float(), precision="fp16")
    other.load_state(state)
    assert other.precision.scaler.state_dict() == state["scaler"]
    assert trainer(model()).state()["scaler"] is None


def test_bf16_autocasts_the_forward_of_a_float32_model() -> None:
    seen = []
    m = model().float()
    m.register_forward_hook(lambda mod, inp, out: seen.append(out.dtype))
    t = trainer(m, precision="bf16")
    x, y = data()
    t.datasets_fn = lambda: (TensorDataset(x.float(), y), TensorDataset(x[:4].float(), y[:4]))
    fit(t)
    assert set(seen) == {torch.bfloat16}
    assert {p.dtype for p in m.parameters()} == {torch.float32}  # the weights stay float32


class Plain(nn.Module):
    """Returns logits only: no loss of its own."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(5, 2).double()

    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        return self.linear(x)


@pytest.mark.parametrize(
    ("make", "fit_kw", "message"),
    [
        (lambda: trainer(model(), precision="fp8"), {}, "precision must be one of"),
        (lambda: trainer(model(), clip_grad_norm=-1.0), {}, "clip_grad_norm must be a positive"),
        (lambda: trainer(model(), clip_grad_value=0), {}, "clip_grad_value must be a positive"),
        (
            lambda: trainer(model(), clip_grad_norm=1.0, clip_grad_value=1.0),
            {},
            "give clip_grad_norm or clip_grad_value, not both",
        ),
        (
            lambda: trainer(model(), step_fn=lambda m, b: 0.0),
            {},
            "give loss_fn or step_fn, not both",
        ),
        (lambda: trainer(Plain(), loss_fn=None), {}, "loss_fn=None needs a model whose output"),
        (lambda: trainer(model()), {"num_workers": -1}, "num_workers must be an integer >= 0"),
    ],
)
def test_bad_arguments_are_value_errors_naming_them(make, fit_kw, message) -> None:
    with pytest.raises(ValueError, match=message):
        fit(make(), **fit_kw)


def test_threads_and_loaders_per_worker(monkeypatch, tmp_path: Path) -> None:
    """A GPU worker takes its GPU's share of the node's cores; a virtual one a single thread;
    EDT_NUM_THREADS wins, and a bad value is named."""
    gpus = tmp_path / "gpus"
    for i in range(4):
        (gpus / f"0000:0{i}:00.0").mkdir(parents=True)
    monkeypatch.setattr(resources, "NVIDIA_GPUS", str(gpus))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(32)), raising=False)
    assert resources.cores_per_gpu() == 8
    assert resources.worker_threads({"CUDA_VISIBLE_DEVICES": "2"}) == 8
    assert resources.worker_threads({"CUDA_VISIBLE_DEVICES": ""}) == 1
    assert resources.worker_threads({"CUDA_VISIBLE_DEVICES": "2", "EDT_NUM_THREADS": "3"}) == 3
    assert resources.default_num_workers("cuda") == 4
    assert resources.default_num_workers("cpu") == 0
    with pytest.raises(ValueError, match="EDT_NUM_THREADS must be a positive integer"):
        resources.worker_threads({"EDT_NUM_THREADS": "0"})
    monkeypatch.setattr(resources, "NVIDIA_GPUS", str(tmp_path / "no-driver"))
    assert resources.cores_per_gpu() == 32
