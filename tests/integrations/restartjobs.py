"""Helpers of the integration tests.

A restart job's workers started the way the job's driver starts them (``python -m
jupyter_edt.runtime.worker program.py``): torchrun's environment,
a TCPStore this process hosts at MASTER_ADDR:MASTER_PORT (a fresh one at every start,
``TORCHELASTIC_USE_AGENT_STORE``), ``TORCHELASTIC_RESTART_COUNT`` one higher at each restart,
and jupyter-edt's variables (``EDT_LOG_DIR``, ``EDT_WORKER_ID``, ``EDT_RUN``, ...). The
programs are real scripts run by real interpreters, forked warm by the session's fork server
when a launcher is given, as the service's workers are; nothing of the integrations is
mocked."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
import torch.distributed as dist
from jobprograms import TORCHRUN_NAMES
from waiting import eventually_sync

from jupyter_edt.launch.base import ProcessHandle, ProcessSpec
from jupyter_edt.launch.local import LocalLauncher
from jupyter_edt.runtime.events import read_events

PROGRAMS = Path(__file__).parent / "programs"
# a cold worker imports torch and a framework (about 7 s on the 2-core dev machine, twice at
# once, and more when other tests share the cores), then trains for a second or two
START_S = 120.0

# what no worker may read from the test's own environment
_TORCHRUN = frozenset(TORCHRUN_NAMES) | {"TORCHELASTIC_USE_AGENT_STORE"}
QUIET = {
    "OMP_NUM_THREADS": "1",
    "CUDA_VISIBLE_DEVICES": "",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "PYTHONUNBUFFERED": "1",
}


class RestartJob:
    """One job: its RESULT_DIR and log directory, and its workers, started again at another
    size by `start` (the restart count goes up each time), by `launcher` (warm from a fork
    server, as the service starts them) or, without one, as cold interpreters."""

    def __init__(
        self,
        root: Path,
        program: str,
        env: Mapping[str, str] = {},
        launcher: Callable[[], LocalLauncher] | None = None,
    ) -> None:
        self.program = str(PROGRAMS / program)
        self.launcher = launcher() if launcher is not None else LocalLauncher(own_session=False)
        self.result_dir = root / "result"
        self.log_dir = root / "logs"
        self.out_dir = root / "out"
        for d in (self.result_dir, self.log_dir, self.out_dir):
            d.mkdir(parents=True, exist_ok=True)
        self.env = dict(env)
        self.restarts = -1
        self.workers = 0
        self.procs: list[ProcessHandle] = []
        self._store: Any = None

    def start(self, n: int, hold_at: int | None = None) -> list[ProcessHandle]:
        """Start `n` workers as the next start of the job's workers (the previous ones must
        have ended); with `hold_at` they wait at the end of that step for `release`."""
        assert all(p.returncode is not None for p in self.procs), "the old workers still run"
        self.restarts += 1
        self._store = dist.TCPStore(
            "127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=60)
        )
        self.release_file = self.out_dir / f"release-{self.restarts}"
        base = {k: v for k, v in os.environ.items() if k not in _TORCHRUN and "EDT" not in k}
        self.procs = []
        for rank in range(n):
            worker = f"w{self.workers}"
            self.workers += 1
            env = {
                **base,
                **QUIET,
                **self.env,
                "RANK": str(rank),
                "LOCAL_RANK": str(rank),
                "WORLD_SIZE": str(n),
                "LOCAL_WORLD_SIZE": str(n),
                "GROUP_RANK": "0",
                "GROUP_WORLD_SIZE": "1",
                "ROLE_NAME": "default",
                "ROLE_RANK": str(rank),
                "ROLE_WORLD_SIZE": str(n),
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(self._store.port),
                "TORCHELASTIC_RUN_ID": "job-1",
                "TORCHELASTIC_RESTART_COUNT": str(self.restarts),
                "TORCHELASTIC_MAX_RESTARTS": "0",
                "TORCHELASTIC_USE_AGENT_STORE": "True",
                "EDT_JOB_ID": "job-1",
                "EDT_JOB_KIND": "restart",
                "EDT_WORKER_ID": worker,
                "EDT_RUN": f"run{self.restarts}",
                "EDT_LOG_DIR": str(self.log_dir),
                "RESULT_DIR": str(self.result_dir),
                "TEST_OUT": str(self.out_dir),
            }
            if hold_at is not None:
                env["TEST_HOLD_AT"] = str(hold_at)
                env["TEST_HOLD_RELEASE"] = str(self.release_file)
            spec = ProcessSpec(
                job_id="job-1",
                name=worker,
                argv=[sys.executable, "-m", "jupyter_edt.runtime.worker", self.program],
                cwd=self.out_dir,
                log_dir=self.log_dir,
                env=env,
                devices=None,
                one_log=True,  # <worker>.out, stdout and stderr in one
            )
            self.procs.append(self.launcher.start_sync(spec))
        return self.procs

    def wait_held(self) -> None:
        """Until every worker waits at the hold step, having reported a step first."""
        eventually_sync(
            lambda: (
                self._check_alive()
                and all((self.out_dir / f"held-{r}").exists() for r in range(len(self.procs)))
                and any(e["type"] == "step" for e in self.run_events())
            ),
            "every worker held at its step after a step was reported",
            timeout=START_S,
        )
        for r in range(len(self.procs)):
            (self.out_dir / f"held-{r}").unlink()

    def release(self) -> None:
        self.release_file.touch()

    def signal(self, rank: int, sig: int = signal.SIGTERM) -> None:
        self.procs[rank].send_signal(sig)

    def wait(self, timeout: float = START_S) -> list[int]:
        """The workers' exit statuses, once all have ended (the output of any that failed in
        the assertion's message)."""
        deadline = time.monotonic() + timeout
        codes = []
        for p in self.procs:
            try:
                codes.append(p.wait_sync(max(0.1, deadline - time.monotonic())))
            except TimeoutError:
                codes.append(None)  # type: ignore[arg-type]
        if any(c != 0 for c in codes):
            raise AssertionError(f"exit statuses {codes}\n{self.output()}")
        return codes

    def events(self) -> list[dict[str, Any]]:
        return read_events(self.log_dir)

    def run_events(self, run: int | None = None) -> list[dict[str, Any]]:
        name = f"run{self.restarts if run is None else run}"
        return [e for e in self.events() if e.get("run") == name]

    def output(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-4000:]}"
            for p in sorted(self.log_dir.glob("*.out"))
        )

    def stop(self) -> None:
        for p in self.procs:
            if p.returncode is None:
                p.send_signal(signal.SIGKILL)
                with contextlib.suppress(TimeoutError):
                    p.wait_sync(10)

    def _check_alive(self) -> bool:
        dead = [p.returncode for p in self.procs if p.returncode is not None]
        if dead:
            raise AssertionError(f"a worker ended early ({dead})\n{self.output()}")
        return True


