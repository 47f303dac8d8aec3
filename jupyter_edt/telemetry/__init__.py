"""The job service's Prometheus metrics (``GET /edt/api/v1/metrics``).

What *is* (GPUs by state, jobs by state and kind, the queue) is read from the store and the
device monitor at each scrape (`state.py`), so it can never drift from them; what *happens*
(rescales, restarts, lost drivers, queue waits, resize delays) is counted from the change feed
as it is published (`events.py`), so no part of the service calls the metrics. Each host has a
registry of its own (`registry.py`), not prometheus_client's global one: a test process runs
many servers, and each server's metrics are its own.

The core (jobs/, scheduling/, launch/, runtime/) never imports this package (an import
contract in pyproject.toml says so).
"""

from __future__ import annotations

from .registry import Telemetry

__all__ = ["Telemetry"]
