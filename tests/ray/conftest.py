"""One local multi-node Ray cluster per test module (2 nodes x 2 logical GPUs, see
raycluster.py), this test process connected to it as the service would be."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from raycluster import RayCluster, ray_cluster

from jupyter_edt.launch.ray import RayLauncher


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayCluster]:
    with ray_cluster(nodes=2, gpus_per_node=2) as running:
        yield running


@pytest.fixture(scope="module")
def launcher(cluster: RayCluster) -> RayLauncher:
    ray_launcher = RayLauncher(cluster.address, namespace="edt-tests")
    ray_launcher.connect()
    return ray_launcher
