"""scripts/gpu-check.sh, the GPU check of issue 23: its dry run (every part on the CPU at its
smallest size) writes each part's JSON and the summary in the shapes a GPU run writes them; its
helper records failures and timeouts; the NVML part's logic, on a fake NVML and a fake load."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from jupyter_edt.bench import gpu_check
from jupyter_edt.bench.latency import FIGURES

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu-check.sh"
PARTS = [
    "nvml",
    "gpu_check",
    "runtime_w2",
    "runtime_w4",
    "runtime_w8",
    "models",
    "server_env",
    "latency",
    "restart",
]
RECORD_KEYS = {"part", "status", "exit_code", "duration_s", "limit_s", "command", "result"}
DRY_RUN_BUDGET_S = 400  # the script's own cap, inside this test's timeout


def _present(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, Path]:
    """One dry run for the module's tests; this venv's python is the script's python3."""
    out = tmp_path_factory.mktemp("gpu-check") / "out"
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHON": sys.executable,
    }
    done = subprocess.run(
        ["bash", str(SCRIPT), "--dry-run", "--out", str(out), "--budget", str(DRY_RUN_BUDGET_S)],
        capture_output=True,
        text=True,
        timeout=DRY_RUN_BUDGET_S + 60,
        env=env,
        cwd=ROOT,
    )
    return done, out


def _said(done: subprocess.CompletedProcess, out: Path) -> str:
    """What the script printed, then what each failed part printed (its record's tails): the
    reason a red run gives, where its files go with its machine."""
    said = [done.stdout, done.stderr]
    for path in sorted(out.glob("*.json")):
        record = json.loads(path.read_text())
        if record.get("status") in ("failed", "timeout"):
            for tail in ("stdout_tail", "stderr_tail"):
                said.append(f"--- {path.stem}'s {tail}:\n{record.get(tail)}")
    return "\n".join(said)


@pytest.mark.timeout(DRY_RUN_BUDGET_S + 90)
def test_dry_run_writes_every_part_and_a_summary_of_them(dry_run) -> None:
    done, out = dry_run
    assert done.returncode == 0, _said(done, out)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["mode"] == "dry-run" and summary["ok"] is True and summary["failed"] == []
    assert list(summary["parts"]) == PARTS == list(summary["records"])
    assert _number(summary["wall_s"]) and summary["wall_s"] < DRY_RUN_BUDGET_S
    assert summary["machine"]["cpus"] >= 1
    parts = {}
    for name in PARTS:
        record = json.loads((out / f"{name}.json").read_text())
        assert record.keys() >= RECORD_KEYS, (name, record)
        assert record["part"] == name and summary["records"][name] == record
        assert _number(record["duration_s"]) and record["duration_s"] >= 0, record
        assert summary["parts"][name]["status"] == record["status"]
        assert summary["parts"][name]["duration_s"] == record["duration_s"]
        if record["status"] != "skipped":
            assert record["exit_code"] == 0 and _number(record["limit_s"]), record
            assert isinstance(record["result"], dict), record
            assert (out / "logs" / f"{name}.out").exists()
        parts[name] = record

    nvml = parts["nvml"]  # a CPU machine has no NVML; one with NVML reads it (no load)
    assert nvml["status"] in ("no_nvml", "ok"), nvml
    if nvml["status"] == "no_nvml":
        assert nvml["result"]["nvml"] is False and nvml["result"]["reason"], nvml
    else:
        assert nvml["result"]["checks"]["found_gpu"] is True, nvml

    check = parts["gpu_check"]  # CUDA is hidden in a dry run, and --require-cuda is off
    assert check["status"] == "ok" and check["result"]["cuda"] is False
    assert check["result"]["ok"] is True and "--require-cuda" not in check["command"]

    runtime = parts["runtime_w2"]
    assert runtime["status"] == "ok", runtime
    figures = runtime["result"]
    assert figures["world_size"] == 2 and figures["samples_per_step"] == 64
    for key in ("overhead_ratio", "grow_pause_s", "shrink_pause_s", "recovery_s"):
        assert _number(figures[key]) and 0 < figures[key] < 60, (key, figures)
    assert figures["equivalence_max_abs_diff"] == 0.0
    for n in (4, 8):
        assert parts[f"runtime_w{n}"]["status"] == "skipped"
        assert "world size 2 only" in parts[f"runtime_w{n}"]["reason"]

    for name, module in (("models", "models"), ("restart", "restart")):
        if _present(f"jupyter_edt.bench.{module}"):
            assert parts[name]["status"] == "ok", parts[name]
        else:
            assert parts[name]["status"] == "skipped", parts[name]
            assert parts[name]["reason"].startswith("not present"), parts[name]

    env = parts["server_env"]  # this venv has the Jupyter-side packages
    assert env["status"] == "ok" and env["result"]["from"] == "present", env


