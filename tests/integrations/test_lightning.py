"""The Lightning integration with a real ``lightning.pytorch.Trainer`` (DDP over gloo) in real
worker processes: a restart job shrinks and grows again without losing or repeating a step,
keeping the effective batch it was given, Lightning's own SIGTERM handling kept out of the way,
and ends with an uninterrupted run's parameters; the same program is untouched outside a job; an
effective batch that cannot be kept is refused."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from restartjobs import (
    FIRST_STOP,
    GLOBAL_BATCH,
    SECOND_STOP,
    STEPS,
    RestartJob,
    assert_resumed_exactly,
    assert_same_parameters,
    in_process,
    load_program,
    shrink_then_grow,
    stop_at_an_epochs_end,
)

PROGRAM = "lightning_regression.py"
# how far the final parameters may be from an uninterrupted run's (float32 sums in another order)
ATOL = 1e-5


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The program run once in this process, outside any job, on one device with the
    accumulation that gives the jobs' global batch (2 x 4): what it did and left."""
    root = tmp_path_factory.mktemp("lightning_plain")
    before = signal.getsignal(signal.SIGTERM)
    with in_process(root, {"TEST_OUT": str(root), "TEST_ACCUMULATION": "2"}):
        trainer = load_program(PROGRAM).main()
    return {
        "root": root,
        "trainer": trainer,
        "sigterm": (before, signal.getsignal(signal.SIGTERM)),
        "params": torch.load(root / "final.pt"),
    }


def test_outside_a_job_the_callback_changes_nothing(uninterrupted: dict[str, Any]) -> None:
    from jupyter_edt.integrations.lightning import EDTCallback

    trainer = uninterrupted["trainer"]
    assert any(isinstance(cb, EDTCallback) for cb in trainer.callbacks)
    assert not hasattr(trainer, "_edt_prepared")
    assert trainer.global_step == STEPS
    assert trainer.accumulate_grad_batches == 2
    before, after = uninterrupted["sigterm"]
    assert after == before
    root: Path = uninterrupted["root"]
    assert not list(root.rglob("events-*.jsonl"))
    assert not list(root.rglob("checkpoint-*"))


def test_a_restart_job_resumes_at_the_agreed_step_with_the_same_global_batch(
    restart_job: Callable[..., RestartJob], uninterrupted: dict[str, Any]
) -> None:
    job = restart_job(PROGRAM, {"EDT_EFFECTIVE_BATCH_SIZE": str(GLOBAL_BATCH)})
    shrink_then_grow(job)
    assert_resumed_exactly(job)

    checkpoints = job.result_dir / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == [
        f"checkpoint-{SECOND_STOP}.ckpt",
        f"checkpoint-{FIRST_STOP}.ckpt",
    ]
    # Lightning's handler would have broadcast from inside the signal and stopped without a
    # checkpoint; it never ran
    assert "Received SIGTERM" not in job.output()
    # a seeded DistributedSampler: the same samples per step at any size, once the
    # interrupted epoch's batches are skipped
    assert_same_parameters(job.out_dir / "final.pt", uninterrupted["params"], atol=ATOL)


def test_a_stop_at_an_epochs_last_step_waits_for_the_epochs_end(
    tmp_path: Path, uninterrupted: dict[str, Any]
) -> None:
    stop_at_an_epochs_end(load_program(PROGRAM), tmp_path)
    assert_same_parameters(tmp_path / "out" / "final.pt", uninterrupted["params"], atol=ATOL)


def test_an_effective_batch_that_does_not_divide_is_refused(tmp_path: Path) -> None:
    env = {
        "EDT_LOG_DIR": str(tmp_path / "logs"),
        "RESULT_DIR": str(tmp_path / "result"),
        "EDT_EFFECTIVE_BATCH_SIZE": "6",
        "TEST_OUT": str(tmp_path),
    }
    before = signal.getsignal(signal.SIGTERM)
    with in_process(tmp_path, env):
        program = load_program(PROGRAM)
        with pytest.raises(
            ValueError, match=r"effective batch of 6 .* per-device batch of 4 on 1 "
        ):
            program.main()
    assert signal.getsignal(signal.SIGTERM) == before
    assert not (tmp_path / "final.pt").exists()
