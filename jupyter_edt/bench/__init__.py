"""Benchmarks, each ``python -m jupyter_edt.bench.<name> [--json]``."""

from __future__ import annotations

import json
from typing import Any


def print_result(result: dict[str, Any], as_json: bool) -> None:
    """A benchmark's result: one JSON object (`--json`), or a line a figure."""
    if as_json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:>26}: {v}")
