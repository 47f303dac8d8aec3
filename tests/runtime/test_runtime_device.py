"""Device and backend choice, host-tensor checkpoints, heartbeats, submission-time overrides of
fit's options, and the GPU check's answer on a machine without CUDA (CPU only: no GPU here)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections import OrderedDict
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from jupyter_edt.runtime import Trainer
from jupyter_edt.runtime.group import (
    STALE_S,
    ElasticGroup,
    GroupError,
    JobContext,
    names_gpu,
    select_backend,
    select_device,
)
from jupyter_edt.runtime.state import latest_checkpoint, to_cpu
from jupyter_edt.runtime.store_keys import heartbeat_key
from jupyter_edt.runtime.trainer import env_overrides, resolve_device


@pytest.mark.parametrize(
    ("requested", "in_job", "visible", "available", "expected"),
    [
        ("auto", True, "3", True, "cuda:0"),  # the driver's one GPU is the one visible device
        ("auto", True, "GPU-8a1b", True, "cuda:0"),
        ("auto", True, "0,1", True, "cuda:0"),
        ("auto", True, "", True, "cpu"),  # a virtual device
        ("auto", True, None, True, "cpu"),  # unset: not given a GPU
        ("auto", True, "-1", True, "cpu"),
        ("cuda", True, "", False, "cpu"),  # in a job the allocation decides
        ("cuda:2", True, "5", True, "cuda:0"),
        ("cpu", True, "0", True, "cpu"),  # ...but the code may insist on the CPU
        ("auto", False, None, True, "cuda"),
        ("auto", False, "", False, "cpu"),
        ("cuda:1", False, None, True, "cuda:1"),
        (torch.device("cpu"), False, None, True, "cpu"),
    ],
)
def test_device_follows_the_allocation_in_a_job_and_availability_elsewhere(
    requested: str, in_job: bool, visible: str | None, available: bool, expected: str
) -> None:
    got = select_device(requested, in_job=in_job, visible=visible, cuda_available=available)
    assert got == expected


def test_device_errors_name_the_problem() -> None:
    with pytest.raises(RuntimeError, match=r"CUDA_VISIBLE_DEVICES='0'.*is_available"):
        select_device("auto", in_job=True, visible="0", cuda_available=False)
    with pytest.raises(ValueError, match="CUDA is not available"):
        select_device("cuda", in_job=False, visible=None, cuda_available=False)
    for bad in ("tpu", "banana"):
        with pytest.raises(ValueError, match="device must be"):
            select_device(bad, in_job=False, visible=None, cuda_available=True)
    assert names_gpu("0") and names_gpu(" 1 ,2") and not names_gpu(" ") and not names_gpu(None)


def test_trainer_takes_the_device_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("EDT_STORE", "127.0.0.1:1")  # a job worker given a virtual device
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert resolve_device() == torch.device("cpu")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    with pytest.raises(RuntimeError, match="is_available"):
        resolve_device()
    monkeypatch.delenv("EDT_STORE")
    with pytest.raises(ValueError, match="CUDA is not available"):
        Trainer(
            nn.Linear(2, 1), lambda: None, nn.functional.mse_loss, lambda p: None, device="cuda"
        )  # type: ignore[arg-type]
    t = Trainer(nn.Linear(2, 1), lambda: None, nn.functional.mse_loss, lambda p: torch.optim.SGD(p))  # type: ignore[arg-type]
    assert t.device == torch.device("cpu")


def test_backend_is_chosen_per_device_kind_and_can_be_overridden() -> None:
    assert select_backend("cpu") == "gloo"
    assert select_backend("cuda") == "cpu:gloo,cuda:nccl"
    assert select_backend("cuda", "nccl") == "cpu:gloo,cuda:nccl"
    assert select_backend("cuda", "gloo") == "gloo"
    assert select_backend("cpu", "gloo") == "gloo"
    assert select_backend("cuda", "cpu:gloo,cuda:ucc") == "cpu:gloo,cuda:ucc"
    with pytest.raises(ValueError, match="EDT_BACKEND=nccl needs a CUDA device"):
        select_backend("cpu", "nccl")
    env = {"EDT_STORE": "h:1", "EDT_WORKER_ID": "w0"}
    assert JobContext.from_env(env).backend is None  # type: ignore[union-attr]
    assert JobContext.from_env({**env, "EDT_BACKEND": "gloo"}).backend == "gloo"  # type: ignore[union-attr]
    assert JobContext.from_env({}) is None


class _Store:
    """Heartbeat counters, as the controller's store holds them."""

    def __init__(self) -> None:
        self.values: dict[str, int] = {}

    def add(self, key: str, n: int) -> int:
        self.values[key] = self.values.get(key, 0) + n
        return self.values[key]


def test_a_peer_whose_heartbeat_stops_is_dead_after_stale_s() -> None:
    g = ElasticGroup.__new__(ElasticGroup)  # no store connection, no process group
    g.worker_id, g.members, g.store, g._beats = "w0", ("w0", "w1", "w2"), _Store(), {}
    for t in (0.0, 1.0, STALE_S + 0.5):  # w1 keeps beating, w2 goes quiet at 0
        g.store.add(heartbeat_key("w1"), 1)
        if t < STALE_S:
            g._check_peers(t)
    with pytest.raises(GroupError, match="worker w2 stopped"):
        g._check_peers(STALE_S + 0.5)
    assert heartbeat_key("w0") not in g.store.values  # it never watches itself


