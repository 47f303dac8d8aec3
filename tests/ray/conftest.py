"""One local multi-node Ray cluster for the package's modules (2 nodes x 2 logical GPUs,
see bench/raycluster.py), this test process connected to it as the service would be. A test
that removes a node adds one back (`restore`), so every module starts from 2 GPU nodes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from jupyter_edt.bench.raycluster import RayCluster, ray_cluster
from jupyter_edt.launch.ray import RayLauncher


@pytest.fixture(scope="package")
def cluster() -> Iterator[RayCluster]:
    with ray_cluster(nodes=2, gpus_per_node=2) as running:
        yield running


@pytest.fixture(scope="package")
def launcher(cluster: RayCluster) -> RayLauncher:
    ray_launcher = RayLauncher(cluster.address, namespace="edt-tests")
    ray_launcher.connect()
    return ray_launcher


@pytest.fixture
def restore(cluster: RayCluster) -> Iterator[None]:
    """For a test that removes nodes: afterwards, GPU nodes again as many as before."""
    before = len(cluster.nodes)
    yield
    while len(cluster.nodes) < before:
        cluster.add_node(gpus=2)
