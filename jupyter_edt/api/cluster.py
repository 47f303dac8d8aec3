"""GET /edt/api/v1/cluster: the devices jobs can be given, and which are taken."""

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
        holders = self.service.holders(self.user_name)
        self.write_json(
            {
                "source": inventory.source,
                "devices": [
                    {
                        **device.to_dict(),
                        "held": device.id in holders,
                        # another user's job holds it: the device is taken, the job stays private
                        "job_id": holders.get(device.id),
                    }
                    for device in devices
                ],
            }
        )
