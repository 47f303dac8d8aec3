"""One source of truth for the optimizer's hyperparameters (``runtime/hyper.py``): the rule on
its own, the trainer's scheduler options, and real gloo workers whose callbacks change
hyperparameters on some ranks only."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from jupyter_edt.runtime import LocalController, Trainer, hyper
from jupyter_edt.runtime import partition as part

PROGRAM = Path(__file__).parent / "programs" / "tiny.py"
N_TRAIN, BATCH, EPOCHS = 56, 12, 3
ARGS = ["--epochs", str(EPOCHS), "--batch", str(BATCH), "--micro", "3", "--checkpoint-every", "0"]
CPU = {"CUDA_VISIBLE_DEVICES": "", "EDT_BUCKET_BYTES": "256"}


def _sgd(**kw: Any) -> torch.optim.Optimizer:
    return torch.optim.SGD([nn.Parameter(torch.zeros(2))], lr=0.1, momentum=0.5, **kw)


def _set(opt: torch.optim.Optimizer, **values: Any) -> hyper.Snapshot:
    opt.param_groups[0].update(values)
    return hyper.snapshot(opt)


def test_a_change_on_one_rank_reaches_the_others() -> None:
    agreed = hyper.snapshot(_sgd())
    rank0, rank1 = _sgd(), _sgd()
    now0 = _set(rank0, lr=0.05, initial_lr=0.1)  # a scheduler made on rank 0 adds initial_lr
    now1 = _set(rank1, momentum=0.9)  # and rank 1 changed something else
    new = hyper.agree(agreed, [[now0], [now1]])
    assert hyper.apply(rank1, new) == [
        "param_groups[0]['initial_lr'] = 0.1",
        "param_groups[0]['lr'] = 0.05",
    ]
    assert hyper.apply(rank0, new) == ["param_groups[0]['momentum'] = 0.9"]
    assert hyper.snapshot(rank0) == hyper.snapshot(rank1) == new
    assert hyper.fingerprint(new) == hyper.fingerprint(hyper.snapshot(rank1)) < 2**53
    assert hyper.fingerprint(new) != hyper.fingerprint(agreed)


def test_a_scheduler_on_every_rank_then_a_change_on_rank_0_ends_with_rank_0s_value() -> None:
    """Rank 0 runs every piece of code one process would run: its trace extends the others'."""
    agreed = hyper.snapshot(_sgd())
    opt = _sgd()
    stepped = _set(opt, lr=0.09)
    halved = _set(opt, lr=0.045)
    assert hyper.agree(agreed, [[stepped, halved], [stepped], [stepped, stepped]]) == halved
    # a change made and undone is no change
    assert hyper.agree(agreed, [[stepped, agreed], [agreed]]) == agreed


@pytest.mark.parametrize(
    ("traces", "words"),
    [
        (
            [[0.05], [0.02]],
            r"param_groups\[0\]\['lr'\]: 0.05 on rank 0, 0.02 on rank 1 \(was 0.1\)",
        ),
        ([[0.09, 0.045], [0.09, 0.02]], "0.09 then 0.045 on rank 0, 0.09 then 0.02 on rank 1"),
        ([[0.05, 0.045], [0.09]], "0.05 then 0.045 on rank 0, 0.09 on rank 1"),
    ],
)
def test_changes_that_do_not_extend_each_other_raise_naming_value_and_ranks(
    traces: list[list[float]], words: str
) -> None:
    agreed = hyper.snapshot(_sgd())
    opt = _sgd()
    snaps = [[_set(opt, lr=lr) for lr in trace] for trace in traces]
    with pytest.raises(hyper.HyperparameterConflict, match=words):
        hyper.agree(agreed, snaps)


def test_param_groups_must_be_as_many_on_every_rank() -> None:
    one, two = _sgd(), _sgd()
    two.add_param_group({"params": [nn.Parameter(torch.zeros(1))], "lr": 0.2})
    with pytest.raises(hyper.HyperparameterConflict, match="1 on rank 0, 2 on rank 1"):
        hyper.agree(hyper.snapshot(one), [[hyper.snapshot(one)], [hyper.snapshot(two)]])