def load_program(name: str) -> ModuleType:
    """A program's module, to run it in this process (`main()`) as a plain single process."""
    spec = importlib.util.spec_from_file_location(f"program_{Path(name).stem}", PROGRAMS / name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def in_process(cwd: Path, env: Mapping[str, str]) -> Iterator[None]:
    """Run a program here: in `cwd`, with `env` on top of an environment without any job's or
    torchrun's variable, all of it (and torch's thread count) put back afterwards."""
    saved_env, saved_cwd, threads = dict(os.environ), Path.cwd(), torch.get_num_threads()
    for key in list(os.environ):
        if key in _TORCHRUN or "EDT" in key or key == "RESULT_DIR":
            del os.environ[key]
    os.environ.update({**QUIET, **env})
    os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        torch.set_num_threads(threads)


# Both programs train 2 epochs of 8 optimizer steps of 8 samples (4 per device).
STEPS, STEPS_PER_EPOCH, GLOBAL_BATCH = 16, 8, 8
# where the two restarts stop the job: inside the first epoch, then inside the second
FIRST_STOP, SECOND_STOP = 5, 11


def shrink_then_grow(job: RestartJob) -> None:
    """The job's life through two resizes, as the service drives a restart job: 2 workers,
    then 1, then 2 to the end. Each resize signals the workers while they wait at a known step
    (the test's hold), so the stop step is known; the first one signals rank 1 alone, so only
    the ranks' agreement stops rank 0 too. Nothing after ``train()`` / ``fit()`` may run
    before the end (the program saves its final parameters there)."""
    final = job.out_dir / "final.pt"
    job.start(2, hold_at=FIRST_STOP)
    job.wait_held()
    job.signal(1)
    job.release()
    assert job.wait() == [0, 0]
    assert not final.exists(), "the code after training ran at a restart"

    job.start(1, hold_at=SECOND_STOP)
    job.wait_held()
    job.signal(0)
    job.release()
    assert job.wait() == [0]
    assert not final.exists(), "the code after training ran at a restart"

    job.start(2)
    assert job.wait() == [0, 0]
    assert final.exists()
    for stopped in ("w0", "w1", "w2"):  # the workers of the first two starts
        assert "training over" not in (job.log_dir / f"{stopped}.out").read_text()


def assert_resumed_exactly(job: RestartJob) -> list[dict[str, Any]]:
    """What `shrink_then_grow` must leave in the job's events, read as the service reads them
    (its metric records and progress): every optimizer step reported exactly once, in order,
    each start at the step the previous one checkpointed, the same global batch at every size
    (the accumulation doubled on one worker), and an epoch record with validation per epoch.
    Returns the job's events."""
    from jupyter_edt.jobs.metrics import MetricRecords
    from jupyter_edt.jobs.progress import JobProgress

    events = job.events()
    records = MetricRecords().pick(events)
    steps = [r for r in records if r["type"] == "step"]
    assert [r["global_step"] for r in steps] == list(range(STEPS))
    assert all(isinstance(r["loss"], float) and r["loss"] == r["loss"] for r in steps)
    assert [(r["epoch"], r["step"]) for r in steps] == [
        divmod(s, STEPS_PER_EPOCH) for s in range(STEPS)
    ]
    assert [r["run"] for r in steps] == ["run0"] * 5 + ["run1"] * 6 + ["run2"] * 5

    begins = [r for r in records if r["type"] == "train_begin"]
    assert [
        (
            b["world_size"],
            b["gradient_accumulation_steps"],
            b["effective_batch_size"],
            b["global_step"],
        )
        for b in begins
    ] == [
        (2, 1, GLOBAL_BATCH, 0),
        (1, 2, GLOBAL_BATCH, FIRST_STOP),
        (2, 1, GLOBAL_BATCH, SECOND_STOP),
    ]

    stops = [e for e in events if e["type"] == "checkpoint"]
    assert [(e["global_step"], e["reason"], e["run"]) for e in stops] == [
        (FIRST_STOP, "restart", "run0"),
        (SECOND_STOP, "restart", "run1"),
    ]
    resumed = [(e["global_step"], e["path"], e["run"]) for e in events if e["type"] == "resumed"]
    assert resumed == [(e["global_step"], e["path"], f"run{i + 1}") for i, e in enumerate(stops)]
    ends = [e for e in events if e["type"] == "train_end"]
    assert [(e["global_step"], e["run"]) for e in ends] == [(STEPS, "run2")]

    epochs = [r for r in records if r["type"] == "epoch"]
    assert [r["epoch"] for r in epochs] == [0, 1]
    assert all(isinstance(r["val_loss"], float) for r in epochs)

    progress = JobProgress()
    for record in records:
        progress.observe(record)
    assert (progress.global_step, progress.total_steps) == (STEPS, STEPS)
    assert set(progress.steps_per_s) == {1, 2}
    return events


def assert_same_parameters(path: Path, reference: dict[str, torch.Tensor], atol: float) -> None:
    """The parameters a job ended with, against those of one uninterrupted process."""
    params = torch.load(path, map_location="cpu")
    assert params.keys() == reference.keys()
    for name, value in reference.items():
        torch.testing.assert_close(params[name], value, rtol=0, atol=atol, msg=name)


def stop_at_an_epochs_end(program: ModuleType, root: Path) -> list[dict[str, Any]]:
    """The program as one worker of a job, in this process: SIGTERM at the last step of the
    first epoch, then a restart that finishes. Returns the job's metric records (asserted: the
    stop waited for the epoch's end and evaluation, and no step was lost or repeated)."""
    from jupyter_edt.jobs.metrics import MetricRecords

    logs, out = root / "logs", root / "out"
    out.mkdir()
    env = {
        "EDT_LOG_DIR": str(logs),
        "RESULT_DIR": str(root / "result"),
        "EDT_WORKER_ID": "w0",
        "EDT_RUN": "run0",
        "TEST_OUT": str(out),
        "TEST_ACCUMULATION": "2",
        "TEST_SIGTERM_AT": str(STEPS_PER_EPOCH),
    }
    before = signal.getsignal(signal.SIGTERM)
    with in_process(out, env), pytest.raises(SystemExit) as stopped:
        program.main()
    assert stopped.value.code in (0, None)
    assert signal.getsignal(signal.SIGTERM) == before
    assert not (out / "final.pt").exists()
    restart = {**env, "EDT_RUN": "run1", "TORCHELASTIC_RESTART_COUNT": "1", "TEST_SIGTERM_AT": ""}
    with in_process(out, restart):
        program.main()

    events = read_events(logs)
    records = MetricRecords().pick(events)
    assert [r["global_step"] for r in records if r["type"] == "step"] == list(range(STEPS))
    epochs = [
        (r["epoch"], r["run"], isinstance(r.get("val_loss"), float))
        for r in records
        if r["type"] == "epoch"
    ]
    assert epochs == [(0, "run0", True), (1, "run1", True)]
    stops = [(e["global_step"], e["run"]) for e in events if e["type"] == "checkpoint"]
    assert stops == [(STEPS_PER_EPOCH, "run0")]
    assert [e["global_step"] for e in events if e["type"] == "resumed"] == [STEPS_PER_EPOCH]
    return records
