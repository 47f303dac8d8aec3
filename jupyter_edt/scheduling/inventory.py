"""The machine's GPUs: read through NVML, or a configured number of virtual devices.

Virtual devices are CPU worker slots. They let the whole product (allocation, elastic
rescaling, the UI) run on a laptop or a CI machine without an NVIDIA GPU.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal, Protocol

log = logging.getLogger(__name__)

Source = Literal["nvml", "virtual"]


@dataclass(frozen=True)
class Device:
    """One allocatable device. Memory is in bytes, utilisation in percent; None when unknown."""

    id: str
    index: int
    node: str
    uuid: str
    name: str
    virtual: bool
    memory_total: int | None = None
    memory_used: int | None = None
    utilization: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Inventory(Protocol):
    """A source of devices. `read` may block (NVML calls), so callers use `snapshot`."""

    source: Source

    def read(self) -> list[Device]: ...

    def close(self) -> None: ...


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used here: no library, no driver, or no GPU."""


class VirtualInventory:
    """`count` CPU worker slots presented as GPUs, each marked virtual."""

    source: Source = "virtual"

    def __init__(self, count: int, node: str | None = None) -> None:
        if count < 0:
            raise ValueError(f"virtual_gpus must be 0 or more, got {count}.")
        node = node or socket.gethostname()
        self._devices = [
            Device(
                id=f"vgpu{i}",
                index=i,
                node=node,
                uuid=f"virtual-{node}-{i}",
                name=f"Virtual GPU {i}",
                virtual=True,
            )
            for i in range(count)
        ]

    def read(self) -> list[Device]:
        return list(self._devices)

    def close(self) -> None:
        pass


class NvmlInventory:
    """The NVIDIA GPUs NVML reports. Construction fails with NvmlUnavailable when it can't."""

    source: Source = "nvml"

    def __init__(self, node: str | None = None) -> None:
        try:
            import pynvml
        except ImportError as err:  # nvidia-ml-py is a dependency, but be explicit
            raise NvmlUnavailable("the nvidia-ml-py package is not installed") from err
        self._nvml = pynvml
        self._node = node or socket.gethostname()
        # NVML handles are process-wide; serialise our calls so a refresh and a shutdown
        # running in executor threads never interleave.
        self._lock = threading.Lock()
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as err:
            raise NvmlUnavailable(f"NVML could not start: {err}") from err
        try:
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as err:
            pynvml.nvmlShutdown()
            raise NvmlUnavailable(f"NVML could not count devices: {err}") from err
        if count == 0:
            pynvml.nvmlShutdown()
            raise NvmlUnavailable("NVML reports no GPU")
        self._open = True

    def read(self) -> list[Device]:
        nvml = self._nvml
        with self._lock:
            if not self._open:
                return []
            devices = []
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                try:
                    utilization: int | None = int(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
                except nvml.NVMLError:  # e.g. NotSupported on some MIG or vGPU setups
                    utilization = None
                devices.append(
                    Device(
                        id=f"gpu{index}",
                        index=index,
                        node=self._node,
                        uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                        name=_text(nvml.nvmlDeviceGetName(handle)),
                        virtual=False,
                        memory_total=int(memory.total),
                        memory_used=int(memory.used),
                        utilization=utilization,
                    )
                )
            return devices

    def close(self) -> None:
        with self._lock:
            if self._open:
                self._open = False
                self._nvml.nvmlShutdown()


def _text(value: str | bytes) -> str:
    """Older nvidia-ml-py releases return bytes for names and UUIDs."""
    return value.decode() if isinstance(value, bytes) else value


def open_inventory(mode: str, virtual_gpus: int, logger: logging.Logger = log) -> Inventory:
    """Pick the device source: `nvml`, `virtual`, or `auto` (NVML when it works, else virtual).

    The fallback is logged as a warning so a user who expected real GPUs sees why not.
    """
    if mode not in ("auto", "nvml", "virtual"):
        raise ValueError(f"devices must be one of 'auto', 'nvml' or 'virtual', got {mode!r}.")
    if mode == "virtual":
        return VirtualInventory(virtual_gpus)
    try:
        return NvmlInventory()
    except NvmlUnavailable as err:
        if mode == "nvml":
            raise
        logger.warning(
            "No NVIDIA GPU available (%s); using %d virtual GPUs (CPU worker slots).",
            err,
            virtual_gpus,
        )
        return VirtualInventory(virtual_gpus)


async def snapshot(inventory: Inventory) -> Sequence[Device]:
    """Read the devices off the event loop: NVML calls block for milliseconds each."""
    return await asyncio.to_thread(inventory.read)
