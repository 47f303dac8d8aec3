"""GPU check of the elastic runtime: ``python -m jupyter_edt.bench.gpu_check --json``.

A self-contained check for a machine with NVIDIA GPUs; on one without CUDA it prints
``{"cuda": false, ...}`` and exits 0 at once, so it is harmless anywhere. With ``G`` GPUs:

- reference: one worker on GPU 0 (NCCL, one rank) trains a small float64 model with BatchNorm
  and Dropout (Adam, MSE) for 3 epochs; before step 3 it re-forms in place (same member, new
  generation), which aborts its NCCL communicator and builds a new one;
- elastic: the same job on 2 workers, then
  ``G >= 3``: grow to 3 (joiner on GPU 2), shrink to 2, SIGKILL one worker (-> 1);
  ``G == 2``: shrink to 1, grow to 2 (joiner on GPU 1), SIGKILL one worker (-> 1);
  ``G == 1``: as for 2 with every worker on GPU 0 and ``EDT_BACKEND=gloo`` (NCCL refuses two
  ranks of one communicator on one GPU), so NCCL between ranks is *not* exercised;
- checks: every worker trained on ``cuda:0`` with the expected backend; exit codes; each global
  step committed once; per-step losses and final parameters equal the reference's (max abs
  difference reported, tolerance 1e-9); checkpoints and the final model hold host tensors only;
  the reference's epoch-1 checkpoint resumes in this process on the CPU (tolerance 1e-6: other
  kernels) and on the GPU (1e-9);
- mixed precision (``precision_check``): a float32 version of the job in bf16 and in fp16 (one
  sample of fp16's training set overflows), on 2 workers shrunk to 1 and grown back, against 1
  worker: parameters identical bit for bit, and fp16's skipped steps the same on every worker;
- figures: ``grow_pause_s``, ``shrink_pause_s`` and ``reform_pause_s`` (the ``pause_s`` of the
  generation reports: re-form plus state transfer), ``recovery_s`` (SIGKILL to the survivor's
  next completed step).

Prints one JSON object; exits 1 when a check fails (the job directories are then kept, under
``logs`` in the output), and 2 without CUDA when ``--require-cuda`` is given (so that a GPU
session whose torch is a CPU build does not pass by accident: see ``torch_cuda``). The same file
is the workers' program (``--program``).

``--nvml`` checks the NVML inventory instead (what the service's allocator and the sidebar see):
``open_inventory("auto")`` picks NVML, and each GPU it reads has its UUID, memory and
utilisation; then a matrix-product loop runs on the first CUDA device for ``--load-s`` seconds
while the inventory is read every ``READ_EVERY_S``, and the utilisation read must rise
(``idle`` beside ``load``: the readings, their maximum, the seconds to the first busy reading).
Without NVML it prints ``{"nvml": false, "status": "no_nvml", "reason": ...}`` and exits 0, or 2
with ``--require-cuda``; without CUDA (but with NVML) the load is left out, or fails the check
with ``--require-cuda``. Only the inventory and torch are imported: no Jupyter package.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jupyter_edt.bench import print_result

N_TRAIN, N_TEST, N_IN = 192, 48, 8
BATCH, MICRO, EPOCHS = 24, 4, 3  # 8 steps an epoch, 6 micro-batches a step
STEPS = -(-N_TRAIN // BATCH)
H1, H2, H3 = 4, 10, 18  # holds: first resize, second resize, kill (mid epoch 2)
TIMEOUT_S = 10.0  # the workers' collective timeout (EDT_TIMEOUT_S)
WAIT_S = 150.0  # the longest wait for one phase
TOL_GPU, TOL_CPU = 1e-9, 1e-6
OVERFLOWING = 7  # fp16's training sample that overflows: the steps holding it are skipped
PRECISIONS = ("bf16", "fp16")  # checked besides float64, on float32 weights
READ_EVERY_S = 0.2  # how often --nvml reads the inventory under load
BUSY_PERCENT = 20  # the utilisation under load that counts as risen (with more than idle)


def _data(n: int, seed: int, precision: str = "32", overflow: bool = False) -> Any:
    """float64 samples; float32 for mixed precision (autocast leaves float64 alone), and with
    ``overflow`` one sample that overflows float16 (its inputs times 1e6)."""
    import torch
    from torch.utils.data import TensorDataset

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, N_IN, generator=g, dtype=torch.float64)
    w = torch.linspace(-1.0, 1.0, N_IN, dtype=torch.float64)
    y = torch.tanh(x @ w) + 0.1 * x[:, 0] ** 2
    if overflow:
        x[OVERFLOWING] *= 1e6
    if precision != "32":
        x, y = x.float(), y.float()
    return TensorDataset(x, y)


def _mae(out: Any, y: Any) -> Any:
    return (out - y).abs().mean()


def build(device: str = "auto", precision: str = "32") -> Any:
    """The job's trainer; the same in the workers and in this process (for the resumes). In a
    mixed ``precision`` it is float32, and fp16's training set has a sample that overflows."""
    import torch
    from torch import nn

    from jupyter_edt.runtime import Trainer

    torch.manual_seed(1234)
    model = nn.Sequential(
        nn.Linear(N_IN, 32),
        nn.BatchNorm1d(32),
        nn.ReLU(),
        nn.Dropout(0.2),
        nn.Linear(32, 1),
        nn.Flatten(0),
    )
    model = model.double() if precision == "32" else model
    overflow = precision == "fp16"
    return Trainer(
        model,
        lambda: (_data(N_TRAIN, 1, precision, overflow), _data(N_TEST, 2, precision)),
        nn.functional.mse_loss,
        lambda params: torch.optim.Adam(params, lr=0.01),
        metrics={"mae": _mae},
        lr_scheduler=lambda opt: torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.9),
        device=device,
        precision=precision,
    )


