"""`Telemetry`: one host's metrics registry, what the API reports into it (request latency,
event-feed subscribers and their lag), and its exposition."""

from __future__ import annotations

import time
from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Gauge, Histogram, ProcessCollector
from prometheus_client.exposition import choose_encoder

from ..jobs.feed import Published
from ..jobs.service import JobService
from ..jobs.store import UnknownJob
from ..scheduling.monitor import InventoryMonitor
from .events import EventRecorder
from .state import StateCollector

#: An API request: a millisecond (a read) to tens of seconds (an upload, a zip).
API_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
#: An event's publication to its delivery: the feed coalesces for 20 ms.
LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class Telemetry:
    """The metrics of one job service (its host's: the Jupyter extension, or ``jupyter edt
    serve``), made with the service so that it counts its events from the start."""

    def __init__(self, service: JobService, monitor: InventoryMonitor) -> None:
        self.registry = CollectorRegistry()
        self.events = EventRecorder(self.registry, kind_of=lambda job_id: _kind(service, job_id))
        service.feed.on_publish(self.events.read)
        self.registry.register(StateCollector(service, monitor))
        ProcessCollector(registry=self.registry)
        self.requests = Histogram(
            "edt_api_request_duration_seconds",
            "Seconds the REST API took to answer, by handler, method and status.",
            ["handler", "method", "status"],
            buckets=API_BUCKETS,
            registry=self.registry,
        )
        self.subscribers = Gauge(
            "edt_event_feed_subscribers",
            "Open event-feed WebSockets (the sidebars, widgets and clients following jobs).",
            registry=self.registry,
        )
        self.feed_lag = Histogram(
            "edt_event_feed_lag_seconds",
            "Seconds from an event's publication to its delivery to a subscriber (events "
            "replayed from the store to a client catching up are not counted).",
            buckets=LAG_BUCKETS,
            registry=self.registry,
        )

    def request_finished(self, handler: str, method: str, status: int, seconds: float) -> None:
        self.requests.labels(handler, method, str(status)).observe(seconds)

    def delivered(self, items: Sequence[Published]) -> None:
        """A subscriber has sent `items` (its WebSocket took them)."""
        now = time.monotonic()
        for item in items:
            if item.at is not None:
                self.feed_lag.observe(max(0.0, now - item.at))

    def exposition(self, accept: str | None) -> tuple[bytes, str]:
        """The metrics as the scraper asked (`accept`: its Accept header): OpenMetrics, or
        Prometheus' text format; and their content type."""
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type


def _kind(service: JobService, job_id: str) -> str | None:
    try:
        return service.store.get_job(job_id).spec.kind
    except UnknownJob:
        return None
