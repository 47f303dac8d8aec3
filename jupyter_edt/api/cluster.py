"""GET /edt/api/v1/cluster: the devices jobs can be given, which are taken, and their recent
utilisation, from the monitor's latest reading (requests never wait on NVML)."""

from __future__ import annotations

from .base import EDTHandler


class ClusterHandler(EDTHandler):
    async def get(self) -> None:
        monitor = self.host.monitor
        holders = self.service.holders(self.user_name)
        self.write_json(
            {
                "source": monitor.inventory.source,
                "devices": [
                    {
                        **device.to_dict(),
                        "held": device.id in holders,
                        # another user's job holds it: the device is taken, the job stays private
                        "job_id": holders.get(device.id),
                        "history": monitor.history(device.id),
                    }
                    for device in monitor.devices
                ],
            }
        )
