"""FabricModel, the callbacks, fabric.zip, the metric file formats and the execs args, in one
process (and, for the GPU-count invariance, in 1 and 2 real gloo workers)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import Dataset, TensorDataset

from jupyter_edt.compat.callbacks import Callback, LoggerCallback, uses_dict_form
from jupyter_edt.compat.execargs import parse_exec_args
from jupyter_edt.compat.fabric_home import FABRIC_MODULES, ensure_fabric_home
from jupyter_edt.compat.fabric_model import FabricModel
from jupyter_edt.compat.formats import (
    elog_line,
    emetrics_line,
    emetrics_records,
    parse_elog_line,
)
from jupyter_edt.compat.notebook import notebook_program
from jupyter_edt.jobs.models import SpecError
from jupyter_edt.runtime import Trainer


@pytest.fixture(autouse=True)
def one_thread(monkeypatch, tmp_path):
    torch.set_num_threads(1)
    monkeypatch.delenv("RESULT_DIR", raising=False)
    monkeypatch.delenv("EDT_STORE", raising=False)
    monkeypatch.delenv("EDT_MAX_GPUS", raising=False)


def data(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g, dtype=torch.float64)
    return TensorDataset(x, (x[:, 0] + x[:, 1] > 0).long())


def datasets():
    return data(40, 1), data(12, 2)


def net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2)).double()


def params(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def fabric(**kw) -> FabricModel:
    model = kw.pop("model", None) or net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    return FabricModel(model, datasets, F.cross_entropy, opt, **kw)


def test_batch_size_is_per_device_at_engines_number():
    fm = fabric()
    fm.train(2, 4, 2, validation_freq=0)
    model = net()
    trainer = Trainer(
        model, datasets, F.cross_entropy, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    )
    trainer.fit(2, 8, 2, checkpoint_every=0, micro_batch_size=4, validate_every=0)
    assert torch.equal(params(fm.model), params(model))
    assert len(fm.history["train"]) == 2 * 5  # 40 samples, 8 an update


def test_getters_and_the_default_engines_number(monkeypatch):
    fm = fabric()
    assert fm.get_optimizer() is fm.optimizer and fm.get_loss_function() is F.cross_entropy
    monkeypatch.setenv("EDT_MAX_GPUS", "4")
    history = fm.train(1, 2, validation_freq=0)
    assert len(history["train"]) == 5  # a global batch of 2 x 4


def custom_step(model, data, eva, train_loader, fn_args):
    features, labels = data
    fn_args["optimizer"].zero_grad()
    output = model(features)
    loss = eva.loss_function(output, labels)
    loss.backward()
    fn_args["seen"].append((len(labels), len(train_loader)))
    return eva.accuracy(output, labels), loss.item()


def custom_test(model, test_iter, fn_args):
    total = n = 0.0
    for features, labels in test_iter:
        total += F.cross_entropy(model(features), labels, reduction="sum").item()
        n += len(labels)
    fn_args["tested"] += 1
    return total / n


def test_custom_step_and_test_hooks_train_as_the_built_in_step():
    plain = fabric()
    plain_history = plain.train(2, 3, 2)
    fm = fabric()
    fn_args = {"optimizer": fm.get_optimizer(), "seen": [], "tested": 0}
    history = fm.train(2, 3, 2, fn_args=fn_args, **{})
    fm2 = fabric(fn_step_train=custom_step, fn_test=custom_test)
    fn_args = {"optimizer": fm2.get_optimizer(), "seen": [], "tested": 0}
    hooked = fm2.train(2, 3, 2, fn_args=fn_args)
    assert torch.allclose(params(fm2.model), params(plain.model), rtol=0, atol=1e-12)
    assert torch.equal(params(fm.model), params(plain.model))
    assert history == plain_history
    steps = [s["loss"] for s in hooked["train"]]
    assert steps == pytest.approx([s["loss"] for s in plain_history["train"]], abs=1e-12)
    assert [v["val_loss"] for v in hooked["val"]] == pytest.approx(
        [v["val_loss"] for v in plain_history["val"]], abs=1e-12
    )
    # 40 samples, global batch 6 (micro 3): 7 updates an epoch, the last of 4 samples
    assert len(fn_args["seen"]) == 2 * 14 and fn_args["seen"][0] == (3, 14)
    assert fn_args["tested"] == 2 * 4  # 12 test samples in micro-batches of 3


def test_collate_hook_builds_the_batches():
    calls = []

    def collate(samples):
        calls.append(len(samples))
        return torch.stack([s[0] for s in samples]), torch.stack([s[1] for s in samples])

    fabric(fn_batch_collate=collate).train(1, 4, 1, validation_freq=0)
    assert calls == [4] * 10


class OldLogger(LoggerCallback):
    def __init__(self):
        super().__init__()
        self.calls = []

    def on_train_begin(self):
        self.calls.append(("begin", sorted(self.params), self.model is not None))

    def log_train_metrics(self, loss, acc, completed_batch, worker=0):
        self.calls.append(("train", completed_batch, worker, 0 <= acc <= 100, loss > 0))

    def log_test_metrics(self, loss, acc, completed_batch, worker=0):
        self.calls.append(("test", completed_batch, worker))

    def on_epoch_end(self, epoch, save_model=False):
        self.calls.append(("epoch_end", epoch, save_model))

    def on_train_end(self):
        self.calls.append(("end",))


class NewLogger(LoggerCallback):
    def __init__(self):
        super().__init__()
        self.calls = []

    def log_train_metrics(self, metrics, iteration, epoch, workers):
        self.calls.append(("train", sorted(metrics), iteration, epoch, workers))

    def log_test_metrics(self, metrics, iteration, epoch):
        self.calls.append(("test", sorted(metrics), iteration, epoch))


class EpochCallback(Callback):
    def __init__(self):
        super().__init__()
        self.epochs = []

    def on_epoch_begin(self, epoch):
        self.epochs.append(("begin", epoch, self.params["epochs"]))

    def on_epoch_end(self, epoch):  # the first form: no save_model
        self.epochs.append(("end", epoch))


def test_both_logger_forms_and_user_callbacks(tmp_path, monkeypatch):
    monkeypatch.setenv("RESULT_DIR", str(tmp_path))
    old, new, user = OldLogger(), NewLogger(), EpochCallback()
    fm = fabric(driver_logger=old, worker_logger_callback=new, user_callback=[user])
    fm.train(2, 10, 2, checkpoint_freq=2)
    train = [c for c in old.calls if c[0] == "train"]
    assert old.calls[0] == ("begin", ["epochs", "optimizer"], True)
    assert [c[1] for c in train] == [1, 2, 3, 4] and all(c[2:] == (0, True, True) for c in train)
    assert [c for c in old.calls if c[0] in ("test", "epoch_end", "end")] == [
        ("test", 2, 0),
        ("epoch_end", 0, False),
        ("test", 4, 0),
        ("epoch_end", 1, True),
        ("end",),
    ]
    assert new.calls[0] == ("train", ["accuracy", "loss"], 1, 0, 1)
    assert new.calls[2] == ("test", ["accuracy", "loss"], 2, 0)
    assert user.epochs == [("begin", 0, 2), ("end", 0), ("begin", 1, 2), ("end", 1)]
    assert uses_dict_form(new.log_train_metrics) and not uses_dict_form(old.log_train_metrics)
    names = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()}
    assert {
        "model/train/model_epoch_2.pth",
        "model/train/model_epoch_2_optimizer_state.pth",
        "model/model_epoch_final.pth",
    } <= names
    assert "model/train/model_epoch_1.pth" not in names
    assert any(n.startswith("checkpoint/") for n in names)
    saved = torch.load(tmp_path / "model/train/model_epoch_2.pth", weights_only=True)
    assert torch.equal(torch.cat([t.reshape(-1) for t in saved.values()]), params(fm.model))


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"model": "nope"}, "model must be a torch.nn.Module"),
        ({"datasets_function": 3}, "datasets_function must be a function"),
        ({"loss_function": None}, "loss_function must be callable"),
        ({"optimizer": "sgd"}, "optimizer must be a torch.optim.Optimizer"),
        ({"metrics": "accuracy"}, "metrics must be a list"),
        ({"metrics": ["f1"]}, "unknown metric name 'f1'"),
        ({"driver_logger": object()}, "driver_logger must be a callbacks object"),
        ({"worker_logger": [OldLogger(), 3]}, "worker_logger must be"),
        ({"user_callback": print}, "user_callback must be"),
        ({"fn_step_train": 1}, "fn_step_train must be a function"),
        ({"fn_test": "x"}, "fn_test must be a function"),
        ({"fn_batch_collate": 2}, "fn_batch_collate must be a function"),
        ({"enable_onnx": "yes"}, "enable_onnx must be True or False"),
        ({"lr_scheduler_interval": "batch"}, "lr_scheduler_interval must be 'epoch' or 'step'"),
        ({"lr_scheduler": 5}, "lr_scheduler must be a torch"),
        (
            {"lr_scheduler": StepLR(torch.optim.SGD(net().parameters(), lr=0.1), 1)},
            "lr_scheduler schedules another optimizer",
        ),
    ],
)
def test_bad_constructor_arguments_are_named(kwargs, words):
    model = net()
    args = {
        "model": model,
        "datasets_function": datasets,
        "loss_function": F.cross_entropy,
        "optimizer": torch.optim.SGD(model.parameters(), lr=0.1),
        **kwargs,
    }
    with pytest.raises(ValueError, match=words):
        FabricModel(**args)


@pytest.mark.parametrize(
    ("args", "kwargs", "words"),
    [
        ((0, 4), {}, "epoch_number must be an integer >= 1"),
        ((1, 0), {}, "batch_size must be an integer >= 1"),
        ((1, 4, 0), {}, "engines_number must be an integer >= 1"),
        ((1, 4.0), {}, "batch_size"),
        ((1, 4, 1), {"num_dataloader_threads": -1}, "num_dataloader_threads"),
        ((1, 4, 1), {"validation_freq": True}, "validation_freq"),
        ((1, 4, 1), {"checkpoint_freq": -2}, "checkpoint_freq"),
        ((1, 4, 1), {"scaleup_function": 5}, "scaleup_function must be a function"),
    ],
)
def test_bad_train_arguments_are_named(args, kwargs, words):
    with pytest.raises(ValueError, match=words):
        fabric().train(*args, **kwargs)


def test_datasets_function_errors_name_the_problem():
    model = net()

    class NoLen(Dataset):
        def __getitem__(self, i):
            return i

    fm = FabricModel(
        model, lambda: (NoLen(), data(4, 1)), F.cross_entropy, torch.optim.SGD(model.parameters())
    )
    with pytest.raises(ValueError, match="train_dataset must define __len__"):
        fm.train(1, 2, 1)


def test_download_without_a_job_says_why(tmp_path):
    with pytest.raises(ValueError, match="download\\(\\) needs a job"):
        fabric().download(tmp_path)


def test_fabric_zip_offers_the_wmla_import_names(tmp_path):
    home = ensure_fabric_home(tmp_path / "fabric")
    zip_path = home / "libs" / "fabric.zip"
    before = zip_path.stat().st_mtime_ns
    assert ensure_fabric_home(home) == home and zip_path.stat().st_mtime_ns == before
    assert set(FABRIC_MODULES) == {
        "fabric_model.py",
        "callbacks.py",
        "pyedt/__init__.py",
        "pyedt/fabric_model.py",
        "pyedt/callbacks.py",
    }
    code = textwrap.dedent(
        f"""
        import os, sys
        sys.path.insert(0, os.path.join({str(home)!r}, "libs", "fabric.zip"))
        from fabric_model import FabricModel
        from pyedt.fabric_model import FabricModel as Newer
        from callbacks import Callback, LoggerCallback
        from pyedt.callbacks import LoggerCallback as NewerLogger
        import jupyter_edt.compat.fabric_model as real, jupyter_edt.compat.callbacks as cb
        assert FabricModel is Newer is real.FabricModel
        assert LoggerCallback is NewerLogger is cb.LoggerCallback and Callback is cb.Callback
        print("imported from", sys.modules["fabric_model"].__file__)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "fabric.zip" in out.stdout


