"""GET /edt/api/v1/cluster: the devices jobs can be given."""

from __future__ import annotations

from jupyter_server.auth.decorator import authorized
from tornado import web

from ..scheduling.inventory import snapshot
from .base import EDTHandler


class ClusterHandler(EDTHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        inventory = self.extensionapp.inventory
        devices = await snapshot(inventory)
        self.write_json(
            {"source": inventory.source, "devices": [device.to_dict() for device in devices]}
        )
