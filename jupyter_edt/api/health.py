"""GET /edt/api/health: that the job service answers, for a monitor.

Both modes serve it, so that one API document holds for both. The shared service answers
without a token (``serve/front.py``: a service manager or a load balancer holds none); a
Jupyter server asks Jupyter's authentication here as on every other path, so the extension
opens nothing to anonymous callers that Jupyter's authorizer does not gate.
"""

from __future__ import annotations

from .base import EDTHandler

#: The answer: it says nothing but that the service answers.
HEALTHY = {"status": "ok"}


class HealthHandler(EDTHandler):
    notes_caller = False  # a monitor is no user of the jobs

    async def get(self) -> None:
        self.write_json(HEALTHY)
