"""Running a benchmark's command line from a test: what it printed last, as JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any


def bench_json(module: str, *args: str, timeout: float = 240) -> dict[str, Any]:
    """`python -m jupyter_edt.bench.<module> --json *args`; the object it printed last."""
    out = subprocess.run(
        [sys.executable, "-m", f"jupyter_edt.bench.{module}", "--json", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])