def _fit(trainer: Any, result_dir: Path | None = None) -> Any:
    return trainer.fit(
        EPOCHS, BATCH, 4, checkpoint_every=1, micro_batch_size=MICRO, result_dir=result_dir
    )


def _final(result_dir: Path) -> dict[str, Any]:
    import torch

    return torch.load(result_dir / "model" / "model_epoch_final.pth", weights_only=False)


def _max_diff(a: dict[str, Any], b: dict[str, Any]) -> float:
    if a.keys() != b.keys():
        return float("inf")
    return max(float((a[k].double().cpu() - b[k].double().cpu()).abs().max()) for k in a)


def _all_on_host(path: Path) -> bool:
    import torch

    from jupyter_edt.runtime.state import flatten

    _, tensors = flatten(torch.load(path, weights_only=False))  # no map_location on purpose
    return all(t.device.type == "cpu" for t in tensors)


def _gpu(i: int, gpus: int) -> dict[str, str]:
    """Worker ``i``'s one GPU, as this process numbers them (through its own
    ``CUDA_VISIBLE_DEVICES``, if set, so that the worker sees the same physical device)."""
    mine = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    ids = [x.strip() for x in mine.split(",")] if mine else [str(k) for k in range(gpus)]
    return {"CUDA_VISIBLE_DEVICES": ids[i % gpus]}


def _nccl_version() -> str | None:
    import torch

    try:
        v = torch.cuda.nccl.version()
    except (AttributeError, RuntimeError):
        return None
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)


def _steps(events: list[dict[str, Any]], worker: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == "step" and e["worker"] == worker]


def _reference(out: Path, env: dict[str, str]) -> dict[str, Any]:
    from jupyter_edt.runtime import LocalController

    with LocalController([__file__, "--program"], out, timeout_s=TIMEOUT_S, env=env) as ctl:
        ctl.hold(3)
        ctl.start(1, [_gpu(0, 1)])
        ctl.wait_held(3, WAIT_S)
        gen, _ = ctl.resize(list(ctl.members), [], wait=False)  # same member, new generation
        ctl.release(3)
        reform = ctl.wait_formed(gen, WAIT_S)
        codes = ctl.wait(WAIT_S)
        events = ctl.events()
    return {"codes": codes, "events": events, "reform": reform}


