"""The events benchmark end to end, small: a real server, synthetic jobs, reconnecting
subscribers. It checks what the benchmark counts, not how fast it was."""

from __future__ import annotations

import json
import subprocess
import sys


def test_every_subscriber_gets_every_event_across_a_reconnect():
    args = ["--jobs", "2", "--rate", "40", "--subscribers", "3", "--seconds", "3", "--json"]
    out = subprocess.run(
        [sys.executable, "-m", "jupyter_edt.bench.events", *args],
        capture_output=True,
        text=True,
        timeout=240,
        check=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["lost_events"] == 0
    assert result["reconnects"] == 3
    assert result["events_received"] == 3 * 2 * 60  # subscribers x jobs x (20/s for 3 s)
    assert result["p95_latency_ms"] > 0 and result["api_p95_ms"] > 0
