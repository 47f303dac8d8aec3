"""GET /edt/api/v1/metrics: the job service's metrics for Prometheus (``telemetry/``), in its
text format, or OpenMetrics when the scraper asks for it.

The metrics name every user, so, as JupyterHub's own ``/hub/metrics``, they are for
administrators and for tokens that hold a metrics scope; the front says who that is
(`identify_scraper`): on ``jupyter edt serve``, its authenticator (JupyterHub's
``read:metrics`` scope, or an administrator); in a Jupyter server, its owner or an
administrator.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..jobs.users import Identity
from .base import EDTHandler


class PrometheusHandler(EDTHandler):
    #: A scraper (Prometheus' token) is not a user of the jobs: the service keeps no record of it.
    notes_caller = False

    if TYPE_CHECKING:  # a front's, as `identify` is

        async def identify_scraper(self) -> Identity:
            """The caller, if they may read the metrics; HTTPError 401 or 403 otherwise."""

    async def identify(self) -> Identity:
        return await self.identify_scraper()

    async def get(self) -> None:
        body, content_type = self.host.telemetry.exposition(self.request.headers.get("Accept"))
        self.set_header("Content-Type", content_type)
        self.set_header("Content-Length", str(len(body)))
        self.write(body)
        await self.flush()  # the headers go now: Jupyter's API handlers mark a finish as JSON
        self.finish()