def test_tuples_tensors_and_removed_keys_are_agreed_other_objects_left_alone() -> None:
    def adam() -> torch.optim.Optimizer:
        opt = torch.optim.Adam([nn.Parameter(torch.zeros(2))], lr=torch.tensor(0.01))
        opt.param_groups[0]["note"] = object()  # not comparable between processes
        return opt

    agreed = hyper.snapshot(adam())
    assert "note" not in dict(agreed[0])
    changer, other = adam(), adam()
    group = changer.param_groups[0]
    group["lr"].fill_(0.005)
    group["betas"] = (0.8, 0.99)
    del group["amsgrad"]
    lr_tensor = other.param_groups[0]["lr"]
    new = hyper.agree(agreed, [[hyper.snapshot(changer)], [hyper.snapshot(other)]])
    hyper.apply(other, new)
    g = other.param_groups[0]
    assert g["lr"] is lr_tensor and float(lr_tensor) == pytest.approx(0.005)  # kept in place
    assert g["betas"] == (0.8, 0.99) and "amsgrad" not in g
    assert hyper.snapshot(other) == hyper.snapshot(changer)


def test_the_tracker_reads_a_group_again_only_when_it_may_have_changed() -> None:
    opt = torch.optim.Adam(
        [{"params": [nn.Parameter(torch.zeros(2))]}, {"params": [nn.Parameter(torch.zeros(1))]}],
        lr=0.01,
    )
    tracker = hyper.Tracker(opt)
    first = tracker.snapshot()
    assert tracker.snapshot() is first and tracker.fingerprint() == hyper.fingerprint(first)
    opt.param_groups[1]["lr"] = 0.02  # rebinding a value
    assert dict(tracker.snapshot()[1])["lr"] == 0.02
    assert tracker.fingerprint() == hyper.fingerprint(hyper.snapshot(opt))
    opt.param_groups[0]["lr"] = torch.tensor(0.01)  # a mutable value: always read again
    opt.param_groups[0]["lr"].fill_(0.03)
    assert tracker.snapshot() == hyper.snapshot(opt)
    assert dict(tracker.snapshot()[0])["lr"] == (
        hyper.TENSOR,
        "float32",
        (),
        (pytest.approx(0.03),),
    )
    opt.add_param_group({"params": [nn.Parameter(torch.zeros(1))], "lr": 0.5})
    assert len(tracker.snapshot()) == 3


def _linear() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 1), nn.Flatten(0)).double()


def _datasets():  # type: ignore[no-untyped-def]
    g = torch.Generator().manual_seed(0)
    x = torch.randn(30, 4, generator=g, dtype=torch.float64)
    ds = torch.utils.data.TensorDataset(x, x.sum(1))
    return ds, ds


def test_a_scheduler_steps_per_optimizer_step_when_asked() -> None:
    from torch.optim.lr_scheduler import StepLR

    model = _linear()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    t = Trainer(
        model,
        _datasets,
        nn.functional.mse_loss,
        opt,
        lr_scheduler=StepLR(opt, 2, gamma=0.5),
        lr_scheduler_interval="step",
        device="cpu",
    )
    t.fit(2, 8, 2, checkpoint_every=0)  # 4 steps an epoch
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1 * 0.5**4)
    assert t.state()["lr_scheduler"]["last_epoch"] == 8


def test_bad_scheduler_arguments_are_value_errors_naming_them() -> None:
    from torch.optim.lr_scheduler import ReduceLROnPlateau, StepLR

    model = _linear()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def make(**kw: Any) -> Trainer:
        return Trainer(model, _datasets, nn.functional.mse_loss, opt, device="cpu", **kw)

    with pytest.raises(ValueError, match="lr_scheduler_interval must be 'epoch' or 'step'"):
        make(lr_scheduler_interval="batch")
    other = torch.optim.SGD(_linear().parameters(), lr=0.1)
    with pytest.raises(ValueError, match="lr_scheduler schedules another optimizer"):
        make(lr_scheduler=StepLR(other, 1))
    with pytest.raises(ValueError, match="lr_scheduler: ReduceLROnPlateau needs a metric"):
        make(lr_scheduler=ReduceLROnPlateau(opt))
    with pytest.raises(ValueError, match=r"lr_scheduler must be a torch\.optim\.lr_scheduler"):
        make(lr_scheduler=3)