def test_emetrics_lines_become_metric_records():
    line = emetrics_line(
        "job1", "train", 7, {"loss": 0.5, "accuracy": 0.75, "note": "x"}, rindex=3, now_ms=1500
    )
    data = json.loads(line)
    assert data["etimes"]["iteration"] == {"type": 2, "value": "7"}
    assert data["values"]["loss"] == {"type": 3, "value": "0.5"}
    assert data["values"]["note"] == {"value": "x"}
    records = emetrics_records([line, "", "not json", '{"meta": {}}', line.encode()])
    assert records[0] == {
        "type": "emetrics",
        "group": "train",
        "time": 1.5,
        "rindex": 3,
        "iteration": 7,
        "loss": 0.5,
        "accuracy": 0.75,
        "note": "x",
    }
    assert len(records) == 2  # the bad lines are skipped


def test_elog_lines_round_trip():
    train = elog_line("Train", loss=0.25, accuracy=0.5, global_steps=3, iteration=2, now=1.0)
    assert train.split("] ", 1)[1] == (
        "Train,\tTimestamp: 1000,\tGlobal steps: 3,\tIteration: 2,\tLoss: 0.25000,"
        "\tAccuracy: 0.50000"
    )
    assert parse_elog_line(train) == {
        "date": train[1:20],
        "title": "Train",
        "timestamp": 1000,
        "global_steps": 3,
        "iteration": 2,
        "loss": 0.25,
        "accuracy": 0.5,
    }
    test = parse_elog_line(elog_line("Test", loss=1.0, accuracy=0.0, now=2.0))
    assert test is not None and test["title"] == "Test" and "iteration" not in test
    assert parse_elog_line("an ordinary print") is None
    assert (
        parse_elog_line("[2020-01-01 00:00:00] Train,\tLoss: x,\tAccuracy: 1,\tTimestamp: 1")
        is None
    )


