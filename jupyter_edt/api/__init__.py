"""Thin Tornado handlers: validate, call a service, shape the answer."""

from __future__ import annotations

from .cluster import ClusterHandler
from .events import EventsHandler
from .jobs import JobHandler, JobsHandler, LogsHandler, MetricsHandler

API_PREFIX = "/edt/api/v1"
JOB_ID = r"(?P<job_id>[^/]+)"

default_handlers = [
    (rf"{API_PREFIX}/cluster", ClusterHandler),
    (rf"{API_PREFIX}/jobs/?", JobsHandler),
    (rf"{API_PREFIX}/jobs/{JOB_ID}", JobHandler),
    (rf"{API_PREFIX}/jobs/{JOB_ID}/metrics", MetricsHandler),
    (rf"{API_PREFIX}/jobs/{JOB_ID}/logs", LogsHandler),
    (rf"{API_PREFIX}/events", EventsHandler),
]
