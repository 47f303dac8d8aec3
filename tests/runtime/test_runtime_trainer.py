"""Single-process behaviour of the Trainer: the scaling rule, state, checkpoints, bad input."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import Dataset, IterableDataset, TensorDataset

from jupyter_edt.runtime import Callback, Trainer
from jupyter_edt.runtime import partition as part
from jupyter_edt.runtime.events import EventLog, read_events
from jupyter_edt.runtime.state import atomic_save, flatten, latest_checkpoint, unflatten


def _data(n: int = 30, seed: int = 0) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g, dtype=torch.float64)
    return TensorDataset(x, x @ torch.tensor([1.0, -2.0, 0.5, 3.0], dtype=torch.float64))


def _linear() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1), nn.Flatten(0)).double()


def _trainer(model: nn.Module | None = None, **kw: object) -> Trainer:
    model = model or _linear()
    kw.setdefault("device", "cpu")  # compared with CPU references, also on a GPU machine
    return Trainer(
        model,
        kw.pop("datasets", lambda: (_data(30), _data(10, 1))),  # type: ignore[arg-type]
        nn.functional.mse_loss,
        torch.optim.SGD(model.parameters(), lr=0.05),
        **kw,  # type: ignore[arg-type]
    )


def test_micro_batched_update_equals_one_device_step_on_the_global_batch() -> None:
    """Weighted micro-batch gradients reproduce the full-batch gradient (incl. partial batches)."""
    t = _trainer()
    hist = t.fit(2, 8, 4, micro_batch_size=3, checkpoint_every=0)  # 30 = 8+8+8+6; 8 = 3+3+2
    ref = _linear()
    opt = torch.optim.SGD(ref.parameters(), lr=0.05)
    train = _data(30)
    losses = []
    for epoch in range(2):
        perm = part.epoch_permutation(30, 0, epoch)
        for step in range(part.steps_per_epoch(30, 8)):
            x, y = train[part.global_batch(perm, step, 8)]
            opt.zero_grad()
            loss = nn.functional.mse_loss(ref(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
    assert len(hist["train"]) == 8
    assert [h["loss"] for h in hist["train"]] == pytest.approx(losses, abs=1e-12)
    for a, b in zip(t.model.parameters(), ref.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-12, rtol=0)
    assert [v["epoch"] for v in hist["val"]] == [0, 1] and hist["val"][1]["val_loss"] > 0


def test_dropout_depends_on_the_micro_batch_seed_not_on_history() -> None:
    """Two runs from different global RNG states give the same trajectory."""
    results = []
    for noise in (1, 2):
        torch.manual_seed(noise)
        torch.rand(noise * 10)  # a different global RNG position before fit
        model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Linear(8, 1), nn.Flatten(0))
        model = model.double()
        model.load_state_dict(_reference_dropout_weights())
        t = _trainer(model)
        results.append([h["loss"] for h in t.fit(1, 10, 2, checkpoint_every=0)["train"]])
    assert results[0] == results[1]


def _reference_dropout_weights() -> dict[str, torch.Tensor]:
    torch.manual_seed(3)
    m = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Linear(8, 1), nn.Flatten(0)).double()
    return m.state_dict()


def test_checkpoints_resume_to_the_same_result(tmp_path: Path) -> None:
    class Count(Callback):
        steps = 0

        def on_step_end(self, step: int, logs: dict[str, object]) -> None:
            Count.steps += 1

    full = _trainer()
    full.fit(3, 8, 2, checkpoint_every=1)
    part1 = _trainer(callbacks=[Count()])
    part1.fit(2, 8, 2, checkpoint_every=1, result_dir=tmp_path)
    assert Count.steps == 8
    ckpt = latest_checkpoint(tmp_path / "checkpoint")
    assert ckpt is not None and ckpt.name == "ckpt-000000008.pt"
    resumed = _trainer(callbacks=[Count()])
    resumed.fit(3, 8, 2, checkpoint_every=1, result_dir=tmp_path)
    assert Count.steps == 12  # only epoch 3 ran again
    for a, b in zip(full.model.parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(a, b)
    assert (tmp_path / "model" / "model_epoch_final.pth").is_file()


def test_atomic_save_keeps_the_old_file_when_writing_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "ckpt-000000001.pt"
    atomic_save({"v": torch.ones(3)}, target)

    def boom(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        atomic_save({"v": torch.zeros(3)}, target)
    assert torch.equal(torch.load(target)["v"], torch.ones(3))
    assert [p.name for p in tmp_path.iterdir()] == [target.name]  # no temporary file left


def test_state_flatten_roundtrip_and_events_sequence(tmp_path: Path) -> None:
    t = _trainer()
    t.fit(1, 8, 2, checkpoint_every=0)
    skeleton, tensors = flatten(t.state())
    back = unflatten(skeleton, tensors)
    assert back["cursor"] == {"epoch": 1, "step": 0, "global_step": 4, "ckpt_seen": 0}
    assert all(isinstance(x, torch.Tensor) for x in tensors)
    fresh = _trainer()
    fresh.load_state(back)
    assert fresh.global_step == 4 and fresh.epoch == 1
    for a, b in zip(t.model.parameters(), fresh.model.parameters(), strict=True):
        assert torch.equal(a, b)
    log = EventLog(tmp_path, "w9")
    for i in range(5):
        log.emit("step", step=i)
    log.close()
    events = read_events(tmp_path)
    assert [e["seq"] for e in events] == [1, 2, 3, 4, 5]
    assert [e["step"] for e in events] == list(range(5))
    assert (tmp_path / "w9.log").exists()


class _Iterable(IterableDataset):
    def __iter__(self):  # type: ignore[no-untyped-def]
        yield from ()


class _Empty(Dataset):
    def __len__(self) -> int:
        return 0

    def __getitem__(self, i: int) -> int:
        raise IndexError(i)


@pytest.mark.parametrize(
    ("datasets", "fit_kw", "message"),
    [
        (lambda: ([1, 2], _data()), {}, "train_dataset is list"),
        (lambda: (_data(), _Iterable()), {}, "map-style"),
        (lambda: (_Empty(), _data()), {}, "train_dataset must not be empty"),
        (lambda: (_data(), _Empty()), {}, "test_dataset must not be empty"),
        (lambda: _data(), {}, "pair"),
        (None, {"effective_batch_size": 0}, "effective_batch_size must be an integer >= 1"),
        (None, {"max_gpus": 0}, "max_gpus must be an integer >= 1"),
        (None, {"epochs": 0}, "epochs must be an integer >= 1"),
        (None, {"micro_batch_size": 9}, r"micro_batch_size \(9\) must not exceed"),
        (None, {"micro_batch_size": 0}, "micro_batch_size must be an integer >= 1"),
        (None, {"checkpoint_every": -1}, "checkpoint_every"),
    ],
)
def test_bad_input_is_a_value_error_naming_the_argument(
    datasets: object, fit_kw: dict[str, int], message: str
) -> None:
    kw = {} if datasets is None else {"datasets": datasets}
    t = _trainer(**kw)
    before = [p.detach().clone() for p in t.model.parameters()]
    args = {"epochs": 1, "effective_batch_size": 8, "max_gpus": 2, **fit_kw}
    with pytest.raises(ValueError, match=message):
        t.fit(**args)  # type: ignore[arg-type]
    assert all(torch.equal(a, b) for a, b in zip(before, t.model.parameters(), strict=True))


def test_constructor_rejects_non_modules_and_mixed_dtypes() -> None:
    with pytest.raises(ValueError, match=r"model must be a torch\.nn\.Module"):
        Trainer("net", lambda: None, nn.functional.mse_loss, lambda p: None)  # type: ignore[arg-type]
    mixed = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2).double())
    with pytest.raises(ValueError, match="one dtype"):
        Trainer(mixed, lambda: None, nn.functional.mse_loss, lambda p: torch.optim.SGD(p, 0.1))  # type: ignore[arg-type]


def test_lr_scheduler_as_instance_class_or_factory_steps_once_per_epoch() -> None:
    from functools import partial

    from torch.optim.lr_scheduler import StepLR

    model = _linear()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for sched in (StepLR(opt, 1, gamma=0.5), partial(StepLR, step_size=1, gamma=0.5)):
        t = Trainer(
            model, lambda: (_data(30), _data(10, 1)), nn.functional.mse_loss, opt, None, sched
        )
        assert isinstance(t.lr_scheduler, StepLR)
        before = opt.param_groups[0]["lr"]
        t.fit(2, 8, 2, checkpoint_every=0)
        assert opt.param_groups[0]["lr"] == pytest.approx(before * 0.25)
