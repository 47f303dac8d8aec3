"""The GPUs of a Ray cluster's nodes, as the allocator's devices.

Each alive node offering Ray's ``GPU`` resource contributes its GPUs. A device's id carries its
node (``<node id prefix>:gpu<index>``) and `Device.node` is the full Ray node id, which the Ray
launcher pins the process to. A small *probe* actor on each GPU node (no CPU, no GPU) reads
NVML there: where it works, the node's devices are its real GPUs with their UUIDs, memory and
utilisation; where it does not (logical GPUs, as in a test cluster), they are virtual CPU slots.

A node that joins adds its devices at the next reading; one that leaves or dies takes its
devices with it, and the allocator takes them from their jobs, as for a GPU that failed. A node
that Ray drains (`ray drain-node`, an autoscaler's scale-down or preemption notice, or `drain`
here) keeps running, its devices marked `draining` with its deadline: the allocator moves its
jobs off them, and once nothing runs there Ray lets the node go.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import replace
from typing import Any

from .inventory import Device, NvmlInventory, NvmlUnavailable, Source

log = logging.getLogger(__name__)

#: How long a reading waits for the nodes' probes; a node that has not answered by then shows
#: its GPUs as Ray counts them, without NVML's figures.
PROBE_TIMEOUT_S = 5.0
#: Characters of the node id in a device id: unique in any real cluster, short enough to read.
NODE_PREFIX = 8


def device_id(node: str, index: int) -> str:
    return f"{node[:NODE_PREFIX]}:gpu{index}"


class NodeProbe:
    """Reads NVML on its node (made a Ray actor class by `RayInventory`)."""

    def __init__(self, node: str) -> None:
        try:
            self._nvml: NvmlInventory | None = NvmlInventory(node=node)
        except NvmlUnavailable:
            self._nvml = None

    def read(self) -> list[Device] | None:
        """The node's GPUs as NVML reports them; None without NVML."""
        return None if self._nvml is None else self._nvml.read()


class RayInventory:
    """The cluster's GPUs, per node. `address` and `namespace` as for `RayLauncher`."""

    source: Source = "ray"

    def __init__(self, address: str | None = "auto", namespace: str = "jupyter-edt") -> None:
        import ray

        if not ray.is_initialized():
            ray.init(
                address=address, namespace=namespace, log_to_driver=False, configure_logging=False
            )
        self._probe_class = ray.remote(NodeProbe)
        self._probes: dict[str, Any] = {}
        self._reported: dict[str, list[Device] | None] = {}  # node -> its probe's last reading

    def read(self) -> list[Device]:
        import ray

        nodes = [
            (n["NodeID"], int(n["Resources"].get("GPU", 0)), n.get("NodeManagerAddress", ""))
            for n in ray.nodes()
            if n.get("Alive") and n["Resources"].get("GPU", 0) >= 1
        ]
        draining = self.draining()
        # A draining node keeps no probe: Ray lets a node go only once nothing runs there.
        # Its devices keep their last NVML reading meanwhile.
        probed = {node for node, _, _ in nodes if node not in draining}
        for gone in set(self._probes) - probed:
            self._drop_probe(gone)
        for gone in set(self._reported) - {node for node, _, _ in nodes}:
            del self._reported[gone]
        pending = {node: self._probe(node).read.remote() for node in probed}
        ready, _ = ray.wait(
            list(pending.values()), num_returns=len(pending), timeout=PROBE_TIMEOUT_S
        )
        devices: list[Device] = []
        for node, count, address in nodes:
            if node in pending and pending[node] in ready:
                try:
                    self._reported[node] = ray.get(pending[node])
                except Exception as err:  # the probe died with its node, or failed
                    log.warning("The GPU probe on Ray node %s failed: %s", node, err)
                    self._drop_probe(node)
            found = node_devices(node, count, address, self._reported.get(node))
            if node in draining:
                found = [replace(d, draining=True, drain_deadline=draining[node]) for d in found]
            devices += found
        return devices

    def draining(self) -> dict[str, float | None]:
        """The nodes Ray is draining, with the deadline each was given (Unix time; None:
        none). Read from Ray's control store (GCS); nothing when it cannot be read."""
        from ray._private.state import state

        try:
            nodes = state.get_draining_nodes()
        except Exception as err:  # an older Ray, or the GCS unreachable this time
            log.debug("Ray's draining nodes could not be read: %s", err)
            return {}
        return {node: (ms / 1000 if ms else None) for node, ms in nodes.items()}

    def drain(self, node: str, deadline_s: float | None = None) -> None:
        """Ask Ray to drain `node`, as `ray drain-node --reason=DRAIN_NODE_REASON_PREEMPTION`
        does (a spot instance's notice): Ray places nothing new there and lets the node go once
        nothing runs on it. ValueError when Ray refuses."""
        import ray
        from ray.core.generated import autoscaler_pb2

        deadline_ms = 0 if deadline_s is None else int((time.time() + deadline_s) * 1000)
        gcs = ray._raylet.GcsClient(address=ray.get_runtime_context().gcs_address)
        accepted, why = gcs.drain_node(
            node,
            autoscaler_pb2.DrainNodeReason.Value("DRAIN_NODE_REASON_PREEMPTION"),
            "drained through jupyter-edt",
            deadline_ms,
        )
        if not accepted:
            raise ValueError(f"Ray refused to drain node {node}: {why}")

    def _probe(self, node: str) -> Any:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        if node not in self._probes:
            self._probes[node] = self._probe_class.options(
                num_cpus=0,
                num_gpus=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
            ).remote(node)
        return self._probes[node]

    def _drop_probe(self, node: str) -> None:
        import ray

        probe = self._probes.pop(node, None)
        if probe is not None:
            with contextlib.suppress(Exception):  # already gone with its node
                ray.kill(probe)

    def close(self) -> None:
        for node in list(self._probes):
            self._drop_probe(node)


def node_devices(
    node: str, count: int, address: str, reported: list[Device] | None
) -> list[Device]:
    """A node's devices: NVML's where its probe reported them, else `count` virtual slots."""
    if reported:
        return [
            Device(
                id=device_id(node, d.index),
                index=d.index,
                node=node,
                uuid=d.uuid,
                name=d.name,
                virtual=False,
                memory_total=d.memory_total,
                memory_used=d.memory_used,
                utilization=d.utilization,
            )
            for d in reported
        ]
    where = f" on {address}" if address else ""
    return [
        Device(
            id=device_id(node, i),
            index=i,
            node=node,
            uuid=f"ray-{node}-{i}",
            name=f"Ray GPU {i}{where}",
            virtual=True,
        )
        for i in range(count)
    ]
