"""The device inventory without a server: source selection and validation."""

from __future__ import annotations

import logging

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
