"""Real models, the Trainer against DDP: ``python -m jupyter_edt.bench.models --json``.

For a CIFAR ResNet-18 and a two-layer GPT-2 (``models_program.py``: the models, their made-up
data and both programs), at each worker count of ``--workers`` (1, 2, 4 by default), in one run:

- ``trainer_samples_per_s``: jupyter-edt's ``Trainer`` as a job's workers
  (``LocalController``), beside ``ddp_samples_per_s``: the same model as a user writes it for
  torchrun (``DistributedDataParallel``, a ``DataLoader`` over a ``DistributedSampler``),
  launched by ``python -m torch.distributed.run --standalone --nproc_per_node W``; and
  ``ratio`` (trainer / ddp; with ``--rounds`` N, DDP and the Trainer alternate N times and
  ``ratio`` is the median of the rounds' ratios, ``ratios``). Both sides: the same initial
  weights, global batch, micro-batch per worker (the global batch over the largest worker
  count, or over ``--max-gpus``: no accumulation there unless that is larger), optimizer,
  DataLoader worker processes and torch threads, and the same steps (``--warmup``, then
  ``--steps`` measured: by default 10 of ResNet-18's on the CPU and 100 of the GPT's, whose
  steps are short); samples/s is the measured steps' samples over the wall time from the
  end of the warm-up to the end of the last step on rank 0 (data loading included; the device
  synchronised at both ends), read by the same code on both sides;
- ``trainer_peak_mem_mb`` / ``ddp_peak_mem_mb``: the largest per-worker peak (CUDA:
  ``max_memory_allocated``; CPU: the worker process's ``ru_maxrss``, interpreter and libraries
  included), and ``mem_ratio``;
- ``trainer_cpu_s_per_step`` / ``ddp_cpu_s_per_step``: rank 0's process CPU time (all its
  threads) per measured step, and ``cpu_ratio`` (ddp / trainer): the work of a step, less
  sensitive than samples/s to other load on a shared machine;
- ``data_bound``: ResNet-18 at the smallest worker count with each sample the mean of
  ``augment_rounds`` augmented views (calibrated so that loading a sample costs about
  `DATA_TO_COMPUTE` times its compute, measured in this run), with the Trainer's ``num_workers``
  0 and 2: samples/s and ``compute_fraction`` (1 - the step events' ``data_s`` / ``step_s``
  over the measured steps).

``targets`` says whether each target is met; nothing is asserted. ``--gloo-workers 2,4,8`` adds
rows on the CPU (gloo, virtual devices) after those of ``--device`` (the GPU check's real run:
CUDA at 1 worker, gloo at 2, 4 and 8). A failed run leaves ``error`` in its row and the exit
status 1; on SIGINT (the GPU check's time limit) what was measured is still printed.

``--quick`` (the GPU check's dry run, inside ``make test``): 1 and 2 workers, 2 + 3 steps,
16x16 images, small batches and sequences, the data-bound runs at 1 worker; on the CPU the DDP
workers are forked from this process (``--ddp-launcher fork``: the same program with torchrun's
variables, torch, DDP's imports and transformers imported once instead of in every process,
which on a busy 2-core machine halves the run); the same keys. ``--keep DIR`` keeps every
run's logs and reports; ``BENCH_MODELS_PROFILE=DIR`` makes each worker of both sides write its
cProfile statistics there (``models_program.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from jupyter_edt.bench import models_program as program
from jupyter_edt.bench import print_result

PROGRAM = Path(program.__file__)
ARCHS = program.ARCHS
TARGETS = {
    "throughput_ratio_min": 0.95,
    "peak_memory_ratio_max": 1.1,
    "compute_fraction_gain_min": 0.2,  # num_workers 2 over 0, in the data-bound case
}
DATA_TO_COMPUTE = 1.5  # the data-bound sample's loading time over its compute time
DATA_BOUND_NUM_WORKERS = (0, 2)
RUN_TIMEOUT_S = 300.0
QUIET = {
    "PYTHONUNBUFFERED": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
# what torchrun's workers must not inherit from a job this benchmark may itself run in
_INHERITED = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_", "TORCHELASTIC_", "GROUP_", "ROLE_")


@dataclass(frozen=True)
class Sizes:
    warmup: int
    steps: int  # ResNet-18's measured steps
    resnet_micro: int
    gpt_micro: int
    image_size: int
    seq_len: int
    # the GPT's: its steps are short (about 30 ms on the CPU), and a few of them would measure
    # the machine's other load more than the two sides
    gpt_steps: int

    def measured(self, arch: str) -> int:
        return self.steps if arch == "resnet18" else self.gpt_steps


SIZES = {
    "cpu": Sizes(
        warmup=3, steps=10, gpt_steps=100, resnet_micro=8, gpt_micro=8, image_size=32, seq_len=64
    ),
    "cuda": Sizes(
        warmup=5, steps=30, gpt_steps=100, resnet_micro=128, gpt_micro=32, image_size=32, seq_len=64
    ),
    "quick": Sizes(
        warmup=2, steps=3, gpt_steps=3, resnet_micro=2, gpt_micro=2, image_size=16, seq_len=32
    ),
}


@dataclass(frozen=True)
class Setting:
    """One device's runs: its worker counts, threads and DataLoader workers per worker."""

    device: str
    workers: tuple[int, ...]
    threads: int
    num_workers: int
    sizes: Sizes
    ddp_launcher: str = "torchrun"
    max_gpus: int = 0  # the global batch in micro-batches; 0: the largest worker count

    @property
    def max_workers(self) -> int:
        return self.max_gpus or max(self.workers)

    def micro(self, arch: str) -> int:
        return self.sizes.resnet_micro if arch == "resnet18" else self.sizes.gpt_micro


