"""Smoke test of the runtime benchmark's command line (small model)."""

from __future__ import annotations

import json
import subprocess
import sys


def test_benchmark_quick_prints_one_json_object_with_the_figures() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "jupyter_edt.bench.runtime", "--json", "--quick"],
        capture_output=True,
        text=True,
        timeout=240,
        check=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    for key in ("overhead_ratio", "grow_pause_s", "shrink_pause_s", "recovery_s"):
        assert 0 < result[key] < 30, (key, result)
    assert result["equivalence_max_abs_diff"] == 0.0  # order-fixed reduction: bit-identical
    assert result["world_size"] == 2 and result["grow_bytes"] > 4 * result["params"]
