"""Smoke test of the latency benchmark's command line: one round, warm processes only."""

from __future__ import annotations

from benchruns import bench_json

from jupyter_edt.bench.latency import FIGURES


def test_latency_quick_prints_each_figure_of_one_round() -> None:
    result = bench_json("latency", "--quick", timeout=420)
    assert result["reps"] == 1
    for figure in FIGURES:
        value = result[f"warm_{figure}"]
        assert 0 < value < 120, (figure, result)
        assert result[f"warm_{figure}_values"] == [value]
