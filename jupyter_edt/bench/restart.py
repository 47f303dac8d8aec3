"""A restart job's resizes, against torchrun's own restart: `python -m jupyter_edt.bench.restart`.

A Hugging Face ``Trainer`` program (`restart_program.py`: a 1-layer GPT-2 from its config,
made-up tokens, `prepare_trainer`, a global batch of 16) runs as a ``restart`` job of a real
`jupyter edt serve` on 4 virtual GPUs, resized at once (``restart_interval`` 0,
``restart_cost`` 0, ``min_rescale_interval`` 0): 4 -> 2 by ``PATCH max_gpus=2``, then 2 -> 4 by
``max_gpus=4``, each after `SETTLE_STEPS` steps at its size; then it is let finish. Once with
warm processes (the fork server, ``warm_workers``) and once without (cold). Then the same script
under torchrun on this machine (``--nnodes=1:4 --nproc-per-node=2 --max-restarts=3``, c10d
rendezvous, Hugging Face's own checkpoint every 50 steps and its resume from the newest), one
worker SIGKILLed half way between two checkpoints.

Every step time comes from the file the program's rank 0 appends to at each optimizer step's end
(``time.time()``; the same instrument on both sides). Figures:

- ``<warm|cold>_<shrink|grow>_decision_to_first_step_s``: from the PATCH (the decision) to the
  first step at the new size. ``<warm|cold>.breakdown``: the PATCH to the service's allocation
  (``allocation_s``), the driver's SIGTERM to the old workers' exit after their checkpoint
  (``stop_s``, from ``status.json``'s ``restart_history``), that to the new workers'
  ``train_begin`` record (``start_s``: processes, imports, the Trainer, the group), that to
  their first step (``resume_s``).
- ``steps_lost`` / ``steps_repeated``: global steps missing from, and reported more than once
  in, the job's metrics (``type: step``) from step 0 to its last; both must be 0, and the job
  must have SUCCEEDED (``succeeded``). ``global_batch``: each start's ``train_begin`` record
  (world size, accumulation, effective batch), the same at every size
  (``global_batch_constant``).
- ``torchrun``: the SIGKILL to the first step of the restarted workers
  (``kill_to_first_step_s``; ``recovered`` false and null when none came within 240 s), the
  steps done since the last checkpoint and done again (``steps_lost``, ``lost_work_s``), its
  restart count at that step (more than 1: a restart failed), its first start's wait.

`--quick` (the test's, about 30 s here): warm only, no torchrun, fewer steps per size.
`--keep DIR`: the services' directories, step files and torchrun's log (``LOGLEVEL=INFO``) kept.

Measured on this project's 2-core machine (2026-12-03, other tests sharing it). Warm, with the
fork server importing ``transformers.trainer`` (``warm_imports``) and the workers that stop
for a restart ending at once (``StopForRestart``), one full run:

| PATCH to the first step at the new size | warm | cold | target (warm) |
| --- | --- | --- | --- |
| shrink 4 -> 2 | 1.33 s | 11.0 s | <= 3 s |
| grow 2 -> 4 | 1.88 s | 18.7 s | <= 3 s |

Warm: the allocation 0.01 s, the old workers' agreement, checkpoint and exit 0.32 / 0.48 s,
the new workers' start to ``train_begin`` 0.78 / 1.20 s, their first step 0.13 / 0.09 s after
that. Before the fork server imported transformers, the warm start alone took 3.3 to 6.7 s
(``import transformers``: 2.2 s of CPU a process). Steps lost and repeated 0 in every run,
SUCCEEDED, the global batch 16 at each start (4 workers x 4 x accumulation 1; 2 x 4 x 2).

torchrun (``--nnodes=1:4``: each rendezvous waits its 30 s ``last_call_timeout`` for more nodes;
torch 2.13, gloo), from the SIGKILL to the first step: 80.5, 77.7, 38.5 and 39.1 s in four runs,
and in two more no step within 240 s (the new workers hung in gloo's connect). In two of the
runs that recovered, its first restart failed (gloo ``connectFullMesh``: connection refused; its
agent reuses one store for every round) and the second worked. 26 steps lost each time, done
again (2.8 to 3.6 s of work): those since its last periodic checkpoint.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from ..runtime.submission import EFFECTIVE_BATCH_ENV
from . import events, latency, print_result
from .latency import until

PROGRAM = Path(__file__).with_name("restart_program.py")
GLOBAL_BATCH = 16  # 4 per device: accumulation 1 on 4 workers, 2 on 2
SAVE_STEPS = 50  # restart_program.SAVE_STEPS (not imported: it imports transformers)
SETTLE_STEPS = 20  # steps at each size before the next change
QUICK_SETTLE_STEPS = 10  # the service's step rate at 4 forgets the first, slow step
DEADLINE_S = 240.0
TARGET = {"decision_to_first_step_warm_s": 3.0}
ENDED = ("SUCCEEDED", "FAILED", "CANCELLED")
QUIET = {
    "OMP_NUM_THREADS": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "PYTHONUNBUFFERED": "1",
}
# what the torchrun run must not inherit from a job this benchmark may itself run in
_INHERITED = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_", "TORCHELASTIC_", "GROUP_", "ROLE_")


class Step(NamedTuple):
    step: int
    world: int
    restart: int
    time: float


def read_steps(path: Path) -> list[Step]:
    """The step file's complete lines."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 4:
            out.append(Step(int(parts[0]), int(parts[1]), int(parts[2]), float(parts[3])))
    return out


