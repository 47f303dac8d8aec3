"""GET /edt/api/v1/cluster: the devices jobs can be given, which are taken, and their recent
utilisation, from the monitor's latest reading (requests never wait on NVML).
GET /edt/api/v1/allocations: which job held each device over a time range, and why each change
happened (the allocation timeline).
POST|DELETE /edt/api/v1/cluster/nodes/{node}/drain: an administrator's drain of a node."""

from __future__ import annotations

from typing import Any

from ..jobs.allocations import timeline
from .arguments import time_range
from .base import APIError, EDTHandler, api_errors

#: The range an allocation timeline covers when `since` is not given: the hour before `until`.
DEFAULT_SPAN_S = 3600.0


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


class AllocationsHandler(EDTHandler):
    async def get(self) -> None:
        since, until = time_range(self)
        if since is None:
            end = until if until is not None else self.service.clock()
            since = max(0.0, end - DEFAULT_SPAN_S)
        with api_errors():
            until, last_id, intervals = self.service.allocations(
                self.user_name, since=since, until=until
            )
        self.write_json(
            {
                "since": since,
                "until": until,
                "last_event_id": last_id,
                "devices": [
                    row.to_dict() for row in timeline(self.host.monitor.devices, intervals)
                ],
            }
        )


class NodeDrainHandler(EDTHandler):
    async def post(self, node: str) -> None:
        body = self.json_body()
        if body is None:
            body = {}
        if not isinstance(body, dict):
            raise APIError(400, "The body must be a JSON object.", "body")
        unknown = set(body) - {"deadline_s"}
        if unknown:
            name = sorted(unknown)[0]
            raise APIError(400, f"Unknown field {name!r}: only deadline_s is taken.", name)
        deadline = body.get("deadline_s")
        if deadline is not None and (
            isinstance(deadline, bool) or not isinstance(deadline, int | float)
        ):
            raise APIError(400, "deadline_s must be a number of seconds.", "deadline_s")
        with api_errors():
            devices = await self.service.drain_node(self.user_name, node, deadline)
        self.write_json(_node(devices))

    async def delete(self, node: str) -> None:
        with api_errors():
            devices = await self.service.undrain_node(self.user_name, node)
        self.write_json(_node(devices))


def _node(devices: list[Any]) -> dict[str, Any]:
    return {
        "node": devices[0].node if devices else None,
        "draining": any(d.draining for d in devices),
        "drain_deadline": next((d.drain_deadline for d in devices), None),
        "devices": [d.id for d in devices],
    }