def _part(dry_run, name: str) -> dict[str, Any]:
    """One part's record of the module's dry run, which ran it."""
    done, out = dry_run
    assert done.returncode == 0, _said(done, out)
    record = json.loads((out / f"{name}.json").read_text())
    assert record["status"] == "ok", record
    return record


def test_the_latency_part_gives_each_figure_of_one_warm_round(dry_run) -> None:
    """bench.latency --quick, as its own smoke test (the dry run is its one run in the suite)."""
    latency = _part(dry_run, "latency")["result"]
    assert latency["reps"] == 1
    for figure in FIGURES:
        value = latency[f"warm_{figure}"]
        assert _number(value) and 0 < value < 120, (figure, latency)
        assert latency[f"warm_{figure}_values"] == [value]


def test_the_restart_part_resizes_a_trainer_without_losing_a_step(dry_run) -> None:
    """bench.restart --quick: one warm run of its Hugging Face restart job through 4 -> 2 -> 4
    on a real service (no torchrun), judged by what must hold whatever the machine's speed: no
    step lost or repeated, the same global batch at every size, SUCCEEDED."""
    result = _part(dry_run, "restart")["result"]
    for figure in ("warm_shrink_decision_to_first_step_s", "warm_grow_decision_to_first_step_s"):
        assert isinstance(result[figure], float) and result[figure] > 0, (figure, result)
    assert (result["steps_lost"], result["steps_repeated"]) == (0, 0), result
    assert result["succeeded"] is True, result
    assert result["global_batch_constant"] is True, result
    assert result["target"] == {"decision_to_first_step_warm_s": 3.0}
    assert isinstance(result["target_met"], bool)
    assert "cold" not in result and "torchrun" not in result

    warm = result["warm"]
    assert warm["state"] == "SUCCEEDED"
    assert warm["step_file_agrees"] is True
    # every step from 0 to the last, at 4, then 2, then 4 workers
    assert [run[0] for run in warm["runs"]] == [4, 2, 4]
    assert warm["runs"][0][1] == 0 and warm["runs"][-1][2] == warm["steps"] - 1
    batches = warm["global_batch"]
    assert [(b["world_size"], b["gradient_accumulation_steps"]) for b in batches] == [
        (4, 1),
        (2, 2),
        (4, 1),
    ]
    assert {b["effective_batch_size"] for b in batches} == {result["global_batch_size"]}
    restarts = [(e["cause"], e["world_size"], e["killed"]) for e in warm["restart_events"]]
    assert restarts == [("resize", 2, []), ("resize", 4, [])]
    assert set(warm["breakdown"]) == {"shrink", "grow"}


