"""The runtime benchmark across Ray nodes, on the package's cluster (its local --quick run is
the GPU check's dry run, tests/bench/test_gpu_check_script.py)."""

from __future__ import annotations

from benchruns import bench_json

from jupyter_edt.bench.raycluster import RayCluster


def test_benchmark_across_ray_nodes_beside_local_processes(cluster: RayCluster) -> None:
    """--launcher ray: the same elastic run on two nodes of a running Ray cluster, ending with
    the very parameters of the local one."""
    result = bench_json(
        "runtime", "--quick", "--launcher=ray", f"--ray-address={cluster.address}", timeout=300
    )
    for where in ("local", "ray"):
        for key in ("grow_pause_s", "shrink_pause_s", "recovery_s"):
            assert 0 < result[f"{where}_{key}"] < 30, (where, key, result)
    assert result["ray_grow_bytes"] == result["local_grow_bytes"] > 4 * result["params"]
    assert result["ray_vs_local_max_abs_diff"] == 0.0