def wait_step(
    path: Path, ok: Callable[[Step], bool], what: str, alive: Callable[[], None] | None = None
) -> Step:
    """The first step in `path` for which `ok(step)`; `alive` raises when none can come."""

    def probe() -> Step | None:
        if alive is not None:
            alive()
        return next((s for s in read_steps(path) if ok(s)), None)

    return until(probe, what, DEADLINE_S)


class Service(latency.Service):
    """A `jupyter edt serve` of its own on 4 virtual GPUs with the real driver, resizing a
    restart job as soon as asked."""

    def __init__(self, root: Path, warm: bool) -> None:
        settings = {
            "EDTService.restart_interval": 0.0,
            "EDTService.restart_cost": 0.0,
            # what a deployment of the integrations sets: the restarted workers' framework is
            # imported once, by the fork server
            "EDTService.warm_imports": ["transformers.trainer"] if warm else [],
        }
        super().__init__(root, warm, settings=settings)

    def store_events(self, job_id: str, kind: str) -> list[tuple[float, dict[str, Any]]]:
        with sqlite3.connect(self.root / "edt.sqlite", timeout=10) as db:
            rows = db.execute(
                "SELECT time, data FROM edt_events WHERE job_id = ? AND kind = ? ORDER BY id",
                (job_id, kind),
            ).fetchall()
        return [(t, json.loads(d)) for t, d in rows]

    def state(self, job_id: str) -> str:
        return self.call("GET", f"jobs/{job_id}")["state"]

    def running(self, job_id: str) -> Callable[[], None]:
        """For `wait_step`: raises once the job has ended (asked at most once a second)."""
        asked = [0.0]

        def check() -> None:
            if time.monotonic() - asked[0] < 1.0:
                return
            asked[0] = time.monotonic()
            job = self.call("GET", f"jobs/{job_id}")
            if job["state"] in ENDED:
                raise RuntimeError(f"job {job_id} ended: {job['state']} ({job.get('reason')})")

        return check


def service_run(root: Path, warm: bool, settle: int) -> dict[str, Any]:
    """The job through 4 -> 2 -> 4 on a service of its own; its figures."""
    service = Service(root, warm)
    steps_file, stop_file = root / "steps.txt", root / "stop"
    env = {
        **QUIET,
        EFFECTIVE_BATCH_ENV: str(GLOBAL_BATCH),
        "BENCH_STEP_FILE": str(steps_file),
        "BENCH_STOP_FILE": str(stop_file),
    }
    body = {
        "name": "restart-bench",
        "code": PROGRAM.read_text(),
        "kind": "restart",
        "max_gpus": 4,
        "env": env,
    }
    job = None
    try:
        submitted = time.time()
        job = service.call("POST", "jobs", body)["id"]
        alive = service.running(job)
        first = wait_step(steps_file, lambda s: s.world == 4, "the first step on 4", alive)
        out: dict[str, Any] = {"submit_to_first_step_s": round(first.time - submitted, 3)}
        since = first
        resizes = []
        for name, size in (("shrink", 2), ("grow", 4)):
            wait_step(steps_file, lambda s, a=since: s.step >= a.step + settle, "steps", alive)
            decided = time.time()
            service.call("PATCH", f"jobs/{job}", {"max_gpus": size})
            since = wait_step(
                steps_file,
                lambda s, n=size, t=decided: s.world == n and s.time >= t,
                f"{name}: the first step on {size}",
                alive,
            )
            out[f"{name}_decision_to_first_step_s"] = round(since.time - decided, 3)
            resizes.append((name, size, decided, since.time))
        wait_step(steps_file, lambda s, a=since: s.step >= a.step + settle, "steps", alive)
        stop_file.touch()
        until(lambda: service.state(job) in ENDED, "the end", 120)
        out["state"] = service.state(job)
        records = service.call("GET", f"jobs/{job}/metrics")["metrics"]
        out.update(judge_steps(records, read_steps(steps_file)))
        out["breakdown"] = breakdown(service, job, resizes, records)
        out["restart_events"] = [
            {k: e[k] for k in ("count", "cause", "world_size", "killed", "reason")}
            for _, e in service.store_events(job, "restart")
        ]
        job = None
        return out
    finally:
        if job is not None:  # a failed run: its workers must not outlive it
            with contextlib.suppress(Exception):
                service.call("POST", f"jobs/{job}/cancel", {})
                until(lambda: service.state(job) != "RUNNING", "cancelled", 60)
        service.stop()


