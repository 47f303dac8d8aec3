"""RayInventory on a real local Ray cluster: the GPUs of each node, ids that carry the node,
and nodes that join and leave."""

from __future__ import annotations

from dataclasses import replace

import pytest
from waiting import eventually_sync

from jupyter_edt.scheduling.inventory import Device
from jupyter_edt.scheduling.ray_inventory import RayInventory, node_devices


@pytest.fixture
def inventory(launcher):  # connected through the launcher's fixture
    reading = RayInventory(namespace="edt-tests")
    yield reading
    reading.close()


def test_each_nodes_gpus_with_the_node_in_their_ids(cluster, inventory):
    devices = inventory.read()
    nodes = [n.node_id for n in cluster.nodes]
    assert sorted((d.node, d.index) for d in devices) == sorted(
        (n, i) for n in nodes for i in range(2)
    )
    for d in devices:
        assert d.id == f"{d.node[:8]}:gpu{d.index}"
        assert d.virtual  # logical GPUs: NVML finds none on these nodes
        assert d.uuid == f"ray-{d.node}-{d.index}"
    assert len({d.id for d in devices}) == 4
    assert inventory.source == "ray"


def test_a_node_that_joins_adds_its_gpus_and_one_that_leaves_takes_them(
    cluster, inventory, restore
):
    joined = cluster.add_node(gpus=2)
    devices = eventually_sync(
        lambda: inventory.read(), "the new node's GPUs", until=lambda ds: len(ds) == 6
    )
    assert sum(d.node == joined.node_id for d in devices) == 2
    cluster.remove_node(joined)
    devices = eventually_sync(
        lambda: inventory.read(), "the node's GPUs gone", until=lambda ds: len(ds) == 4
    )
    assert all(d.node != joined.node_id for d in devices)
    left = cluster.nodes[0]
    cluster.remove_node(left, allow_graceful=False)  # a crash
    devices = eventually_sync(
        lambda: inventory.read(), "the crashed node's GPUs gone", until=lambda ds: len(ds) == 2
    )
    assert {d.node for d in devices} == {cluster.nodes[0].node_id}


def test_a_node_whose_probe_reads_nvml_shows_its_real_gpus():
    """Where a node's probe reports NVML's GPUs (a GPU node; none here, so the probe's answer
    is given), they keep NVML's figures under ids that carry the node."""
    gpu = Device(
        id="gpu1",
        index=1,
        node="lab7",
        uuid="GPU-5e0c2a1b",
        name="NVIDIA H200",
        virtual=False,
        memory_total=150 * 2**30,
        memory_used=2**30,
        utilization=37,
    )
    (device,) = node_devices("a1b2c3d4e5f6", 2, "10.0.0.7", [gpu])
    assert device == replace(gpu, id="a1b2c3d4:gpu1", node="a1b2c3d4e5f6")  # NVML's figures
    logical = node_devices("a1b2c3d4e5f6", 2, "10.0.0.7", None)
    assert [(d.id, d.virtual, d.name) for d in logical] == [
        ("a1b2c3d4:gpu0", True, "Ray GPU 0 on 10.0.0.7"),
        ("a1b2c3d4:gpu1", True, "Ray GPU 1 on 10.0.0.7"),
    ]