def _elastic(out: Path, env: dict[str, str], gpus: int) -> dict[str, Any]:
    from jupyter_edt.runtime import LocalController

    with LocalController([__file__, "--program"], out, timeout_s=TIMEOUT_S, env=env) as ctl:
        ctl.hold(H1)
        ctl.start(2, [_gpu(0, gpus), _gpu(1, gpus)])
        ctl.wait_held(H1, WAIT_S)
        if gpus >= 3:  # 2 -> 3
            gen, _ = ctl.resize(list(ctl.members), [_gpu(2, gpus)], wait=False)
        else:  # 2 -> 1
            gen, _ = ctl.resize(list(ctl.members[:1]), [], wait=False)
        ctl.hold(H2)
        ctl.release(H1)
        first = ctl.wait_formed(gen, WAIT_S)
        ctl.wait_held(H2, WAIT_S)
        if gpus >= 3:  # 3 -> 2
            gen, _ = ctl.resize(list(ctl.members[:2]), [], wait=False)
        else:  # 1 -> 2
            gen, _ = ctl.resize(list(ctl.members), [_gpu(1, gpus)], wait=False)
        ctl.hold(H3)
        ctl.release(H2)
        second = ctl.wait_formed(gen, WAIT_S)
        ctl.wait_held(H3, WAIT_S)
        victim = ctl.members[1]
        ctl.release(H3)
        t_kill = time.time()
        ctl.kill(victim)
        codes = ctl.wait(WAIT_S)
        events = ctl.events()
        sizes = [len(m["members"]) for m in ctl.membership]
    grow, shrink = (first, second) if gpus >= 3 else (second, first)
    after = [e for e in _steps(events, "w0") if e["time"] > t_kill and e["generation"] > gen]
    return {
        "codes": codes,
        "events": events,
        "sizes": sizes,
        "victim": victim,
        "grow": grow,
        "shrink": shrink,
        "recovery_s": after[0]["time"] - t_kill if after else None,
    }


def _resume_here(ref_dir: Path, out: Path, device: str) -> float:
    """Resume the reference's epoch-1 checkpoint in this process on ``device``."""
    ckpt = ref_dir / "checkpoint" / f"ckpt-{STEPS:09d}.pt"
    (out / "checkpoint").mkdir(parents=True)
    shutil.copy(ckpt, out / "checkpoint" / ckpt.name)
    trainer = build(device)
    _fit(trainer, out)
    return _max_diff(_final(out), _final(ref_dir))


def precision_check(
    base: Path,
    precision: str,
    devices: list[dict[str, str]],
    env: dict[str, str],
    launcher: Callable[[], Any] | None = None,
) -> dict[str, Any]:
    """A mixed-precision job on 2 workers (``devices``: each one's environment), shrunk to 1 and
    grown back, against the same job on 1 worker: the same parameters, bit for bit, and for
    fp16 the same steps skipped, on every worker that took them. ``launcher`` makes each
    run's launcher (default: workers start as fresh interpreters)."""
    from jupyter_edt.runtime import LocalController

    program = [__file__, "--program", "--precision", precision]

    def run(out: Path, sizes: list[int]) -> list[dict[str, Any]]:
        holds = [H1, H2][: len(sizes) - 1]  # a pause before each resize
        made = launcher() if launcher is not None else None
        with LocalController(program, out, timeout_s=TIMEOUT_S, env=env, launcher=made) as ctl:
            if holds:
                ctl.hold(holds[0])
            ctl.start(sizes[0], devices[: sizes[0]])
            for i, (at, n) in enumerate(zip(holds, sizes[1:], strict=True)):
                ctl.wait_held(at, WAIT_S)
                if n < len(ctl.members):
                    gen, _ = ctl.resize(list(ctl.members[:n]), [], wait=False)
                else:
                    joiners = devices[len(ctl.members) : n]
                    gen, _ = ctl.resize(list(ctl.members), joiners, wait=False)
                if i + 1 < len(holds):
                    ctl.hold(holds[i + 1])
                ctl.release(at)
                ctl.wait_formed(gen, WAIT_S)
            codes = ctl.wait(WAIT_S)
            if set(codes.values()) != {0}:
                raise RuntimeError(f"{precision}: workers exited {codes}")
            return ctl.events()

    ref = run(base / f"{precision}-fixed", [1])
    el = run(base / f"{precision}-elastic", [2, 1, 2])
    diff = _max_diff(_final(base / f"{precision}-elastic"), _final(base / f"{precision}-fixed"))
    checks = {f"{precision}_parameters_identical": diff == 0.0}
    out: dict[str, Any] = {f"{precision}_max_abs_diff": diff}
    if precision == "fp16":
        ref_steps = _steps(ref, "w0")
        skipped = [s["global_step"] for s in ref_steps if s["skipped"]]
        seen: dict[int, set[bool]] = {}
        for e in el:
            if e["type"] == "step":
                seen.setdefault(e["global_step"], set()).add(e["skipped"])
        checks["fp16_skips_agree"] = bool(skipped) and [
            seen.get(s["global_step"]) for s in ref_steps
        ] == [{s["skipped"]} for s in ref_steps]
        out["fp16_skipped_steps"] = skipped
        out["fp16_final_loss_scale"] = ref_steps[-1]["loss_scale"] if ref_steps else None
    out["checks"] = checks
    return out