def test_usage_and_bad_arguments() -> None:
    shown = subprocess.run(["bash", str(SCRIPT), "--help"], capture_output=True, text=True)
    assert shown.returncode == 0 and "Usage: bash scripts/gpu-check.sh" in shown.stdout
    assert "--dry-run" in shown.stdout and "carry" in shown.stdout
    bad = subprocess.run(["bash", str(SCRIPT), "--nope"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown argument" in bad.stderr


# -- the helper: a part's record whatever became of it ------------------------------------------


def _helper() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gpu_check_helper", SCRIPT.parent / "gpu_check_helper.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _record(tmp_path: Path, rc: int, stdout: str, stderr: str, took: float, limit: int) -> dict:
    logs = tmp_path / "logs"
    logs.mkdir(exist_ok=True)
    (logs / "p.out").write_text(stdout)
    (logs / "p.err").write_text(stderr)
    argv = ["record", "p", "--out", str(tmp_path), "--rc", str(rc), "--limit", str(limit)]
    argv += ["--start", str(time.time() - took), "--logs", str(logs), "--command", "cmd x"]
    assert _helper().main(argv) == 0
    return json.loads((tmp_path / "p.json").read_text())


def test_helper_records_success_failure_and_timeout(tmp_path: Path, capsys) -> None:
    ok = _record(tmp_path, 0, 'noise\n{"a": 1}\n', "", 2.0, 60)
    assert ok["status"] == "ok" and ok["result"] == {"a": 1} and ok["command"] == "cmd x"
    assert 1.9 < ok["duration_s"] < 5 and "stdout_tail" not in ok
    named = _record(tmp_path, 0, '{"status": "no_nvml"}\n', "", 1.0, 60)
    assert named["status"] == "no_nvml"
    silent = _record(tmp_path, 0, "no json here\n", "", 1.0, 60)
    assert silent["status"] == "failed" and "no JSON" in silent["reason"]
    failed = _record(tmp_path, 1, "", "Traceback ...\nValueError: boom\n", 1.0, 60)
    assert failed["status"] == "failed" and failed["exit_code"] == 1
    assert failed["stderr_tail"].endswith("ValueError: boom\n") and failed["result"] is None
    late = _record(tmp_path, 124, "", "KeyboardInterrupt\n", 30.2, 30)
    assert late["status"] == "timeout" and "limit of 30 s" in late["reason"]
    killed = _record(tmp_path, 137, "", "", 3.0, 30)  # SIGKILLed well before its limit
    assert killed["status"] == "failed"

    capsys.readouterr()
    helper = _helper()
    assert helper.main(["skip", "q", "--out", str(tmp_path), "--reason", "why"]) == 0
    argv = ["summary", "--out", str(tmp_path), "--parts", "p,q,gone", "--mode", "gpu"]
    assert helper.main([*argv, "--wall", "12", "--budget", "570"]) == 1  # p failed
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["failed"] == ["p", "gone"] and summary["ok"] is False
    assert summary["parts"]["q"] == {
        "status": "skipped",
        "duration_s": 0.0,
        "exit_code": None,
        "reason": "why",
    }
    assert summary["parts"]["gone"]["reason"].startswith("no record")


# -- the NVML part, on a fake NVML ---------------------------------------------------------------


class FakeNvml(ModuleType):
    """One GPU whose utilisation and memory in use are whatever `busy` says."""

    class NVMLError(Exception):
        pass

    def __init__(self) -> None:
        super().__init__("pynvml")
        self.busy = False
        self.rises = True

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return "GPU-5e1f0c2a-0000-1111-2222-333344445555"

    def nvmlDeviceGetName(self, handle: int) -> str:
        return "NVIDIA H200"

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        used = (40 if self.busy else 1) << 30
        return SimpleNamespace(total=141 << 30, used=used, free=(141 << 30) - used)

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:
        return SimpleNamespace(gpu=97 if self.busy and self.rises else 0, memory=0)


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    """NVML reads the fake; torch sees a CUDA device of the same UUID; the matmul load only
    makes the fake busy until it is told to stop."""
    import torch

    nvml = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    props = SimpleNamespace(uuid="5e1f0c2a-0000-1111-2222-333344445555")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)

    def load(stop: threading.Event, started: threading.Event, errors: list[str]) -> None:
        nvml.busy = True
        started.set()
        stop.wait()
        nvml.busy = False

    monkeypatch.setattr(gpu_check, "_matmul_load", load)
    monkeypatch.setattr(gpu_check, "READ_EVERY_S", 0.02)
    return nvml


def test_nvml_part_reads_the_gpu_idle_and_under_load(fake_gpu: FakeNvml, capsys) -> None:
    code = gpu_check.main(["--nvml", "--json", "--require-cuda", "--load-s", "0.3"])
    result = json.loads(capsys.readouterr().out)
    assert code == 0 and result["ok"] is True and result["status"] == "ok", result
    assert result["nvml"] is True and result["source"] == "nvml"
    assert set(result["checks"]) == {
        "auto_picks_nvml",
        "found_gpu",
        "uuids",
        "memory",
        "utilization_read",
        "utilization_rises_under_load",
        "memory_rises_under_load",
    }
    assert result["gpu"]["uuid"].startswith("GPU-5e1f0c2a")
    assert result["idle"]["max_utilization"] == 0 and result["load"]["max_utilization"] == 97
    assert 0 < result["load"]["first_busy_s"] <= 0.3 and result["load"]["errors"] == []
    assert result["load"]["memory_used"] > result["idle"]["memory_used"]
    assert result["devices"][0]["memory_total"] == 141 << 30


def test_nvml_part_fails_when_the_utilisation_does_not_rise(fake_gpu: FakeNvml, capsys) -> None:
    fake_gpu.rises = False
    code = gpu_check.main(["--nvml", "--json", "--load-s", "0.2"])
    result = json.loads(capsys.readouterr().out)
    assert code == 1 and result["status"] == "failed"
    assert result["failed"] == ["utilization_rises_under_load"]


def test_the_models_part_compares_the_trainer_with_ddp_on_both_architectures(dry_run) -> None:
    """bench.models --quick --workers 2: ResNet-18 and a small GPT-2, the Trainer beside DDP
    (figures only: a 2-core machine's speeds are no target), and the data-bound variant with
    0 and 2 DataLoader workers, in the shape a GPU run gives."""
    result = _part(dry_run, "models")["result"]
    assert result["device"] == "cpu" and result["interrupted"] is False
    for arch in ("resnet18", "gpt"):
        (row,) = result["architectures"][arch]["rows"]
        assert row["workers"] == 2 and "error" not in row, row
        for key in ("trainer_samples_per_s", "ddp_samples_per_s", "ratio", "mem_ratio"):
            assert _number(row[key]) and row[key] > 0, (arch, key, row)
        assert row["global_batch_size"] == 2 * row["micro_batch_size"]
        assert row["ddp_spread"] is None  # one round: no spread to tell
    (bound,) = result["data_bound"]
    assert [r["num_workers"] for r in bound["rows"]] == [0, 2]
    assert all(0 < r["compute_fraction"] <= 1 for r in bound["rows"]), bound
    targets = result["targets"]
    assert set(targets) == {"throughput_ratio", "peak_memory_ratio", "num_workers_hides_loading"}
    assert all(isinstance(t["met"], bool) for t in targets.values())


def test_the_precision_check_passes_on_virtual_devices(tmp_path: Path, warm_launcher) -> None:
    """The GPU check's fp16 part, run here on two CPU workers (a GPU run gives each worker a
    GPU; here they start warm): identical parameters after a shrink and a grow, the
    overflowing sample's steps skipped on every worker."""
    cpu = {"CUDA_VISIBLE_DEVICES": ""}
    got = gpu_check.precision_check(
        tmp_path, "fp16", [cpu, cpu], {"EDT_NUM_THREADS": "1"}, warm_launcher
    )
    assert got["checks"] == {"fp16_parameters_identical": True, "fp16_skips_agree": True}, got
    assert got["fp16_max_abs_diff"] == 0.0
    assert got["fp16_skipped_steps"] and got["fp16_final_loss_scale"] < 2.0**16
