"""The events benchmark end to end, small: a real server, synthetic jobs, reconnecting
subscribers. It checks what the benchmark counts, not how fast it was."""

from __future__ import annotations

import pytest
from benchruns import bench_json


@pytest.mark.parametrize("batching", [[], ["--unbatched"]], ids=["batched", "unbatched"])
def test_every_subscriber_gets_every_event_across_a_reconnect(batching):
    args = ["--jobs", "2", "--rate", "40", "--subscribers", "3", "--seconds", "3", *batching]
    result = bench_json("events", *args)
    assert result["batched"] == (not batching)
    assert result["lost_events"] == 0
    assert result["reconnects"] == 3
    assert result["events_received"] == 3 * 2 * 60  # subscribers x jobs x (20/s for 3 s)
    assert result["p95_latency_ms"] > 0 and result["api_p95_ms"] > 0


def test_through_the_forwarder_both_routes_get_every_event():
    """--through-forwarder: half the subscribers through a Jupyter server in the remote mode,
    half straight to `jupyter edt serve`; both see every event, across a reconnect."""
    args = ["--jobs", "2", "--rate", "40", "--subscribers", "4", "--seconds", "3"]
    result = bench_json("events", *args, "--through-forwarder")
    for prefix in ("", "direct_"):
        assert result[f"{prefix}lost_events"] == 0
        assert result[f"{prefix}reconnects"] == 2
        assert result[f"{prefix}events_received"] == 2 * 2 * 60
        assert result[f"{prefix}api_requests"] > 0
    assert "hop_p95_latency_ms" in result and "hop_api_p95_ms" in result