def _final(result_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(result_dir / "model" / "model_epoch_final.pth")


def _tiny():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("tiny_program", PROGRAM)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _plain(**options: bool) -> Trainer:
    """The tiny program in this process, computing as a worker does."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        plain = _tiny().build(device="cpu", **options)
        plain.fit(EPOCHS, BATCH, 4, checkpoint_every=0, micro_batch_size=3)
    finally:
        torch.set_num_threads(threads)
    return plain


def test_changes_on_some_workers_reach_all_and_equal_one_process(
    tmp_path: Path, warm_launcher
) -> None:
    """Rank 0 halves lr after a per-epoch scheduler step on every worker; the last rank changes
    betas and weight decay before a step in which it has no micro-batch. On 4 workers the result
    is the plain process's, where one rank makes every change."""
    plain = _plain(tweak=True)
    lr = plain.optimizer.param_groups[0]["lr"]
    assert lr == pytest.approx(0.01 * (0.9 * 0.5) ** EPOCHS)
    with LocalController(
        [str(PROGRAM), *ARGS, "--tweak"], tmp_path, env=CPU, launcher=warm_launcher()
    ) as ctl:
        ctl.start(4)
        assert set(ctl.wait(180).values()) == {0}
        events = ctl.events()
    final = _final(tmp_path)
    want = plain.model.state_dict()
    assert all(torch.equal(final[k], want[k]) for k in want)
    steps = part.steps_per_epoch(N_TRAIN, BATCH)
    adopted = {
        (e["worker"], e["global_step"], tuple(e["changed"]))
        for e in events
        if e["type"] == "hyperparameters"
    }
    lr_from_rank_0 = {(w, g) for w, g, c in adopted if any("'lr'" in x for x in c)}
    betas_from_rank_3 = {(w, g) for w, g, c in adopted if any("'betas'" in x for x in c)}
    assert lr_from_rank_0 == {(w, e * steps) for w in ("w1", "w2", "w3") for e in (1, 2)}
    assert betas_from_rank_3 == {(w, e * steps + 4) for w in ("w0", "w1", "w2") for e in (0, 1, 2)}


def test_joiners_take_the_job_s_hyperparameters_and_pending_changes(
    tmp_path: Path, warm_launcher
) -> None:
    """A grow 1 -> 3 in epoch 1: the joiners' own ``on_train_begin`` (which sets the starting
    lr) changes nothing, they continue the scheduler, and the changes on rank 0 and on the last
    rank go on reaching everyone."""
    plain = _plain(tweak=True, begin_lr=True)
    assert plain.optimizer.param_groups[0]["lr"] == pytest.approx(0.02 * (0.9 * 0.5) ** EPOCHS)
    args = [str(PROGRAM), *ARGS, "--tweak", "--begin-lr"]
    with LocalController(args, tmp_path, env=CPU, launcher=warm_launcher()) as ctl:
        ctl.hold(7)
        ctl.start(1)
        ctl.wait_held(7)
        gen = ctl.scale(3, wait=False)
        ctl.release(7)
        grown = ctl.wait_formed(gen)
        assert grown["receivers"] == [1, 2] and grown["global_step"] == 8
        assert set(ctl.wait(180).values()) == {0}
    final, want = _final(tmp_path), plain.model.state_dict()
    assert all(torch.equal(final[k], want[k]) for k in want)


def test_conflicting_changes_stop_every_worker_with_the_values_and_ranks(
    tmp_path: Path, warm_launcher
) -> None:
    args = [str(PROGRAM), *ARGS, "--conflict"]
    with LocalController(args, tmp_path, env=CPU, launcher=warm_launcher()) as ctl:
        ctl.start(2)
        codes = ctl.wait(180)
        events = ctl.events()
    assert set(codes) == {"w0", "w1"} and 0 not in codes.values()
    errors = [e for e in events if e["type"] == "hyperparameter_conflict"]
    assert sorted(e["worker"] for e in errors) == ["w0", "w1"]
    message = errors[0]["error"]  # the per-epoch scheduler stepped on both before
    assert "param_groups[0]['lr']: " in message and "(was 0.01)" in message
    assert "then 0.001 on rank 0, " in message and "then 0.002 on rank 1" in message
    for w in ("w0", "w1"):
        assert "HyperparameterConflict" in (tmp_path / "logs" / f"{w}.out").read_text()
