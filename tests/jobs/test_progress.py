"""What goodput learns online about a job, from its metric records."""

from __future__ import annotations

from jupyter_edt.jobs.progress import ProgressBook


def test_remaining_steps_and_speed_per_gpu_count_are_learnt_from_records():
    book = ProgressBook()
    book.observe(
        "j", [{"type": "train_begin", "epochs": 3, "steps_per_epoch": 10, "global_step": 0}]
    )
    assert book.get("j").remaining_steps == 30.0
    book.observe(
        "j", [{"type": "step", "global_step": s, "world_size": 2, "step_s": 0.5} for s in range(4)]
    )
    book.observe("j", [{"type": "step", "global_step": 4, "world_size": 4, "step_s": 0.25}])
    book.observe("j", [{"type": "epoch", "epoch": 0, "val_loss": 1.0}])  # no speed in it
    progress = book.get("j")
    assert progress.remaining_steps == 25.0
    assert progress.steps_per_s == {2: 2.0, 4: 4.0}
    book.observe("j", [{"type": "step", "global_step": 5, "world_size": 4, "step_s": 0.5}])
    assert progress.steps_per_s[4] == 0.8 * 4.0 + 0.2 * 2.0  # smoothed, not replaced
    assert book.get("other") is None


def test_a_restart_costs_from_its_decision_to_the_first_step_of_the_next_run():
    book = ProgressBook()
    book.observe("j", [{"type": "step", "global_step": 4, "run": "a", "time": 100.0}])
    book.restart_asked("j", 101.0)
    # the old run's workers finish the step they were in after the decision: not the restart
    book.observe("j", [{"type": "step", "global_step": 5, "run": "a", "time": 101.5}])
    assert book.get("j").restart_cost_s is None
    book.observe("j", [{"type": "step", "global_step": 6, "run": "a.1", "time": 108.0}])
    assert book.get("j").restart_cost_s == 7.0
    book.observe("j", [{"type": "step", "global_step": 7, "run": "a.1", "time": 108.5}])
    assert book.get("j").restart_cost_s == 7.0  # measured once per restart