def test_exec_args_split_platform_and_program_options():
    args = parse_exec_args(
        "--exec-start edtPyTorch --model-dir ./mnist/ --model-main main.py "
        "--cs-datastore-meta type=fs,data_path=/data/mnist --numWorker 2 --gpuPerWorker 1 "
        "--epochs 15 --debug-level=debug --lr '0.1'"
    )
    assert args.model_dir == "mnist" and args.model_main == "main.py"
    assert args.data_path == "/data/mnist" and args.max_workers == 2
    assert args.program_args == ("--numWorker", "2", "--epochs", "15", "--lr", "0.1")
    both = parse_exec_args(
        "--exec-start edtPyTorch --model-main m.py --edt-options maxWorkers=4,minWorkers=2 "
        "--numWorker 1"
    )
    assert (both.max_workers, both.min_workers, both.model_dir) == (4, 2, None)
    with pytest.raises(SpecError, match="--model-dir is given twice") as info:
        parse_exec_args("--exec-start edtPyTorch --model-main m.py --model-dir a --model-dir b")
    assert info.value.field == "args"
    with pytest.raises(SpecError, match="minWorkers \\(3\\) must not exceed maxWorkers \\(2\\)"):
        parse_exec_args(
            "--exec-start edtPyTorch --model-main m.py --edt-options minWorkers=3 --numWorker 2"
        )
    with pytest.raises(SpecError, match="--model-main needs a value"):
        parse_exec_args("--exec-start edtPyTorch --model-main")