def _data(n: int = 24) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 3, generator=g, dtype=torch.float64)
    return TensorDataset(x, x.sum(1))


def _trainer() -> Trainer:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 1), nn.Flatten(0))
    return Trainer(
        model.double(),
        lambda: (_data(), _data(8)),
        nn.functional.mse_loss,
        lambda p: torch.optim.Adam(p, lr=0.01),
        device="cpu",
    )


def test_checkpoints_hold_host_tensors_and_load_with_a_map_location(tmp_path: Path) -> None:
    t = _trainer()
    t.fit(1, 8, 2, checkpoint_every=1, result_dir=tmp_path)
    ckpt = latest_checkpoint(tmp_path / "checkpoint")
    assert ckpt is not None
    state = torch.load(ckpt, weights_only=False)  # no map_location: as saved
    assert state["cuda_rng"] is None and state["rng"].device.type == "cpu"
    assert all(v.device.type == "cpu" for v in state["model"].values())
    mapped = torch.load(ckpt, map_location="cpu", weights_only=False)
    fresh = _trainer()
    fresh.load_state(mapped)
    assert fresh.global_step == 3
    for a, b in zip(t.model.state_dict().values(), fresh.model.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    sd = t.model.state_dict()
    assert to_cpu(sd) is sd  # nothing to move: the very object, _metadata and all
    assert isinstance(sd, OrderedDict) and hasattr(sd, "_metadata")


def test_submission_options_override_fit_arguments(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    env = {"EDT_EPOCHS": "3", "EDT_EFFECTIVE_BATCH_SIZE": "12", "EDT_CHECKPOINT_EVERY": "0"}
    values, notes = env_overrides(env, epochs=10, effective_batch_size=8, checkpoint_every=1)
    assert values == {"epochs": 3, "effective_batch_size": 12, "checkpoint_every": 0}
    assert notes[0] == "epochs=3 from EDT_EPOCHS overrides fit(epochs=10)"
    assert len(notes) == 3
    same = env_overrides(
        {"EDT_EPOCHS": "10"}, epochs=10, effective_batch_size=8, checkpoint_every=1
    )
    assert same == ({"epochs": 10, "effective_batch_size": 8, "checkpoint_every": 1}, [])
    assert env_overrides({}, epochs=2, effective_batch_size=8, checkpoint_every=1) == (
        {"epochs": 2, "effective_batch_size": 8, "checkpoint_every": 1},
        [],
    )

    monkeypatch.setenv("EDT_EPOCHS", "2")
    monkeypatch.setenv("EDT_EFFECTIVE_BATCH_SIZE", "12")
    caplog.set_level(logging.INFO, logger="jupyter_edt.runtime")
    t = _trainer()
    hist = t.fit(1, 8, 2, checkpoint_every=0)
    assert len(hist["val"]) == 2 and len(hist["train"]) == 2 * 2  # 24 samples / 12, 2 epochs
    begin = next(e for e in t.events.records if e["type"] == "train_begin")  # type: ignore[union-attr]
    assert begin["epochs"] == 2 and begin["effective_batch_size"] == 12
    assert begin["device"] == "cpu" and begin["steps_per_epoch"] == 2
    assert "epochs=2 from EDT_EPOCHS overrides fit(epochs=1)" in caplog.text
    assert "effective_batch_size=12 from EDT_EFFECTIVE_BATCH_SIZE" in caplog.text


@pytest.mark.parametrize(
    ("var", "value", "message"),
    [
        ("EDT_EPOCHS", "0", "EDT_EPOCHS must be a positive integer, got '0'"),
        ("EDT_EPOCHS", "two", "EDT_EPOCHS must be a positive integer"),
        ("EDT_EFFECTIVE_BATCH_SIZE", "2.5", "EDT_EFFECTIVE_BATCH_SIZE must be a positive"),
        ("EDT_CHECKPOINT_EVERY", "-1", r"EDT_CHECKPOINT_EVERY must be an integer >= 0"),
        ("EDT_EFFECTIVE_BATCH_SIZE", "2", r"micro_batch_size \(4\).*EDT_EFFECTIVE_BATCH_SIZE"),
    ],
)
def test_bad_submission_options_fail_at_start_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, var: str, value: str, message: str
) -> None:
    monkeypatch.setenv(var, value)
    t = _trainer()
    with pytest.raises(ValueError, match=message):
        t.fit(1, 8, 2, micro_batch_size=4)
    assert t.events is None  # failed before anything started


def test_gpu_check_without_cuda_says_so_and_passes() -> None:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # no GPU visible, even on a GPU machine
    out = subprocess.run(
        [sys.executable, "-m", "jupyter_edt.bench.gpu_check", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["cuda"] is False and result["ok"] is True and result["wall_s"] < 30
    strict = subprocess.run(
        [sys.executable, "-m", "jupyter_edt.bench.gpu_check", "--json", "--require-cuda"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert strict.returncode == 2 and json.loads(strict.stdout)["ok"] is False


@pytest.mark.parametrize(("local_rank", "expected"), [(0, "cuda:0"), (1, "cuda:1"), (3, "cuda:3")])
def test_a_worker_trains_on_its_local_ranks_gpu_among_its_nodes_visible_ones(
    local_rank: int, expected: str
) -> None:
    """The job's GPUs on a node are visible in local-rank order, as under torchrun."""
    got = select_device(
        "auto",
        in_job=True,
        visible="GPU-a,GPU-b,GPU-c,GPU-d",
        cuda_available=True,
        local_rank=local_rank,
    )
    assert got == expected
