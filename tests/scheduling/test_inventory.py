"""The device inventory without a server: source selection and validation."""

from __future__ import annotations

import logging
import sys
import types

import pytest

from jupyter_edt.scheduling.inventory import (
    NvmlInventory,
    NvmlUnavailable,
    VirtualInventory,
    open_inventory,
)


def test_virtual_inventory_names_devices_uniquely():
    devices = VirtualInventory(4, node="n1").read()
    assert [d.id for d in devices] == ["vgpu0", "vgpu1", "vgpu2", "vgpu3"]
    assert {d.node for d in devices} == {"n1"}
    assert len({d.uuid for d in devices}) == 4
    assert all(d.virtual for d in devices)


def test_negative_virtual_count_is_rejected():
    with pytest.raises(ValueError, match="virtual_gpus must be 0 or more"):
        VirtualInventory(-1)
    with pytest.raises(ValueError, match="virtual_gpus must be 0 or more"):
        VirtualInventory(2).resize(-1)


def test_a_resized_virtual_inventory_loses_and_regains_its_highest_devices():
    inventory = VirtualInventory(4, node="n1")
    before = inventory.read()
    inventory.resize(2)
    assert inventory.read() == before[:2]
    inventory.resize(4)
    assert inventory.read() == before  # the same devices come back, not new ones


def test_unknown_mode_is_rejected():
    with pytest.raises(ValueError, match="devices must be one of"):
        open_inventory("cuda", 2)


def test_auto_falls_back_with_a_warning_when_nvml_is_absent(caplog):
    try:
        NvmlInventory().close()
    except NvmlUnavailable:
        nvml_available = False
    else:
        nvml_available = True
    with caplog.at_level(logging.WARNING):
        inventory = open_inventory("auto", 3)
    try:
        if nvml_available:
            assert inventory.source == "nvml"
        else:
            assert inventory.source == "virtual"
            assert len(inventory.read()) == 3
            assert "using 3 virtual GPUs" in caplog.text
    finally:
        inventory.close()


def test_nvml_mode_does_not_fall_back():
    try:
        inventory = open_inventory("nvml", 3)
    except NvmlUnavailable as err:
        assert "NVML" in str(err)
    else:
        try:
            assert inventory.source == "nvml"
            assert all(not d.virtual for d in inventory.read())
        finally:
            inventory.close()


class SimulatedNvml(types.ModuleType):
    """NVML's calls as nvidia-ml-py names them, over a list of GPUs that tests change: a GPU
    can be lost (its queries fail, as NVML answers for a GPU that fell off the bus) or removed
    (the count drops and the indices of the later ones shift). No machine here can lose a real
    GPU on demand, so this stands in for the driver, not for the code under test."""

    class NVMLError(Exception):
        pass

    def __init__(self, uuids: list[str]) -> None:
        super().__init__("pynvml")
        self.gpus = list(uuids)
        self.lost: set[str] = set()

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return self.gpus[index]

    def _check(self, handle: str) -> None:
        if handle in self.lost:
            raise self.NVMLError("GPU is lost")

    def nvmlDeviceGetUUID(self, handle: str) -> str:
        self._check(handle)
        return handle

    def nvmlDeviceGetName(self, handle: str) -> bytes:
        self._check(handle)
        return b"Simulated GPU"

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> types.SimpleNamespace:
        self._check(handle)
        return types.SimpleNamespace(total=80, used=1)

    def nvmlDeviceGetUtilizationRates(self, handle: str) -> types.SimpleNamespace:
        self._check(handle)
        return types.SimpleNamespace(gpu=7)


def test_nvml_leaves_out_a_lost_gpu_and_keeps_each_gpus_id_when_indices_shift(monkeypatch):
    nvml = SimulatedNvml(["GPU-a", "GPU-b", "GPU-c"])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    inventory = NvmlInventory(node="n1")
    assert [(d.id, d.index, d.uuid) for d in inventory.read()] == [
        ("gpu0", 0, "GPU-a"),
        ("gpu1", 1, "GPU-b"),
        ("gpu2", 2, "GPU-c"),
    ]
    nvml.lost.add("GPU-b")  # it stops answering: left out, the others read as before
    assert [d.id for d in inventory.read()] == ["gpu0", "gpu2"]
    nvml.gpus.remove("GPU-b")  # then it is gone: GPU-c moves to index 1 but stays gpu2
    assert [(d.id, d.index) for d in inventory.read()] == [("gpu0", 0), ("gpu2", 1)]
    nvml.gpus.append("GPU-d")  # a new GPU at index 2 must not take gpu2's name
    assert [d.id for d in inventory.read()] == ["gpu0", "gpu2", "gpu3"]
    nvml.lost.clear()
    nvml.gpus.insert(1, "GPU-b")  # the lost one comes back under its old id
    assert [d.id for d in inventory.read()] == ["gpu0", "gpu1", "gpu2", "gpu3"]
    inventory.close()