def test_notebook_program_drops_magics():
    cells = ["%load_ext x\nimport os", "%%time\nslow()", "!ls\nx = 1\n  %time y = 2"]
    assert notebook_program(cells) == "import os\n\nx = 1\n"


PROGRAM = """
import sys
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset
from jupyter_edt.compat.fabric_model import FabricModel

def data(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g, dtype=torch.float64)
    return TensorDataset(x, (x[:, 0] + x[:, 1] > 0).long())

def step(model, data, eva, train_loader, fn_args):
    model.zero_grad()
    out = model(data[0])
    loss = F.cross_entropy(out, data[1])
    loss.backward()
    return eva.accuracy(out, data[1]), loss.item()

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2)).double()
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
fm = FabricModel(model, lambda: (data(40, 1), data(12, 2)), F.cross_entropy, opt,
                 fn_step_train=step if sys.argv[1] == "hook" else None)
fm.train(2, 2, 4, checkpoint_freq=2)
"""


@pytest.mark.parametrize("kind", ["builtin", "hook"])
def test_the_result_does_not_depend_on_the_worker_count(tmp_path, kind, warm_launcher):
    """The same FabricModel program on 1 and on 2 gloo workers ends with the same bits."""
    from jupyter_edt.runtime.control import LocalController

    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    finals = []
    for workers in (1, 2):
        result = tmp_path / f"result{workers}"
        with LocalController(
            [str(program), kind], result, timeout_s=10, launcher=warm_launcher()
        ) as ctl:
            ctl.start(workers)
            codes = ctl.wait(timeout_s=240)
        assert set(codes.values()) == {0}, (result / "logs").glob("*.out")
        finals.append(torch.load(result / "model" / "model_epoch_final.pth", weights_only=True))
        assert (result / "model" / "train" / "model_epoch_2_optimizer_state.pth").is_file()
    assert finals[0].keys() == finals[1].keys()
    assert all(torch.equal(finals[0][k], finals[1][k]) for k in finals[0])


