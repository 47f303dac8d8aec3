"""Thin Tornado handlers: validate, call a service, shape the answer.

The handlers say what each operation does; a *front* says who the caller is. `routes()` joins
them: the Jupyter extension uses Jupyter's front (``api/jupyter.py``), ``jupyter edt serve``
its own (``serve/front.py``).
"""

from __future__ import annotations

from tornado import web, websocket

from .admin import AdminConfigHandler
from .artifacts import ArtifactHandler, ArtifactsHandler, ResultZipHandler
from .cluster import AllocationsHandler, ClusterHandler, NodeDrainHandler
from .conductor import CONDUCTOR_PREFIX, conductor_handlers
from .events import EventsHandler
from .health import HealthHandler
from .jobs import CancelHandler, JobHandler, LogsHandler, MetricsHandler
from .logon import ConductorLogonHandler, LogonHandler
from .openapi import NotFoundHandler, OpenAPIHandler
from .prometheus import PrometheusHandler
from .uploads import SubmitHandler
from .usage import UsageHandler
from .user import UserHandler
from .wmla import wmla_handlers

API_PREFIX = "/edt/api/v1"
JOB_ID = r"(?P<job_id>[^/]+)"

default_handlers: list[tuple[str, type[web.RequestHandler]]] = [
    (rf"{API_PREFIX}/cluster", ClusterHandler),
    (rf"{API_PREFIX}/cluster/nodes/(?P<node>[^/]+)/drain", NodeDrainHandler),
    (rf"{API_PREFIX}/allocations", AllocationsHandler),
    (rf"{API_PREFIX}/jobs/?", SubmitHandler),  # JobsHandler that also takes an archive upload
    (rf"{API_PREFIX}/jobs/{JOB_ID}", JobHandler),
    (rf"{API_PREFIX}/jobs/{JOB_ID}/cancel", CancelHandler),
    (rf"{API_PREFIX}/jobs/{JOB_ID}/metrics", MetricsHandler),
    (rf"{API_PREFIX}/jobs/{JOB_ID}/logs", LogsHandler),
    (rf"{API_PREFIX}/jobs/{JOB_ID}/artifacts", ArtifactsHandler),
    (rf"{API_PREFIX}/jobs/{JOB_ID}/artifacts/(?P<path>.+)", ArtifactHandler),
    (rf"{API_PREFIX}/jobs/{JOB_ID}/result\.zip", ResultZipHandler),
    (rf"{API_PREFIX}/events", EventsHandler),
    (rf"{API_PREFIX}/user", UserHandler),
    (rf"{API_PREFIX}/usage", UsageHandler),
    (rf"{API_PREFIX}/openapi\.json", OpenAPIHandler),
    (rf"{API_PREFIX}/metrics", PrometheusHandler),
    (rf"{API_PREFIX}/admin/config", AdminConfigHandler),
    (r"/edt/api/health", HealthHandler),
]

#: WMLA's logons (``api/logon.py``): a server that forwards the API answers them itself.
logon_handlers: list[tuple[str, type[web.RequestHandler]]] = [
    (rf"{CONDUCTOR_PREFIX}/auth/logon", ConductorLogonHandler),
    (r"/auth/v1/logon", LogonHandler),
]

# Registered after every other route of the API (native and WMLA): what they do not serve
# under /edt/api/ (or WMLA's /platform/rest/, /auth/v1/) answers a JSON 404, not Jupyter's
# HTML page.
not_found_handlers = [
    (r"/edt/api(?:/.*)?", NotFoundHandler),
    (r"/platform/rest(?:/.*)?", NotFoundHandler),
    (r"/auth/v1(?:/.*)?", NotFoundHandler),
]


def routes(
    front: type[web.RequestHandler], socket_front: type[websocket.WebSocketHandler]
) -> list[tuple[str, type[web.RequestHandler]]]:
    """Every route of the API (native, WMLA's, then the JSON 404), each handler joined with the
    front that identifies its callers: `socket_front` for the WebSocket, `front` for the rest."""
    return joined(
        default_handlers + wmla_handlers + logon_handlers + conductor_handlers + not_found_handlers,
        front,
        socket_front,
    )


def joined(
    handlers: list[tuple[str, type[web.RequestHandler]]],
    front: type[web.RequestHandler],
    socket_front: type[websocket.WebSocketHandler],
) -> list[tuple[str, type[web.RequestHandler]]]:
    """`handlers`, each joined with its front."""
    out: list[tuple[str, type[web.RequestHandler]]] = []
    for path, handler in handlers:
        base = socket_front if issubclass(handler, websocket.WebSocketHandler) else front
        out.append((path, _joined(handler, base)))
    return out


def _joined(handler: type[web.RequestHandler], front: type) -> type[web.RequestHandler]:
    """`handler` with `front` after it: the handler's methods, the front's `identify`."""
    return type(handler.__name__, (handler, front), {"__module__": handler.__module__})