def run_check(base: Path) -> dict[str, Any]:
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before CUDA starts here
    import torch

    gpus = torch.cuda.device_count()
    nccl = gpus >= 2
    result: dict[str, Any] = {
        "cuda": True,
        "gpus": gpus,
        "gpu_names": [torch.cuda.get_device_name(i) for i in range(gpus)],
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "nccl_version": _nccl_version(),
        "mode": "nccl" if nccl else "gloo between workers sharing GPU 0",
        "nccl_between_ranks_checked": nccl,
        "scenario": "2->3->2->kill->1" if gpus >= 3 else "2->1->2->kill->1",
    }
    checks: dict[str, bool] = {}
    common = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
    ref = _reference(base / "ref", common)
    el = _elastic(base / "elastic", {**common, **({} if nccl else {"EDT_BACKEND": "gloo"})}, gpus)

    ref_steps = _steps(ref["events"], "w0")
    el_steps = _steps(el["events"], "w0")
    backend_nccl = "cpu:gloo,cuda:nccl"
    checks["reference_exit_0"] = ref["codes"] == {"w0": 0}
    checks["reference_nccl_reform"] = (
        ref["reform"]["backend"] == backend_nccl and ref["reform"]["world_size"] == 1
    )
    codes = el["codes"]
    checks["elastic_exit_codes"] = codes.get("w0") == 0 and all(
        c == (-signal.SIGKILL if w == el["victim"] else 0) for w, c in codes.items()
    )
    checks["elastic_sizes"] = el["sizes"] == ([2, 3, 2, 1] if gpus >= 3 else [2, 1, 2, 1])
    begins = [e for e in ref["events"] + el["events"] if e["type"] == "train_begin"]
    checks["workers_on_cuda0"] = bool(begins) and all(e["device"] == "cuda:0" for e in begins)
    want = backend_nccl if nccl else "gloo"
    gens = [e for e in el["events"] if e["type"] == "generation"]
    checks["elastic_backend"] = bool(gens) and all(e["backend"] == want for e in gens)
    checks["recovered_after_kill"] = el["recovery_s"] is not None and any(
        e["type"] == "failure" for e in el["events"]
    )
    every = list(range(EPOCHS * STEPS))
    checks["each_step_once"] = [s["global_step"] for s in el_steps] == every
    checks["reference_steps"] = [s["global_step"] for s in ref_steps] == every
    loss_diff = (
        max(abs(a["loss"] - b["loss"]) for a, b in zip(el_steps, ref_steps, strict=True))
        if len(el_steps) == len(ref_steps) and el_steps
        else float("inf")
    )
    diff = _max_diff(_final(base / "elastic"), _final(base / "ref"))
    checks["losses_equal"] = loss_diff <= TOL_GPU
    checks["parameters_equal"] = diff <= TOL_GPU
    saved = sorted((base / "elastic" / "checkpoint").glob("ckpt-*.pt"))
    saved.append(base / "elastic" / "model" / "model_epoch_final.pth")
    checks["checkpoints_on_host"] = len(saved) > 1 and all(_all_on_host(p) for p in saved)
    cpu_diff = _resume_here(base / "ref", base / "resume-cpu", "cpu")
    gpu_diff = _resume_here(base / "ref", base / "resume-gpu", "cuda")
    checks["resume_on_cpu"] = cpu_diff <= TOL_CPU
    checks["resume_on_gpu"] = gpu_diff <= TOL_GPU
    # mixed precision, on the GPUs as the elastic run used them
    mixed = {**common, **({} if nccl else {"EDT_BACKEND": "gloo"})}
    for precision in PRECISIONS:
        got = precision_check(base, precision, [_gpu(0, gpus), _gpu(1, gpus)], mixed)
        checks.update(got.pop("checks"))
        result.update(got)
    result.update(
        {
            "reform_pause_s": ref["reform"]["pause_s"],
            "grow_pause_s": el["grow"]["pause_s"],
            "grow_bytes": el["grow"]["bytes_sent"],
            "shrink_pause_s": el["shrink"]["pause_s"],
            "recovery_s": el["recovery_s"],
            "equivalence_max_abs_diff": diff,
            "loss_max_abs_diff": loss_diff,
            "resume_cpu_max_abs_diff": cpu_diff,
            "resume_gpu_max_abs_diff": gpu_diff,
            "checks": checks,
        }
    )
    return result


