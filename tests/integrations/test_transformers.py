"""The Hugging Face integration with a real ``Trainer`` (a one-layer GPT-2 from its config) in
real worker processes over gloo: a restart job shrinks and grows again without losing or
repeating a step, with the global batch of an uninterrupted run and its final parameters; the
same program is untouched outside a job; an effective batch that cannot be kept is refused."""

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

PROGRAM = "hf_gpt2.py"
# how far the final parameters may be from an uninterrupted run's (float32 sums in another order)
ATOL = 1e-6


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The program run once in this process, outside any job, on one device with the
    accumulation that gives the jobs' global batch (2 x 4): what it did and left."""
    root = tmp_path_factory.mktemp("hf_plain")
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
    from jupyter_edt.integrations.transformers import EDTCallback

    trainer = uninterrupted["trainer"]
    assert any(isinstance(cb, EDTCallback) for cb in trainer.callback_handler.callbacks)
    assert trainer.state.global_step == STEPS
    assert trainer.args.gradient_accumulation_steps == 2
    assert trainer.args.output_dir == "trainer_output"
    before, after = uninterrupted["sigterm"]
    assert after == before
    root: Path = uninterrupted["root"]
    assert not list(root.rglob("events-*.jsonl"))
    assert not list(root.rglob("checkpoint-*"))


def test_a_restart_job_resumes_at_the_agreed_step_with_the_same_global_batch(
    restart_job: Callable[..., RestartJob], uninterrupted: dict[str, Any]
) -> None:
    job = restart_job(PROGRAM)  # no effective batch given: the first start's is kept
    shrink_then_grow(job)
    assert_resumed_exactly(job)

    checkpoints = job.result_dir / "checkpoints"
    for step in (FIRST_STOP, SECOND_STOP):  # the Trainer's own, with what resuming needs
        saved = {p.name for p in (checkpoints / f"checkpoint-{step}").iterdir()}
        assert {"trainer_state.json", "optimizer.pt", "scheduler.pt"} <= saved
    record = (checkpoints / "effective_batch.json").read_text()
    assert f'"effective_batch": {GLOBAL_BATCH}' in record
    # accelerate deals one seeded order of batches round-robin: the same samples at any size
    assert_same_parameters(job.out_dir / "final.pt", uninterrupted["params"], atol=ATOL)


def test_a_stop_at_an_epochs_last_step_waits_for_the_epochs_end(
    tmp_path: Path, uninterrupted: dict[str, Any]
) -> None:
    stop_at_an_epochs_end(load_program(PROGRAM), tmp_path)
    assert_same_parameters(tmp_path / "out" / "final.pt", uninterrupted["params"], atol=ATOL)


def test_an_effective_batch_that_does_not_divide_is_refused(tmp_path: Path) -> None:
    from jupyter_edt.integrations.transformers import prepare_trainer

    env = {
        "EDT_LOG_DIR": str(tmp_path / "logs"),
        "RESULT_DIR": str(tmp_path / "result"),
        "EDT_EFFECTIVE_BATCH_SIZE": "6",
    }
    with in_process(tmp_path, env):
        trainer = load_program(PROGRAM).build()
        with pytest.raises(
            ValueError, match=r"effective batch of 6 .* per-device batch of 4 on 1 "
        ):
            prepare_trainer(trainer)
