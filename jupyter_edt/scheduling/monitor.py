"""Periodic device readings: the latest snapshot, a short utilisation history per device, and
whether the set of devices changed since the last reading (a GPU fell off the bus, say), or
whether one's node began to drain.

Nodes drain when their inventory says so (Ray's drain) or when an administrator says so here
(`drain`: a spot instance's notice, a machine's maintenance); a drained node's devices are
marked `draining` in every reading until it is taken back (`undrain`) or leaves.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from .inventory import Device, Inventory, snapshot


class UnknownNode(KeyError):
    def __str__(self) -> str:
        return f"No node {self.args[0]!r} offers devices here."


class InventoryMonitor:
    def __init__(self, inventory: Inventory, *, history: int = 120) -> None:
        self.inventory = inventory
        self.devices: Sequence[Device] = ()
        self._history: dict[str, deque[dict[str, Any]]] = {}
        self._length = history
        self._drains: dict[str, float | None] = {}  # node -> deadline (Unix time), by an admin

    async def refresh(self, now: float) -> bool:
        """Read the devices (off the event loop); True when devices appeared, vanished, or
        began or stopped draining."""
        return self.record(await snapshot(self.inventory), now)

    def record(self, devices: Sequence[Device], now: float) -> bool:
        """Take a reading made elsewhere (at start-up, before the event loop runs)."""
        devices = [self._drained(d) for d in devices]
        changed = _states(devices) != _states(self.devices)
        self.devices = devices
        for d in devices:
            series = self._history.setdefault(d.id, deque(maxlen=self._length))
            series.append({"time": now, "utilization": d.utilization, "memory_used": d.memory_used})
        for gone in set(self._history) - {d.id for d in devices}:
            del self._history[gone]
        for node in set(self._drains) - {d.node for d in devices}:
            del self._drains[node]  # it left: drained
        return changed

    def history(self, device_id: str) -> list[dict[str, Any]]:
        return list(self._history.get(device_id, ()))

    def node(self, name: str) -> str:
        """The node named by its id or by the start of it (as device ids show it)."""
        nodes = {d.node for d in self.devices}
        if name in nodes:
            return name
        found = [n for n in nodes if name and n.startswith(name)]
        if len(found) != 1:
            raise UnknownNode(name)
        return found[0]

    def drain(self, node: str, deadline_s: float | None = None) -> list[Device]:
        """Offer `node`'s devices to no job from now on (the scheduler moves its jobs off
        them); `deadline_s`: seconds until the node goes. Its devices, as now marked."""
        node = self.node(node)
        self._drains[node] = None if deadline_s is None else time.time() + deadline_s
        self.devices = [self._drained(d) for d in self.devices]
        return [d for d in self.devices if d.node == node]

    def undrain(self, node: str) -> list[Device]:
        """Take back an administrator's drain: the node's devices are offered again (a drain
        that its inventory reports, Ray's, stays until the inventory says otherwise)."""
        node = self.node(node)
        self._drains.pop(node, None)
        self.devices = [
            replace(d, draining=False, drain_deadline=None) if d.node == node else d
            for d in self.devices
        ]
        return [d for d in self.devices if d.node == node]

    def _drained(self, device: Device) -> Device:
        if device.node not in self._drains or device.draining:
            return device
        return replace(device, draining=True, drain_deadline=self._drains[device.node])


def _states(devices: Sequence[Device]) -> set[tuple[str, bool]]:
    return {(d.id, d.draining) for d in devices}
