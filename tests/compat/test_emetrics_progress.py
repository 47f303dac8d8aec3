"""A WMLA program's emetrics in the notebook: ``Job.wait``'s progress line shows them, and the
records the charts' jest tests read (src/__tests__/fixtures/emetrics.json) are the ones the
server makes from real emetrics lines (``compat.formats``).

The JobWidget's chart series are made in the browser by ``src/charts/series.ts`` (shared with
the lab's job detail tab), from these same records.
Regenerate the fixture after a format change:
``.venv/bin/python tests/compat/test_emetrics_progress.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jupyter_edt.compat.formats import emetrics_line, emetrics_records
from jupyter_edt.notebook import Job
from jupyter_edt.notebook.progress import MetricsTracker, emetrics_values, format_line

FIXTURE = Path(__file__).resolve().parents[2] / "src/__tests__/fixtures/emetrics.json"

JOB_DATA = {
    "id": "a1b2c3d4e5f6",
    "user": "alice",
    "name": "wmla",
    "state": "RUNNING",
    "reason": "started",
    "spec": {},
    "min_gpus": 1,
    "max_gpus": 2,
    "priority": 0,
    "devices": ["gpu0", "gpu1"],
    "rescaled": None,
    "created": 1.0,
    "updated": 1.0,
    "finished": None,
}


def emetrics_file_lines() -> list[str]:
    """What a tutorial-style EDTLoggerCallback writes: train loss and accuracy (a percentage)
    every iteration, test values each epoch (3 iterations), one string value, and a second
    process's copy of the iterations the first already logged."""
    lines = []
    ms = 1_700_000_000_000
    for it in range(1, 7):
        loss, acc = round(2.0 / it, 4), round(50.0 + 7.5 * it, 2)
        values: dict[str, Any] = {"loss": loss, "accuracy": acc}
        if it == 1:
            values["phase"] = "warmup"
        lines.append(emetrics_line("wmla-1", "train", it, values, rindex=it, now_ms=ms + it))
        if it % 3 == 0:
            test = {"loss": round(2.2 / it, 4), "accuracy": round(48.0 + 7.0 * it, 2)}
            lines.append(emetrics_line("wmla-1", "test", it, test, rindex=it, now_ms=ms + it))
    for it in (4, 5):  # worker 1's file, read after the driver's
        values = {"loss": 9.0, "accuracy": 1.0}
        lines.append(
            emetrics_line("wmla-1", "train", it, values, rindex=it, subid="1", now_ms=ms + it)
        )
    return lines


def served_records() -> list[dict[str, Any]]:
    """The records GET jobs/{id}/metrics answers for those lines (ids in order)."""
    return [{"id": i, **r} for i, r in enumerate(emetrics_records(emetrics_file_lines()), 1)]


def without_time_stamp(line: str) -> dict[str, Any]:
    """A line's JSON without ``etimes.time_stamp`` (the wall clock at writing)."""
    data = json.loads(line)
    data["etimes"].pop("time_stamp")
    return data


def test_the_jest_fixture_holds_what_the_server_makes_of_real_emetrics_lines():
    fixture = json.loads(FIXTURE.read_text())
    assert fixture["records"] == served_records()
    assert [without_time_stamp(x) for x in fixture["lines"]] == [
        without_time_stamp(x) for x in emetrics_file_lines()
    ]
    assert [{"id": i, **r} for i, r in enumerate(emetrics_records(fixture["lines"]), 1)] == (
        fixture["records"]
    )
    first = fixture["records"][0]
    assert (first["type"], first["group"], first["iteration"]) == ("emetrics", "train", 1)
    assert emetrics_values(first) == {"loss": 2.0, "accuracy": 57.5}  # not "phase"


def test_the_progress_line_of_a_program_that_reports_only_emetrics():
    job = Job(None, JOB_DATA)  # type: ignore[arg-type]
    tracker = MetricsTracker()
    assert format_line(job, tracker, 5).endswith("GPUs 2/2 | 0:00:05")
    records = served_records()
    tracker.add(records[:4])  # train 1-3 and the test of iteration 3
    line = format_line(job, tracker, 65)
    assert line == (
        "wmla [a1b2c3d4e5f6] RUNNING | GPUs 2/2 | iteration 3 | loss 0.6667 accuracy 72.5"
        " | test loss 0.7333 accuracy 69 | 0:01:05"
    )
    tracker.add(records[4:])  # to iteration 6, then worker 1's copies of 4 and 5
    line = format_line(job, tracker, 65)
    assert "| iteration 6 | loss 0.3333 accuracy 95 | test loss 0.3667 accuracy 90 |" in line


def test_runtime_records_keep_their_place_beside_emetrics():
    """A FabricModel job has both: its step and epoch records speak for train and validation,
    the emetrics do not repeat them."""
    job = Job(None, {**JOB_DATA, "spec": {"env": {"EDT_EPOCHS": "2"}}})  # type: ignore[arg-type]
    tracker = MetricsTracker()
    tracker.add(
        [
            {"type": "step", "rank": 0, "epoch": 0, "step": 2, "global_step": 2, "loss": 0.5},
            *served_records()[:4],
        ]
    )
    line = format_line(job, tracker, 1)
    assert "epoch 1/2" in line and "step 3 | loss 0.5 |" in line
    assert "iteration" not in line and "| test loss 0.7333 accuracy 69 |" in line
    tracker.add([{"type": "epoch", "rank": 0, "epoch": 0, "val_loss": 0.25}])
    line = format_line(job, tracker, 1)
    assert "val_loss 0.25" in line and "test loss" not in line


if __name__ == "__main__":
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    data = {"lines": emetrics_file_lines(), "records": served_records()}
    FIXTURE.write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {FIXTURE}")
