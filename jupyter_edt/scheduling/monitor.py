"""Periodic device readings: the latest snapshot, a short utilisation history per device, and
whether the set of devices changed since the last reading (a GPU fell off the bus, say)."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

from .inventory import Device, Inventory, snapshot


class InventoryMonitor:
    def __init__(self, inventory: Inventory, *, history: int = 120) -> None:
        self.inventory = inventory
        self.devices: Sequence[Device] = ()
        self._history: dict[str, deque[dict[str, Any]]] = {}
        self._length = history

    async def refresh(self, now: float) -> bool:
        """Read the devices (off the event loop); True when devices appeared or vanished."""
        return self.record(await snapshot(self.inventory), now)

    def record(self, devices: Sequence[Device], now: float) -> bool:
        """Take a reading made elsewhere (at start-up, before the event loop runs)."""
        changed = {d.id for d in devices} != {d.id for d in self.devices}
        self.devices = devices
        for d in devices:
            series = self._history.setdefault(d.id, deque(maxlen=self._length))
            series.append({"time": now, "utilization": d.utilization, "memory_used": d.memory_used})
        for gone in set(self._history) - {d.id for d in devices}:
            del self._history[gone]
        return changed

    def history(self, device_id: str) -> list[dict[str, Any]]:
        return list(self._history.get(device_id, ()))
