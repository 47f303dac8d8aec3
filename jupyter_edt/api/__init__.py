"""Thin Tornado handlers: validate, call a service, shape the answer."""

from __future__ import annotations

from .artifacts import ArtifactHandler, ArtifactsHandler, ResultZipHandler
from .cluster import ClusterHandler
from .events import EventsHandler
from .jobs import JobHandler, LogsHandler, MetricsHandler
from .openapi import NotFoundHandler, OpenAPIHandler
from .uploads import SubmitHandler
from .user import UserHandler

API_PREFIX = "/edt/api/v1"
JOB_ID = r"(?P<job_id>[^/]+)"

default_handlers = [
    (rf"{API_PREFIX}/cluster", ClusterHandler),
    (rf"{API_PREFIX}/jobs/?", SubmitHandler),  # JobsHandler that also takes an archive upload
    (rf"{API_PREFIX}/jobs/{JOB_ID}", JobHandler),
    (rf"{API_PREFIX}/jobs/{JOB_ID}/metrics", MetricsHandler),
    (rf"{API_PREFIX}/jobs/{JOB_ID}/logs", LogsHandler),
    (rf"{API_PREFIX}/jobs/{JOB_ID}/artifacts", ArtifactsHandler),
    (rf"{API_PREFIX}/jobs/{JOB_ID}/artifacts/(?P<path>.+)", ArtifactHandler),
    (rf"{API_PREFIX}/jobs/{JOB_ID}/result\.zip", ResultZipHandler),
    (rf"{API_PREFIX}/events", EventsHandler),
    (rf"{API_PREFIX}/user", UserHandler),
    (rf"{API_PREFIX}/openapi\.json", OpenAPIHandler),
]

# Registered after every other route of the API (native and WMLA): what they do not serve
# under /edt/api/ answers a JSON 404, not Jupyter's HTML page.
not_found_handlers = [(r"/edt/api(?:/.*)?", NotFoundHandler)]