@dataclass(frozen=True)
class Run:
    """One launch: an architecture on `workers` workers of `setting`."""

    arch: str
    setting: Setting
    workers: int
    num_workers: int
    augment_rounds: int = 1
    max_workers: int = 0  # 0: the setting's

    @property
    def micro(self) -> int:
        return self.setting.micro(self.arch)

    @property
    def steps(self) -> int:
        return self.setting.sizes.measured(self.arch)

    @property
    def global_batch(self) -> int:
        return self.micro * (self.max_workers or self.setting.max_workers)

    def args(self, side: str, report: Path) -> list[str]:
        s = self.setting.sizes
        return [
            str(PROGRAM),
            *("--side", side, "--arch", self.arch, "--report", str(report)),
            *("--warmup", str(s.warmup), "--steps", str(self.steps)),
            *("--global-batch", str(self.global_batch), "--micro", str(self.micro)),
            *("--max-workers", str(self.max_workers or self.setting.max_workers)),
            *("--num-workers", str(self.num_workers), "--threads", str(self.setting.threads)),
            *("--image-size", str(s.image_size), "--seq-len", str(s.seq_len)),
            *("--augment-rounds", str(self.augment_rounds), "--device", self.setting.device),
        ]

    def gpus(self) -> list[str]:
        """Each worker's ``CUDA_VISIBLE_DEVICES`` entry ("" on a virtual device), as this
        process numbers the GPUs."""
        if self.setting.device != "cuda":
            return [""] * self.workers
        mine = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
        ids = [x.strip() for x in mine.split(",")] if mine else None
        return [ids[i] if ids else str(i) for i in range(self.workers)]


# -- the two sides ------------------------------------------------------------------------------
def _reports(folder: Path, side: str, workers: int) -> list[dict[str, Any]]:
    found = [json.loads(p.read_text()) for p in sorted(folder.glob(f"{side}-*.json"))]
    if len(found) != workers:
        raise RuntimeError(f"{side}: {len(found)} of {workers} workers reported in {folder}")
    return sorted(found, key=lambda r: r["rank"])