def _matmul_load(stop: Any, started: Any, errors: list[str]) -> None:
    """Matrix products on the first CUDA device until ``stop`` is set (a thread's target)."""
    import torch

    try:
        a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        torch.cuda.synchronize()
        started.set()
        while not stop.is_set():
            for _ in range(8):
                a @ b
            torch.cuda.synchronize()  # lets go of the GIL: the readings go on meanwhile
    except Exception as e:  # no memory, a driver error: reported, the check fails
        errors.append(f"{type(e).__name__}: {e}")
        started.set()


def nvml_check(load_s: float, require_cuda: bool) -> dict[str, Any]:
    """The NVML inventory's reading of this machine's GPUs, idle and under a matmul load."""
    import logging
    import threading

    from jupyter_edt.scheduling.inventory import NvmlInventory, NvmlUnavailable, open_inventory

    try:
        NvmlInventory().close()
    except NvmlUnavailable as e:
        return {"nvml": False, "status": "no_nvml", "reason": str(e), "checks": {}}
    quiet = logging.getLogger("jupyter_edt.bench.gpu_check.nvml")
    inventory = open_inventory("auto", 0, quiet)
    checks: dict[str, bool] = {"auto_picks_nvml": inventory.source == "nvml"}
    result: dict[str, Any] = {"nvml": True, "source": inventory.source, "checks": checks}
    try:
        devices = inventory.read()
        result["devices"] = [d.to_dict() for d in devices]
        checks["found_gpu"] = bool(devices) and not any(d.virtual for d in devices)
        checks["uuids"] = bool(devices) and all(
            d.uuid.startswith(("GPU-", "MIG-")) for d in devices
        )
        checks["memory"] = bool(devices) and all(
            (d.memory_total or 0) > 0 and d.memory_used is not None for d in devices
        )
        checks["utilization_read"] = bool(devices) and all(
            d.utilization is not None for d in devices
        )
        import torch

        if not torch.cuda.is_available():
            result["load"] = {"skipped": "no CUDA device visible to torch"}
            if require_cuda:
                checks["utilization_rises_under_load"] = False
            return result
        # the GPU torch calls cuda:0, among those NVML reads (by UUID where torch says it)
        torch_uuid = str(getattr(torch.cuda.get_device_properties(0), "uuid", "") or "")
        mine = next((d for d in devices if torch_uuid and torch_uuid in d.uuid), None)
        mine = mine or (devices[0] if devices else None)
        if mine is None:
            return result

        def reading() -> dict[str, Any]:
            now = next((d for d in inventory.read() if d.uuid == mine.uuid), None)
            return {
                "utilization": None if now is None else now.utilization,
                "memory_used": None if now is None else now.memory_used,
            }

        idle = [reading()]
        for _ in range(4):
            time.sleep(READ_EVERY_S)
            idle.append(reading())
        stop, started, errors = threading.Event(), threading.Event(), []
        thread = threading.Thread(target=_matmul_load, args=(stop, started, errors), daemon=True)
        thread.start()
        started.wait(60)
        t0 = time.monotonic()
        load: list[dict[str, Any]] = []
        while time.monotonic() - t0 < load_s:
            time.sleep(READ_EVERY_S)
            load.append({"t_s": round(time.monotonic() - t0, 2), **reading()})
        stop.set()
        thread.join(30)
        idle_util = max((r["utilization"] or 0) for r in idle)
        load_util = max((r["utilization"] or 0 for r in load), default=0)
        busy = [r["t_s"] for r in load if (r["utilization"] or 0) >= BUSY_PERCENT]
        result["gpu"] = {"id": mine.id, "uuid": mine.uuid, "name": mine.name}
        result["idle"] = {
            "max_utilization": idle_util,
            "memory_used": idle[-1]["memory_used"],
            "readings": idle,
        }
        result["load"] = {
            "seconds": load_s,
            "max_utilization": load_util,
            "first_busy_s": busy[0] if busy else None,
            "memory_used": max((r["memory_used"] or 0 for r in load), default=0),
            "readings": load,
            "errors": errors,
        }
        checks["utilization_rises_under_load"] = (
            not errors and load_util >= BUSY_PERCENT and load_util > idle_util
        )
        checks["memory_rises_under_load"] = result["load"]["memory_used"] > (
            idle[-1]["memory_used"] or 0
        )
    finally:
        inventory.close()
    return result


