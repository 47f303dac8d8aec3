"""The inventory monitor: latest readings, a bounded history, and noticing vanished devices."""

from __future__ import annotations

import pytest

from jupyter_edt.scheduling.inventory import VirtualInventory
from jupyter_edt.scheduling.monitor import InventoryMonitor


@pytest.mark.asyncio
async def test_history_is_bounded_and_a_vanished_device_is_noticed():
    inventory = VirtualInventory(3, node="n")
    monitor = InventoryMonitor(inventory, history=2)
    assert await monitor.refresh(1.0)  # from nothing to three devices
    assert [d.id for d in monitor.devices] == ["vgpu0", "vgpu1", "vgpu2"]
    inventory.resize(2)
    assert await monitor.refresh(2.0)  # vgpu2 is gone
    assert [d.id for d in monitor.devices] == ["vgpu0", "vgpu1"]
    assert monitor.history("vgpu2") == []
    assert not await monitor.refresh(3.0)  # nothing changed
    assert [h["time"] for h in monitor.history("vgpu0")] == [2.0, 3.0]
    inventory.resize(3)
    assert await monitor.refresh(4.0)  # vgpu2 is back, with a fresh history
    assert [d.id for d in monitor.devices] == ["vgpu0", "vgpu1", "vgpu2"]
    assert [h["time"] for h in monitor.history("vgpu2")] == [4.0]
