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

Source = Literal["nvml", "virtual", "ray"]


@dataclass(frozen=True)
class Device:
    """One allocatable device. Memory is in bytes, utilisation in percent; None when unknown.

    `draining`: its node is announced to leave (Ray's drain, or an administrator's): it is
    offered to no job, and the jobs on it shrink off it or move; `drain_deadline`: when the
    node goes (Unix time; None: no deadline said)."""

    id: str
    index: int
    node: str
    uuid: str
    name: str
    virtual: bool
    memory_total: int | None = None
    memory_used: int | None = None
    utilization: int | None = None
    draining: bool = False
    drain_deadline: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Inventory(Protocol):
    """A source of devices. `read` may block (NVML calls), so callers use `snapshot`.

    One whose nodes can be told to leave (a cluster's) also has ``drain(node, deadline_s)``."""

    source: Source

    def read(self) -> list[Device]: ...

    def close(self) -> None: ...


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used here: no library, no driver, or no GPU."""


class VirtualInventory:
    """`count` CPU worker slots presented as GPUs, each marked virtual.

    `resize` changes the count while the server runs (`EDTApp.virtual_gpus` set on a live
    server): the next reading shows the devices added or gone, as NVML shows a GPU that fell
    off the bus, and the allocator takes a vanished device from its job.
    """

    source: Source = "virtual"

    def __init__(self, count: int, node: str | None = None) -> None:
        self._node = node or socket.gethostname()
        self._devices: list[Device] = []
        self.resize(count)

    def resize(self, count: int) -> None:
        """Offer `count` devices from now on: vgpu0 .. vgpu<count-1>, the highest go first."""
        if count < 0:
            raise ValueError(f"virtual_gpus must be 0 or more, got {count}.")
        node = self._node
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
        self._ids: dict[str, str] = {}  # UUID -> device id
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
        """The GPUs that answer now. A GPU NVML cannot query (lost, fallen off the bus) is left
        out, so the allocator takes it from its job; each GPU keeps its id, by its UUID, when
        the indices of the others shift."""
        nvml = self._nvml
        with self._lock:
            if not self._open:
                return []
            devices = []
            for index in range(nvml.nvmlDeviceGetCount()):
                try:
                    handle = nvml.nvmlDeviceGetHandleByIndex(index)
                    uuid = _text(nvml.nvmlDeviceGetUUID(handle))
                    name = _text(nvml.nvmlDeviceGetName(handle))
                    memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                except nvml.NVMLError as err:
                    log.warning("GPU %d does not answer NVML (%s); leaving it out.", index, err)
                    continue
                try:
                    utilization: int | None = int(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
                except nvml.NVMLError:  # e.g. NotSupported on some MIG or vGPU setups
                    utilization = None
                devices.append(
                    Device(
                        id=self._id_of(uuid, index),
                        index=index,
                        node=self._node,
                        uuid=uuid,
                        name=name,
                        virtual=False,
                        memory_total=int(memory.total),
                        memory_used=int(memory.used),
                        utilization=utilization,
                    )
                )
            return devices

    def _id_of(self, uuid: str, index: int) -> str:
        """`gpu<index>` at first sight, kept for that GPU from then on (a new GPU whose index
        names a known one gets the next free number)."""
        if uuid not in self._ids:
            taken = set(self._ids.values())
            n = index
            while f"gpu{n}" in taken:
                n += 1
            self._ids[uuid] = f"gpu{n}"
        return self._ids[uuid]

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