def judge_steps(records: list[dict[str, Any]], file_steps: list[Step]) -> dict[str, Any]:
    """Lost and repeated steps in the job's metrics, the sizes it ran at, and each start's
    global batch."""
    steps = [r["global_step"] for r in records if r.get("type") == "step"]
    done = set(steps)
    runs: list[list[int]] = []  # [world size, first step, last step]
    for r in sorted(
        (r for r in records if r.get("type") == "step"), key=lambda r: r["global_step"]
    ):
        if runs and runs[-1][0] == r["world_size"]:
            runs[-1][2] = r["global_step"]
        else:
            runs.append([r["world_size"], r["global_step"], r["global_step"]])
    begins = [
        {
            "world_size": r["world_size"],
            "micro_batch_size": r["micro_batch_size"],
            "gradient_accumulation_steps": r["gradient_accumulation_steps"],
            "effective_batch_size": r["effective_batch_size"],
        }
        for r in records
        if r.get("type") == "train_begin"
    ]
    constant = bool(begins) and all(
        b["effective_batch_size"] == GLOBAL_BATCH
        and b["world_size"] * b["micro_batch_size"] * b["gradient_accumulation_steps"]
        == GLOBAL_BATCH
        for b in begins
    )
    return {
        "steps": len(done),
        "steps_lost": (max(done) + 1 - len(done)) if done else 0,
        "steps_repeated": len(steps) - len(done),
        "step_file_agrees": sorted(s.step for s in file_steps) == sorted(steps),
        "runs": runs,
        "global_batch": begins,
        "global_batch_constant": constant,
    }


def breakdown(
    service: Service, job: str, resizes: list[tuple], records: list[dict[str, Any]]
) -> dict[str, dict[str, float]]:
    """Where each resize's time went: the PATCH to the service's allocation (`allocation_s`),
    the driver's SIGTERM to the old workers' exit after their checkpoint (`stop_s`), that to
    the new workers' ``train_begin`` record (`start_s`: processes, imports, the Trainer, the
    group), that to their first step (`resume_s`: the checkpoint loaded, the first step)."""
    allocations = service.store_events(job, "allocation")
    status = json.loads((service.root / "jobs" / job / "status.json").read_text())
    history = status.get("restart_history", [])
    begins = [r["time"] for r in records if r.get("type") == "train_begin"]
    out = {}
    for name, size, decided, first in resizes:
        allocated = next(
            (t for t, d in allocations if t >= decided and len(d["devices"]) == size), None
        )
        restart = next(
            (r for r in history if r["world_size"] == size and r["asked"] >= decided), None
        )
        parts: dict[str, float] = {}
        if allocated is not None:
            parts["allocation_s"] = round(allocated - decided, 3)
        if restart is not None:
            parts["stop_s"] = round(restart["started"] - restart["asked"], 3)
            begun = next((t for t in begins if t >= restart["started"]), None)
            if begun is not None:
                parts["start_s"] = round(begun - restart["started"], 3)
                parts["resume_s"] = round(first - begun, 3)
        out[name] = parts
    return out