def _figures(run: Run, reports: list[dict[str, Any]]) -> dict[str, Any]:
    """samples/s of rank 0 over the measured steps, and the largest per-worker peak."""
    warmup, steps = run.setting.sizes.warmup, run.steps
    times = reports[0]["times"]
    if len(times) != warmup + steps:
        raise RuntimeError(f"{len(times)} steps timed, {warmup + steps} expected")
    wall = times[-1] - times[warmup - 1]
    cpu = reports[0]["cpu_times"]
    return {
        "samples_per_s": steps * run.global_batch / wall,
        "cpu_s_per_step": (cpu[-1] - cpu[warmup - 1]) / steps,
        "peak_mem_mb": max(r["peak_mem_mb"] for r in reports),
        "peak_mem_mb_per_worker": [round(r["peak_mem_mb"], 1) for r in reports],
        "threads": reports[0]["threads"],
        "params": reports[0]["params"],
    }


def _tail(path: Path, chars: int = 1500) -> str:
    try:
        return path.read_text("utf-8", "replace")[-chars:]
    except OSError:
        return ""


_warm: list[Any] = []  # the fork server of the warm Trainer workers, once started


def _trainer_launcher(run: Run) -> Any:
    """How the Trainer's workers start: forked warm, as the service starts them, when DDP's
    are forked too (`--quick` on the CPU: neither side pays for importing torch and
    transformers in each worker), else as fresh interpreters, as torchrun starts DDP's."""
    if run.setting.ddp_launcher != "fork":
        return None
    from jupyter_edt.launch.forkserver import ForkServer
    from jupyter_edt.launch.local import LocalLauncher

    if not _warm:
        server = ForkServer(warm=["transformers.models.gpt2"])
        server.start()
        _warm.append(server)
        if not server.wait_ready(120):
            raise RuntimeError("the fork server of the warm Trainer workers did not start")
    return LocalLauncher(own_session=False, forkserver=_warm[0].name)


def _stop_warm() -> None:
    while _warm:
        _warm.pop().stop()


def run_trainer(run: Run, out: Path) -> dict[str, Any]:
    """The Trainer as a job's `run.workers` workers."""
    from jupyter_edt.runtime import LocalController

    threads = str(run.setting.threads)
    env = {**QUIET, "EDT_NUM_THREADS": threads, "OMP_NUM_THREADS": threads}
    report = out / "report"
    launcher = _trainer_launcher(run)
    with LocalController(
        run.args("trainer", report), out, timeout_s=60, env=env, launcher=launcher
    ) as ctl:
        ctl.start(run.workers, [{"CUDA_VISIBLE_DEVICES": g} for g in run.gpus()])
        codes = ctl.wait(RUN_TIMEOUT_S)
        events = ctl.events()
    if set(codes.values()) != {0}:
        logs = "".join(_tail(p) for p in sorted((out / "logs").glob("*.out")))
        raise RuntimeError(f"trainer workers exited {codes}: {logs}")
    fig = _figures(run, _reports(report, "trainer", run.workers))
    warmup = run.setting.sizes.warmup
    steps = [
        e
        for e in events
        if e["type"] == "step" and e["worker"] == "w0" and e["global_step"] >= warmup
    ]
    step_s = sum(e["step_s"] for e in steps)
    if steps and all("data_s" in e for e in steps) and step_s > 0:
        data_s = sum(e["data_s"] for e in steps)
        fig["data_s_per_step"] = data_s / len(steps)
        fig["compute_fraction"] = 1.0 - data_s / step_s
    else:
        fig["data_s_per_step"] = fig["compute_fraction"] = None
    fig["step_s"] = step_s / len(steps) if steps else None
    return fig