def _nvml_main(cfg: argparse.Namespace) -> int:
    t0 = time.monotonic()
    try:
        result = nvml_check(cfg.load_s, cfg.require_cuda)
    except Exception as e:  # NVML errors in the middle of a reading: reported
        result = {"nvml": True, "checks": {}, "error": f"{type(e).__name__}: {e}"}
    failed = [k for k, v in result["checks"].items() if not v]
    result["failed"] = failed
    if not result["nvml"]:
        result["ok"] = not cfg.require_cuda
    else:
        result["ok"] = not failed and "error" not in result
        result["status"] = "ok" if result["ok"] else "failed"
    result["wall_s"] = round(time.monotonic() - t0, 2)
    print_result(result, cfg.json)
    if not result["nvml"]:
        return 0 if result["ok"] else 2
    return 0 if result["ok"] else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument(
        "--require-cuda", action="store_true", help="exit 2 when no CUDA device is usable"
    )
    ap.add_argument(
        "--nvml", action="store_true", help="check the NVML inventory instead (idle, under load)"
    )
    ap.add_argument(
        "--load-s", type=float, default=5.0, help="--nvml: seconds of matmul load (default 5)"
    )
    ap.add_argument("--program", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--precision", default="32", help=argparse.SUPPRESS)  # the program's
    cfg = ap.parse_args(argv)
    if cfg.program:
        _fit(build(precision=cfg.precision))
        return 0
    if cfg.nvml:
        return _nvml_main(cfg)
    t0 = time.monotonic()
    import torch

    if not torch.cuda.is_available():
        result: dict[str, Any] = {
            "cuda": False,
            "gpus": 0,
            "torch": torch.__version__,
            "torch_cuda": torch.version.cuda,  # None: a CPU build of torch
            "ok": not cfg.require_cuda,
            "checks": {},
            "note": "no CUDA device visible: nothing to check",
        }
    else:
        base = Path(tempfile.mkdtemp(prefix="edt-gpu-check-"))
        try:
            result = run_check(base)
        except Exception as e:  # a phase timed out or a worker crashed: report, keep the logs
            result = {"cuda": True, "checks": {}, "error": f"{type(e).__name__}: {e}"}
        failed = [k for k, v in result["checks"].items() if not v]
        result["failed"] = failed
        result["ok"] = not failed and "error" not in result
        if result["ok"]:
            shutil.rmtree(base, ignore_errors=True)
        else:
            result["logs"] = str(base)
    result["wall_s"] = round(time.monotonic() - t0, 2)
    print_result(result, cfg.json)
    if not result["cuda"]:
        return 0 if result["ok"] else 2
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
