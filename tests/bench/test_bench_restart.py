"""Smoke test of the restart benchmark's command line: one warm run of its Hugging Face restart
job through 4 -> 2 -> 4 on a real service (no torchrun), judged by what must hold whatever the
machine's speed: no step lost or repeated, the same global batch at every size, SUCCEEDED."""

from __future__ import annotations

import pytest
from benchruns import bench_json

pytest.importorskip("transformers")

FIGURES = ("warm_shrink_decision_to_first_step_s", "warm_grow_decision_to_first_step_s")


def test_restart_quick_resizes_a_trainer_without_losing_a_step() -> None:
    result = bench_json("restart", "--quick", timeout=280)
    for figure in FIGURES:
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