def run_ddp(run: Run, out: Path) -> dict[str, Any]:
    """The DDP program under real torchrun, or forked from here (`--ddp-launcher fork`)."""
    out.mkdir(parents=True, exist_ok=True)
    report = out / "report"
    if run.setting.ddp_launcher == "fork":
        return _forked_ddp(run, report)
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(_INHERITED) and not k.startswith("EDT_") and k != "RESULT_DIR"
    }
    env = {
        **base,
        **QUIET,
        "OMP_NUM_THREADS": str(run.setting.threads),
        "CUDA_VISIBLE_DEVICES": ",".join(run.gpus()),
    }
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={run.workers}",
        *run.args("ddp", report),
    ]
    log = out / "torchrun.log"
    with log.open("wb") as f:
        proc = subprocess.Popen(command, env=env, stdout=f, stderr=subprocess.STDOUT)
        try:
            code = proc.wait(RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            code = None
        finally:  # its agent stops its workers on SIGTERM
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    if code != 0:
        raise RuntimeError(f"torchrun exited {code}: {_tail(log)}")
    return _figures(run, _reports(report, "ddp", run.workers))


def _forked_ddp(run: Run, report: Path) -> dict[str, Any]:
    """The same DDP program, its workers forked from this process with torchrun's variables:
    torch (and transformers, for gpt) imported once, here, instead of in an agent and in every
    worker. CPU only (a CUDA context does not survive a fork)."""
    import multiprocessing as mp

    # imported once, here, for every forked worker: what DDP's constructor imports (seconds of
    # CPU each), and the GPT's library
    import torch._dynamo  # noqa: F401

    from .rendezvous import agent_store

    if run.arch == "gpt":
        import transformers  # noqa: F401
    ctx = mp.get_context("fork")
    argv = run.args("ddp", report)[1:]
    with agent_store(run.workers) as rendezvous:
        procs = [
            ctx.Process(target=_ddp_child, args=(rank, run.workers, rendezvous, argv))
            for rank in range(run.workers)
        ]
        for p in procs:
            p.start()
        deadline = time.monotonic() + RUN_TIMEOUT_S
        try:
            for p in procs:
                p.join(max(0.0, deadline - time.monotonic()))
        finally:
            for p in procs:
                if p.is_alive():
                    p.kill()
                    p.join()
    codes = [p.exitcode for p in procs]
    if codes != [0] * run.workers:
        raise RuntimeError(f"forked DDP workers exited {codes} (their tracebacks: stderr)")
    return _figures(run, _reports(report, "ddp", run.workers))


def _ddp_child(rank: int, world: int, rendezvous: dict[str, str], argv: list[str]) -> None:
    os.environ.update(
        rendezvous,
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_WORLD_SIZE=str(world),
        CUDA_VISIBLE_DEVICES="",
    )
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    program.main(argv)


# -- rows ---------------------------------------------------------------------------------------
def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def oversubscribed(setting: Setting, workers: int, num_workers: int, cpus: int) -> bool:
    """More busy processes and threads than cores: workers x (threads + DataLoader workers)."""
    return workers * (setting.threads + num_workers) > cpus


def compare(arch: str, setting: Setting, workers: int, rounds: int, base: Path) -> dict[str, Any]:
    """One row: DDP, then the Trainer, `rounds` times; the median of each figure."""
    run = Run(arch, setting, workers, setting.num_workers)
    row: dict[str, Any] = {
        "workers": workers,
        "device": setting.device,
        "threads": setting.threads,
        "num_workers": setting.num_workers,
        "ddp_launcher": setting.ddp_launcher,
        "micro_batch_size": run.micro,
        "global_batch_size": run.global_batch,
        "accumulation": setting.max_workers // workers,
        "oversubscribed": oversubscribed(
            setting, workers, setting.num_workers, os.cpu_count() or 1
        ),
    }
    ddp, ours = [], []
    t0 = time.monotonic()
    try:
        for i in range(rounds):
            tag = f"{arch}-{setting.device}-w{workers}-r{i}"
            ddp.append(run_ddp(run, base / f"ddp-{tag}"))
            ours.append(run_trainer(run, base / f"trainer-{tag}"))
    except Exception as e:
        row["error"] = f"{type(e).__name__}: {e}"
    row["wall_s"] = round(time.monotonic() - t0, 1)

    def median(side: list[dict[str, Any]], key: str) -> float | None:
        values = [r[key] for r in side if r.get(key) is not None]
        return statistics.median(values) if values else None

    pairs = list(zip(ours, ddp, strict=False))  # a failed round ends the row
    row["trainer_samples_per_s"] = median(ours, "samples_per_s")
    row["ddp_samples_per_s"] = median(ddp, "samples_per_s")
    # the median of each round's ratio, so that a burst of load skews neither side
    ratios = [o["samples_per_s"] / d["samples_per_s"] for o, d in pairs]
    row["ratio"] = statistics.median(ratios) if ratios else None
    row["ratios"] = ratios
    row["ddp_spread"] = spread([d["samples_per_s"] for d in ddp])
    # less sensitive to other load on the machine than samples/s: the work of a step
    row["trainer_cpu_s_per_step"] = median(ours, "cpu_s_per_step")
    row["ddp_cpu_s_per_step"] = median(ddp, "cpu_s_per_step")
    cpu = [d["cpu_s_per_step"] / o["cpu_s_per_step"] for o, d in pairs]
    row["cpu_ratio"] = statistics.median(cpu) if cpu else None
    row["trainer_peak_mem_mb"] = median(ours, "peak_mem_mb")
    row["ddp_peak_mem_mb"] = median(ddp, "peak_mem_mb")
    row["mem_ratio"] = _ratio(row["trainer_peak_mem_mb"], row["ddp_peak_mem_mb"])
    row["trainer_peak_mem_mb_per_worker"] = ours[0]["peak_mem_mb_per_worker"] if ours else None
    row["ddp_peak_mem_mb_per_worker"] = ddp[0]["peak_mem_mb_per_worker"] if ddp else None
    row["trainer_step_s"] = median(ours, "step_s")
    row["trainer_data_s_per_step"] = median(ours, "data_s_per_step")
    row["params"] = (ours or ddp or [{}])[0].get("params")
    return row


def spread(values: list[float]) -> float | None:
    """How far the same program's speed moved between rounds, (max - min) / median: the
    machine's own noise, against which a ratio's distance from its target is to be read."""
    if len(values) < 2:
        return None
    return (max(values) - min(values)) / statistics.median(values)


def _calibrate(compute_s_per_sample: float, image_size: int) -> tuple[int, float]:
    """Rounds of augmentation whose cost per sample is `DATA_TO_COMPUTE` times the compute,
    timed here on one thread; and the cost of one round."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ds = program.Images(16, image_size, 3, rounds=50)
        ds[0]  # warm
        t0 = time.perf_counter()
        for i in range(len(ds)):
            ds[i]
        per_round = (time.perf_counter() - t0) / (len(ds) * ds.rounds)
    finally:
        torch.set_num_threads(threads)
    return max(2, round(DATA_TO_COMPUTE * compute_s_per_sample / per_round)), per_round


def data_bound(setting: Setting, resnet_rows: list[dict[str, Any]], base: Path) -> dict[str, Any]:
    """ResNet-18 with heavy augmentation at the smallest worker count, num_workers 0 and 2."""
    workers = min(setting.workers)
    out: dict[str, Any] = {"workers": workers, "device": setting.device, "rows": []}
    ref = next(
        (r for r in resnet_rows if r["workers"] == workers and r["trainer_samples_per_s"]), None
    )
    # the compute per sample of one worker, light loading included (negligible beside it)
    compute = workers / ref["trainer_samples_per_s"] if ref else 0.01
    rounds, per_round = _calibrate(compute, setting.sizes.image_size)
    out.update(
        augment_rounds=rounds,
        augment_ms_per_sample=round(rounds * per_round * 1e3, 3),
        compute_ms_per_sample=round(compute * 1e3, 3),
        calibrated_from="the resnet18 row" if ref else "none (it failed): 10 ms assumed",
    )
    for nw in DATA_BOUND_NUM_WORKERS:
        run = Run("resnet18", setting, workers, nw, rounds, max_workers=workers)
        row: dict[str, Any] = {
            "num_workers": nw,
            "global_batch_size": run.global_batch,
            "oversubscribed": oversubscribed(setting, workers, nw, os.cpu_count() or 1),
        }
        t0 = time.monotonic()
        try:
            fig = run_trainer(run, base / f"data-bound-nw{nw}")
            row.update(
                samples_per_s=fig["samples_per_s"],
                compute_fraction=fig["compute_fraction"],
                data_s_per_step=fig["data_s_per_step"],
                step_s=fig["step_s"],
            )
        except Exception as e:
            row.update(samples_per_s=None, compute_fraction=None, error=f"{type(e).__name__}: {e}")
        row["wall_s"] = round(time.monotonic() - t0, 1)
        out["rows"].append(row)
    return out


def judge(result: dict[str, Any]) -> dict[str, Any]:
    """Each target: its threshold, the worst value seen, where, and whether it is met (None
    when nothing was measured)."""
    rows = [
        (arch, r) for arch, a in result["architectures"].items() for r in a["rows"] if "ratio" in r
    ]

    def worst(key: str, pick: Any) -> tuple[float | None, str | None, dict[str, Any]]:
        seen = [(r[key], f"{arch} {r['device']} w{r['workers']}", r) for arch, r in rows if r[key]]
        return pick(seen, key=lambda s: s[:2]) if seen else (None, None, {})

    ratio, at, ratio_row = worst("ratio", min)
    mem, mem_at, _ = worst("mem_ratio", max)
    incomplete = any(r["ratio"] is None or r["mem_ratio"] is None for _, r in rows)
    gains = []
    for db in result["data_bound"]:
        f = {r["num_workers"]: r["compute_fraction"] for r in db["rows"]}
        if f.get(0) is not None and f.get(2) is not None:
            gains.append(f[2] - f[0])
    gain = min(gains) if gains else None
    return {
        "throughput_ratio": {
            "target": f">= {TARGETS['throughput_ratio_min']} at every worker count",
            "worst": ratio,
            "at": at,
            "met": None if ratio is None else ratio >= TARGETS["throughput_ratio_min"],
            "complete": not incomplete,
            # DDP's own spread between that row's rounds: above the target's 5 % margin, the
            # machine moved more than the verdict can tell
            "worst_row_ddp_spread": ratio_row.get("ddp_spread"),
        },
        "peak_memory_ratio": {
            "target": f"<= {TARGETS['peak_memory_ratio_max']} x DDP's",
            "worst": mem,
            "at": mem_at,
            "met": None if mem is None else mem <= TARGETS["peak_memory_ratio_max"],
            "complete": not incomplete,
        },
        "num_workers_hides_loading": {
            "target": "data-bound compute fraction with num_workers 2 at least "
            f"{TARGETS['compute_fraction_gain_min']} above num_workers 0",
            "worst_gain": gain,
            "met": None if gain is None else gain >= TARGETS["compute_fraction_gain_min"],
        },
    }


# -- the run ------------------------------------------------------------------------------------
def _workers(text: str) -> tuple[int, ...]:
    try:
        values = tuple(sorted({int(x) for x in text.split(",") if x.strip()}))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"a comma-separated list of counts, got {text!r}"
        ) from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"worker counts must be 1 or more, got {text!r}")
    if any(max(values) % w for w in values):
        raise argparse.ArgumentTypeError(f"each worker count must divide the largest: {text!r}")
    return values


def settings(cfg: argparse.Namespace) -> list[Setting]:
    """The main device's setting (sized by the options), then the gloo one, if asked."""
    cpus = os.cpu_count() or 1
    out = []
    for main, device, workers in (
        (True, cfg.device, cfg.workers),
        (False, "cpu", cfg.gloo_workers),
    ):
        if not workers:
            continue
        sizes = SIZES["quick" if cfg.quick else device]
        if device == "cuda":  # the cores per GPU; the DataLoader's share of them
            per_gpu = max(1, cpus // max(1, torch.cuda.device_count()))
            threads, nw = per_gpu, min(4, max(0, per_gpu - 1))
        else:  # the cores shared among the largest number of workers
            threads, nw = max(1, cpus // max(workers)), 0
        launcher = "torchrun"
        if main:
            given = {
                "warmup": cfg.warmup,
                "steps": cfg.steps,
                "gpt_steps": cfg.steps,
                "resnet_micro": cfg.resnet_micro,
                "gpt_micro": cfg.gpt_micro,
                "seq_len": cfg.seq_len,
            }
            sizes = replace(sizes, **{k: v for k, v in given.items() if v is not None})
            threads = cfg.threads or threads
            nw = nw if cfg.num_workers is None else cfg.num_workers
            launcher = cfg.ddp_launcher or ("fork" if cfg.quick and device == "cpu" else launcher)
        max_gpus = cfg.max_gpus if main else 0
        out.append(Setting(device, workers, threads, nw, sizes, launcher, max_gpus or 0))
    return out


def measure(cfg: argparse.Namespace) -> tuple[dict[str, Any], bool]:
    """The result, and whether every run worked."""
    result: dict[str, Any] = {
        "benchmark": "models",
        "args": {k: v for k, v in vars(cfg).items() if k != "json"},
        "device": cfg.device,
        "torch": torch.__version__,
        "transformers": _version("transformers"),
        "cpu_count": os.cpu_count(),
        "cuda_devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        if torch.cuda.is_available()
        else [],
        "settings": [],
        "architectures": {arch: {"rows": []} for arch in ARCHS},
        "data_bound": [],
        "interrupted": False,
    }
    ok = True
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="edt-bench-models-") as tmp:
        base = Path(cfg.keep or tmp)
        try:
            for setting in settings(cfg):
                result["settings"].append({**asdict(setting), "workers": list(setting.workers)})
                for arch in ARCHS:
                    for w in setting.workers:
                        row = compare(arch, setting, w, cfg.rounds, base)
                        ok &= "error" not in row
                        result["architectures"][arch]["rows"].append(row)
                if setting.device == cfg.device:  # the data-bound runs: the main device's
                    resnet = [
                        r
                        for r in result["architectures"]["resnet18"]["rows"]
                        if r["device"] == setting.device
                    ]
                    db = data_bound(setting, resnet, base)
                    ok &= all("error" not in r for r in db["rows"])
                    result["data_bound"].append(db)
        except KeyboardInterrupt:  # the GPU check's limit: what was measured still counts
            result["interrupted"] = True
            ok = False
    for arch, a in result["architectures"].items():
        a["params"] = next((r["params"] for r in a["rows"] if r.get("params")), None)
        if arch == "gpt":
            a["config"] = dict(program.GPT)
    result["targets"] = judge(result)
    result["notes"] = notes(result)
    result["wall_s"] = round(time.monotonic() - t0, 1)
    return result, ok


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def notes(result: dict[str, Any]) -> list[str]:
    out = [
        "samples/s: the measured steps' samples over rank 0's wall time from the end of the "
        "warm-up to the end of the last step (data loading included), the same code on both "
        "sides; DDP launched by torch.distributed.run --standalone, the Trainer by "
        "LocalController",
        "peak memory: the largest per-worker peak; on CPU the worker process's ru_maxrss "
        "(interpreter, torch and, for gpt, transformers included), on CUDA "
        "max_memory_allocated",
        "cpu_ratio: DDP's CPU seconds per step (rank 0's process, all its threads) over the "
        "Trainer's; 1 or more: the Trainer does no more work per step. Less sensitive than "
        "samples/s to other load on the machine",
        "ddp_spread: (max - min) / median of the DDP side's samples/s over a row's rounds, "
        "the machine's own noise: a row whose spread is above 0.05 cannot tell a ratio of "
        "0.95 from 1.0; more --rounds narrow its median",
    ]
    if any(s["ddp_launcher"] == "fork" for s in result["settings"]):
        out.append(
            "DDP's workers forked from the benchmark (not torchrun: --ddp-launcher fork, "
            "--quick's default on the CPU): the same program, torch and transformers imported "
            "once; their ru_maxrss counts what they share with the benchmark process. The "
            "Trainer's workers are forked warm then too, from a fork server, as the service "
            "starts them"
        )
    cpus = result["cpu_count"]
    for arch, a in result["architectures"].items():
        for r in a["rows"]:
            if r["oversubscribed"]:
                out.append(
                    f"{arch} {r['device']} w{r['workers']}: oversubscribed: {r['workers']} "
                    f"workers x ({r['threads']} threads + {r['num_workers']} DataLoader "
                    f"workers) on {cpus} cores"
                )
    for db in result["data_bound"]:
        for r in db["rows"]:
            if r["oversubscribed"]:
                out.append(
                    f"data_bound {db['device']} num_workers {r['num_workers']}: oversubscribed "
                    f"({db['workers']} workers, {cpus} cores): loading and compute share cores"
                )
    if result["interrupted"]:
        out.append("interrupted (SIGINT): the rows not reached are missing")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--quick", action="store_true", help="1 and 2 workers, few small steps")
    ap.add_argument("--workers", type=_workers, default=None, help="counts (default 1,2,4)")
    ap.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        default="cuda" if torch.cuda.is_available() else "cpu",
    )
    ap.add_argument(
        "--gloo-workers",
        type=_workers,
        default=(),
        help="also these counts on the CPU (gloo, virtual devices), after --device's",
    )
    ap.add_argument("--warmup", type=int, default=None, help="steps before the measured ones")
    ap.add_argument("--steps", type=int, default=None, help="measured steps")
    ap.add_argument("--resnet-micro", type=int, default=None, help="images per micro-batch")
    ap.add_argument("--gpt-micro", type=int, default=None, help="sequences per micro-batch")
    ap.add_argument(
        "--seq-len", type=int, default=None, help=f"at most {program.GPT['n_positions']}"
    )
    ap.add_argument("--threads", type=int, default=None, help="torch threads per worker")
    ap.add_argument("--num-workers", type=int, default=None, help="DataLoader workers")
    ap.add_argument(
        "--ddp-launcher",
        choices=["torchrun", "fork"],
        default=None,
        help="how DDP's workers start (default torchrun; --quick on the CPU: fork, which "
        "imports torch and transformers once, here)",
    )
    ap.add_argument(
        "--max-gpus",
        type=int,
        default=None,
        help="the global batch in micro-batches, as a job's max_gpus (default: the largest of "
        "--workers); fewer workers accumulate micro-batches",
    )
    ap.add_argument("--rounds", type=int, default=1, help="DDP/Trainer pairs per row (median)")
    ap.add_argument("--keep", help="run in this folder and keep it (logs, reports)")
    cfg = ap.parse_args(argv)
    cfg.workers = cfg.workers or ((1, 2) if cfg.quick else (1, 2, 4))
    if cfg.device == "cuda":
        if not torch.cuda.is_available():
            ap.error("--device cuda: CUDA is not available")
        if max(cfg.workers) > torch.cuda.device_count():
            ap.error(f"--workers {cfg.workers}: {torch.cuda.device_count()} GPUs")
    if cfg.max_gpus is not None and cfg.max_gpus < max(cfg.workers):
        ap.error(f"--max-gpus must be at least the largest of --workers, {max(cfg.workers)}")
    if cfg.ddp_launcher == "fork" and cfg.device != "cpu":
        ap.error("--ddp-launcher fork: on the CPU only (a CUDA context does not survive a fork)")
    if cfg.seq_len is not None and not 1 <= cfg.seq_len <= program.GPT["n_positions"]:
        ap.error(f"--seq-len must be 1 to {program.GPT['n_positions']}")
    if any(v is not None and v < 1 for v in (cfg.resnet_micro, cfg.gpt_micro, cfg.threads)):
        ap.error("--resnet-micro, --gpt-micro and --threads must be 1 or more")
    if (cfg.warmup is not None and cfg.warmup < 1) or (cfg.steps is not None and cfg.steps < 1):
        ap.error("--warmup and --steps must be 1 or more")
    try:
        result, ok = measure(cfg)
    finally:
        _stop_warm()
    print_result(result, cfg.json)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
