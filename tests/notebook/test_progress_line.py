"""The notebook's progress line says a job's progress as the sidebar and the job tab do
(src/jobs/progress.ts): ``epoch e/E · step s/S``, ``step`` within the epoch, with the totals the
runtime reported when training began, whatever the submission asked."""

from __future__ import annotations

from jupyter_edt.notebook import Job
from jupyter_edt.notebook.progress import MetricsTracker, format_line

JOB = {
    "id": "a1b2c3d4e5f6",
    "name": "digits",
    "state": "RUNNING",
    "max_gpus": 2,
    "devices": ["gpu0", "gpu1"],
    "spec": {"env": {"EDT_EPOCHS": "9"}},  # the submission's; the runtime's 4 wins
}


def test_the_line_says_epoch_and_step_of_the_epoch_with_the_runtimes_totals():
    tracker = MetricsTracker()
    tracker.add(
        [
            {"type": "train_begin", "rank": 0, "epochs": 4, "steps_per_epoch": 10},
            {"type": "step", "rank": 0, "epoch": 1, "step": 4, "global_step": 14, "loss": 0.25},
        ]
    )
    line = format_line(Job(None, JOB), tracker, 65)  # type: ignore[arg-type]
    # 15 of 40 steps: 38 % of the bar
    assert line == (
        "digits [a1b2c3d4e5f6] RUNNING | GPUs 2/2 | [########------------]  38% epoch 2/4 · "
        "step 5/10 | loss 0.25 | 0:01:05"
    )


def test_without_the_runtimes_totals_the_submissions_epochs_are_used():
    tracker = MetricsTracker()
    tracker.add([{"type": "step", "rank": 0, "epoch": 0, "step": 2, "global_step": 2}])
    line = format_line(Job(None, JOB), tracker, 1)  # type: ignore[arg-type]
    assert "epoch 1/9 · step 3 |" in line