class Decay(Callback):
    """WMLA's way to a learning-rate schedule: a scheduler in a user callback (rank 0 only)."""

    def on_train_begin(self):
        self.scheduler = StepLR(self.params["optimizer"], 1, gamma=0.5)

    def on_epoch_end(self, epoch, save_model=False):
        self.scheduler.step()


def test_lr_scheduler_argument_steps_per_epoch_or_per_step():
    by_callback = fabric(user_callback=Decay())
    by_callback.train(3, 4, 2, validation_freq=0)
    model = net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    fm = FabricModel(model, datasets, F.cross_entropy, opt, lr_scheduler=StepLR(opt, 1, gamma=0.5))
    fm.train(3, 4, 2, validation_freq=0)
    assert torch.equal(params(fm.model), params(by_callback.model))
    assert opt.param_groups[0]["lr"] == 0.1 * 0.5**3
    model = net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    per_step = FabricModel(
        model,
        datasets,
        F.cross_entropy,
        opt,
        lr_scheduler=lambda o: StepLR(o, 3, gamma=0.5),
        lr_scheduler_interval="step",
    )
    per_step.train(2, 4, 2, validation_freq=0)  # 5 steps an epoch
    assert opt.param_groups[0]["lr"] == 0.1 * 0.5 ** (10 // 3)


SCHEDULED = """
import sys
import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import TensorDataset
from jupyter_edt.compat.callbacks import Callback
from jupyter_edt.compat.fabric_model import FabricModel

torch.set_num_threads(1)  # the plain run computes as a worker does

def data(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g, dtype=torch.float64)
    return TensorDataset(x, (x[:, 0] + x[:, 1] > 0).long())

class Decay(Callback):
    def on_train_begin(self):
        self.scheduler = StepLR(self.params["optimizer"], 1, gamma=0.5)

    def on_epoch_end(self, epoch, save_model=False):
        self.scheduler.step()

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2)).double()
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
if sys.argv[1] == "callback":
    kw = {"user_callback": Decay()}
else:
    kw = {"lr_scheduler": StepLR(opt, 3, gamma=0.5), "lr_scheduler_interval": "step"}
fm = FabricModel(model, lambda: (data(40, 1), data(12, 2)), F.cross_entropy, opt, **kw)
fm.train(3, 2, 4)
"""


def _final_model(result_dir):
    return torch.load(result_dir / "model" / "model_epoch_final.pth", weights_only=True)


@pytest.fixture(scope="module")
def scheduled(tmp_path_factory):
    """The scheduled program, and a function giving its final model in one plain process per
    way of scheduling (run when first asked for)."""
    base = tmp_path_factory.mktemp("scheduled")
    program = base / "program.py"
    program.write_text(SCHEDULED)
    finals = {}

    def plain(mode):
        if mode not in finals:
            out = base / mode
            env = {k: v for k, v in os.environ.items() if not k.startswith("EDT_")}
            env.update(RESULT_DIR=str(out), CUDA_VISIBLE_DEVICES="")
            done = subprocess.run(
                [sys.executable, str(program), mode], env=env, capture_output=True, timeout=240
            )
            assert done.returncode == 0, done.stderr.decode()[-2000:]
            finals[mode] = _final_model(out)
        return finals[mode]

    return program, plain


def _equals_plain_run(scheduled, result_dir, mode, workers, launcher):
    """Run the scheduled program on ``workers`` gloo workers (``"grow"``: 1, then 2 from step
    3, in the first epoch); whether its final model is the plain process's, bit for bit."""
    from jupyter_edt.runtime.control import LocalController

    program, plain = scheduled
    with LocalController([str(program), mode], result_dir, timeout_s=10, launcher=launcher) as ctl:
        if workers == "grow":
            ctl.hold(3)
            ctl.start(1)
            ctl.wait_held(3)
            gen = ctl.scale(2, wait=False)
            ctl.release(3)
            grown = ctl.wait_formed(gen)
            assert grown["world_size"] == 2 and grown["receivers"] == [1]
        else:
            ctl.start(workers)
        codes = ctl.wait(timeout_s=240)
    assert set(codes.values()) == {0}, list((result_dir / "logs").glob("*.out"))
    final, want = _final_model(result_dir), plain(mode)
    assert final.keys() == want.keys()
    return all(torch.equal(final[k], want[k]) for k in want)


def test_a_step_lr_in_user_callback_gives_the_plain_run_on_1_and_2_workers(
    scheduled, tmp_path, warm_launcher
):
    """``user_callback`` runs on rank 0 alone; its scheduler's lr reaches the other worker."""
    assert _equals_plain_run(scheduled, tmp_path / "one", "callback", 1, warm_launcher())
    assert _equals_plain_run(scheduled, tmp_path / "two", "callback", 2, warm_launcher())


def test_a_step_lr_in_user_callback_gives_the_plain_run_through_a_grow(
    scheduled, tmp_path, warm_launcher
):
    assert _equals_plain_run(scheduled, tmp_path, "callback", "grow", warm_launcher())


def test_an_lr_scheduler_stepped_per_step_moves_to_the_joiner_of_a_grow(
    scheduled, tmp_path, warm_launcher
):
    """On every worker; the joiner's scheduler continues from the sender's state."""
    assert _equals_plain_run(scheduled, tmp_path, "step", "grow", warm_launcher())


def test_the_server_reads_emetrics_files_into_metric_records(tmp_path):
    from jupyter_edt.compat.plugin import WMLAPlugin
    from jupyter_edt.jobs.metrics import JobMetricsTail
    from jupyter_edt.runtime.jobdir import JobDir

    d = JobDir(tmp_path / "job")
    d.create()
    tail = JobMetricsTail(d.root, d.logs, [WMLAPlugin(tmp_path / "fabric")])
    wmla_file = d.result / "log" / "w0" / "evaluation-metrics.txt"  # an exec's process
    wmla_file.parent.mkdir(parents=True)
    native_file = d.logs / "evaluation-metrics.txt"  # a native job's shared LOG_DIR
    line = emetrics_line("j", "test", 3, {"loss": 0.5}, rindex=1, now_ms=2000)
    wmla_file.write_text(line + "\n" + line[:20])  # the second line is still being written
    native_file.write_text(line.replace('"test"', '"train"') + "\n")
    (d.logs / "events-w0.jsonl").write_text(
        json.dumps({"seq": 1, "time": 1.0, "type": "step", "rank": 0, "loss": 1.0}) + "\n"
    )
    first = tail.read_new()
    assert [(r["type"], r.get("group")) for r in first] == [
        ("step", None),
        ("emetrics", "train"),  # files in path order, lines in file order
        ("emetrics", "test"),
    ]
    assert tail.read_new() == []
    with wmla_file.open("a") as f:
        f.write(line[20:] + "\n")
    again = tail.read_new()
    assert [(r["group"], r["iteration"], r["loss"]) for r in again] == [("test", 3, 0.5)]
