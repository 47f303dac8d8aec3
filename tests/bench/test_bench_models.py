"""bench.models' verdicts over given rows (the runs themselves: the GPU check's dry run)."""

from __future__ import annotations

import pytest

from jupyter_edt.bench import models


def row(workers: int, ratio: float, ddp: list[float]) -> dict:
    return {
        "workers": workers,
        "device": "cpu",
        "ratio": ratio,
        "mem_ratio": 0.99,
        "ddp_spread": models.spread(ddp),
    }


def test_the_worst_ratio_is_judged_with_the_noise_of_its_row() -> None:
    result = {
        "architectures": {
            "resnet18": {"rows": [row(1, 0.99, [100.0, 101.0, 99.0])]},
            "gpt": {"rows": [row(1, 0.97, [500.0]), row(2, 0.93, [700.0, 630.0, 770.0])]},
        },
        "data_bound": [],
    }
    verdict = models.judge(result)["throughput_ratio"]
    assert verdict["worst"] == 0.93 and verdict["at"] == "gpt cpu w2"
    assert verdict["met"] is False
    assert verdict["worst_row_ddp_spread"] == pytest.approx(0.2)


def test_one_round_has_no_spread() -> None:
    assert models.spread([640.0]) is None
    assert models.spread([90.0, 110.0, 100.0]) == pytest.approx(0.2)