def worker_pids(agent: int) -> list[int]:
    """The processes whose parent is `agent` (torchrun's workers)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == agent:
                pids.append(int(stat.parent.name))
    return sorted(pids)


def torchrun_run(root: Path, settle: int) -> dict[str, Any]:
    """The same script under torchrun on 2 workers; one SIGKILLed half way between two of
    its checkpoints."""
    root.mkdir(parents=True)
    steps_file, stop_file = root / "steps.txt", root / "stop"
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(_INHERITED) and "EDT" not in k and k != "RESULT_DIR"
    }
    env = {
        **base,
        **QUIET,
        "CUDA_VISIBLE_DEVICES": "",  # a job's workers get theirs from the service
        "BENCH_ACCUMULATION": "2",  # 4 per device x 2 workers x 2 = the job's global batch
        "BENCH_STEP_FILE": str(steps_file),
        "BENCH_STOP_FILE": str(stop_file),
        "LOGLEVEL": "INFO",  # the agent's rendezvous and restarts, in torchrun.log
    }
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=1:4",
        "--nproc-per-node=2",
        "--max-restarts=3",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{events.free_port()}",
        str(PROGRAM),
    ]
    with (root / "torchrun.log").open("wb") as log:
        started = time.time()
        proc = subprocess.Popen(
            command, cwd=root, env=env, stdout=log, stderr=log, start_new_session=True
        )
    out: dict[str, Any] = {
        "command": " ".join(["torchrun", *command[3:-1], PROGRAM.name]),
        "save_steps": SAVE_STEPS,
    }

    def alive() -> None:
        if proc.poll() is not None:
            raise RuntimeError(f"torchrun exited ({proc.returncode}); see {root / 'torchrun.log'}")

    try:
        first = wait_step(steps_file, lambda s: True, "torchrun's first step", alive)
        out["start_to_first_step_s"] = round(first.time - started, 3)
        kill_at = SAVE_STEPS + SAVE_STEPS // 2  # half way from its first checkpoint to the next
        wait_step(steps_file, lambda s: s.step >= kill_at, f"step {kill_at}", alive)
        victim = worker_pids(proc.pid)[-1]
        killed = time.time()
        os.kill(victim, signal.SIGKILL)
        try:
            again = wait_step(
                steps_file, lambda s: s.restart > 0, "the restarted workers' step", alive
            )
        except (TimeoutError, RuntimeError) as err:  # torchrun's figure, not the benchmark's end
            out["killed_at_step"] = max(s.step for s in read_steps(steps_file))
            out.update(recovered=False, kill_to_first_step_s=None, error=str(err))
            return out
        before = max(s.step for s in read_steps(steps_file) if s.restart == 0)
        wait_step(steps_file, lambda s: s.step >= before + settle, "steps", alive)
        stop_file.touch()
        out["exit_code"] = proc.wait(120)
        steps = read_steps(steps_file)
        done = [s.step for s in steps]
        out.update(
            recovered=True,
            killed_at_step=before,
            resumed_at_step=again.step,
            kill_to_first_step_s=round(again.time - killed, 3),
            # torchrun's restart count at the first step after the kill: 1 unless a restart
            # failed (each one waits for the rendezvous again)
            restart_count_at_first_step=again.restart,
            steps_lost=before + 1 - again.step,
            steps_repeated=len(done) - len(set(done)),
            lost_work_s=round(
                sum(
                    b.time - a.time
                    for a, b in itertools.pairwise(steps)
                    if b.restart == 0 and again.step <= b.step <= before
                ),
                3,
            ),
        )
        return out
    finally:
        stop_torchrun(proc)


def stop_torchrun(proc: subprocess.Popen) -> None:
    """End torchrun and its workers (each in a session of its own, so not in its group): the
    agent is asked first, as a user's Ctrl-C would; whatever is left, SIGKILL."""
    if proc.poll() is not None:
        return
    workers = worker_pids(proc.pid)
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
    for pid in workers:
        with contextlib.suppress(OSError):
            if PROGRAM.name in Path(f"/proc/{pid}/cmdline").read_text():  # not a pid reused
                os.kill(pid, signal.SIGKILL)


def measure(quick: bool = False, keep: str | None = None) -> dict[str, Any]:
    settle = QUICK_SETTLE_STEPS if quick else SETTLE_STEPS
    modes = (True,) if quick else (True, False)
    result: dict[str, Any] = {
        "program": "GPT-2, 1 layer, HF Trainer + prepare_trainer, CPU (gloo)",
        "global_batch_size": GLOBAL_BATCH,
        "measured_from": "the step file rank 0 appends at each optimizer step's end",
    }
    with tempfile.TemporaryDirectory(prefix="edt-bench-restart-") as scratch:
        tmp = Path(keep or scratch)
        runs = {}
        for warm in modes:
            kind = "warm" if warm else "cold"
            runs[kind] = service_run(tmp / kind, warm, settle)
            for name in ("shrink", "grow"):
                figure = f"{name}_decision_to_first_step_s"
                result[f"{kind}_{figure}"] = runs[kind][figure]
        result["steps_lost"] = max(r["steps_lost"] for r in runs.values())
        result["steps_repeated"] = max(r["steps_repeated"] for r in runs.values())
        result["succeeded"] = all(r["state"] == "SUCCEEDED" for r in runs.values())
        result["global_batch_constant"] = all(r["global_batch_constant"] for r in runs.values())
        result.update(runs)
        if not quick:
            result["torchrun"] = torchrun_run(tmp / "torchrun", settle)
    warm = [
        result["warm_shrink_decision_to_first_step_s"],
        result["warm_grow_decision_to_first_step_s"],
    ]
    result["target"] = TARGET
    result["target_met"] = max(warm) <= TARGET["decision_to_first_step_warm_s"]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--quick", action="store_true", help="warm only, no torchrun, fewer steps per size"
    )
    parser.add_argument("--keep", help="run in this directory and keep it")
    args = parser.parse_args(argv)
    print_result(measure(args.quick, args.keep), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
