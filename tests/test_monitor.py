"""The inventory monitor: latest readings, a bounded history, and noticing vanished devices."""

from __future__ import annotations

import pytest

from jupyter_edt.scheduling.inventory import Device, VirtualInventory
from jupyter_edt.scheduling.monitor import InventoryMonitor


class Shrinking(VirtualInventory):
    """Virtual devices, one of which falls off the bus after the first reading."""

    def __init__(self) -> None:
        super().__init__(3, node="n")
        self.reads = 0

    def read(self) -> list[Device]:
        self.reads += 1
        devices = super().read()
        return devices if self.reads == 1 else devices[:2]


@pytest.mark.asyncio
async def test_history_is_bounded_and_a_vanished_device_is_noticed():
    monitor = InventoryMonitor(Shrinking(), history=2)
    assert await monitor.refresh(1.0)  # from nothing to three devices
    assert [d.id for d in monitor.devices] == ["vgpu0", "vgpu1", "vgpu2"]
    assert await monitor.refresh(2.0)  # vgpu2 is gone
    assert [d.id for d in monitor.devices] == ["vgpu0", "vgpu1"]
    assert monitor.history("vgpu2") == []
    assert not await monitor.refresh(3.0)  # nothing changed
    assert [h["time"] for h in monitor.history("vgpu0")] == [2.0, 3.0]
