"""A local multi-node Ray cluster, for the Ray benchmark and tests: a GPU-less head and
`nodes` nodes of `gpus_per_node` logical GPUs each (Ray's own accounting; no CUDA), small object
stores, the dashboard off, on loopback, in a temporary directory of its own so that whatever a
run leaves behind can be found and killed.

`with ray_cluster() as cluster: ...` (a few seconds to start on 2 cores; tests start one per
package). Needs the `ray` extra.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

# Before ray is imported: keeps a driver from rewriting 127.0.0.1 to the host's address and
# hanging on "Failed to connect to GCS" (shared MACHINE-NOTES).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

OBJECT_STORE_BYTES = 100 * 1024 * 1024
# Dead nodes noticed in seconds rather than the default ~15 s.
FAST_HEALTH_CHECKS = {
    "health_check_period_ms": 500,
    "health_check_failure_threshold": 3,
    "health_check_initial_delay_ms": 0,
}


@dataclass
class RayCluster:
    """The running cluster: `address` for `ray.init`, and its worker nodes in order."""

    cluster: Any
    address: str
    tmpdir: str
    nodes: list[Any] = field(default_factory=list)

    def add_node(self, gpus: int = 2) -> Any:
        with _own_signal_handlers():
            node = self.cluster.add_node(**_node_args(gpus))
        self.cluster.wait_for_nodes()
        self.nodes.append(node)
        return node

    def remove_node(self, node: Any, *, allow_graceful: bool = True) -> None:
        self.cluster.remove_node(node, allow_graceful=allow_graceful)
        self.nodes.remove(node)

    def crash(self, node: Any) -> None:
        """A machine's loss: SIGKILL of the node's raylet and every process below it (Ray's
        workers, the actors' processes and what they started) at once, as when power fails.
        (`remove_node` alone kills the raylet and leaves its workers to notice and exit,
        seconds later: a half-dead node.) Then the node is removed from the cluster's books."""
        from ray._private import ray_constants

        raylets = node.all_processes.get(ray_constants.PROCESS_TYPE_RAYLET, [])
        doomed = set()
        for info in raylets:
            doomed |= _tree(info.process.pid)
        for pid in doomed:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.remove_node(node, allow_graceful=False)

    @staticmethod
    def node_id(node: Any) -> str:
        return node.node_id


@contextmanager
def _own_signal_handlers() -> Iterator[None]:
    """Ray's in-process nodes take SIGTERM and SIGINT (to drain the node) as they start: given
    back at once, so that a later SIGTERM (a program's restart, in a test that shares the
    process with a cluster) is the process's own and drains no node."""
    sigs = (signal.SIGTERM, signal.SIGINT)
    handlers = {sig: signal.getsignal(sig) for sig in sigs}
    try:
        yield
    finally:
        if threading.current_thread() is threading.main_thread():
            for sig, handler in handlers.items():
                if handler is not None:
                    signal.signal(sig, handler)


def _node_args(gpus: int) -> dict[str, Any]:
    return {
        "num_cpus": 2,
        "num_gpus": gpus,
        "object_store_memory": OBJECT_STORE_BYTES,
        "node_ip_address": "127.0.0.1",
        "include_dashboard": False,
    }


@contextmanager
def ray_cluster(nodes: int = 2, gpus_per_node: int = 2) -> Iterator[RayCluster]:
    import ray
    from ray.cluster_utils import Cluster

    tmpdir = tempfile.mkdtemp(prefix="edt-ray-")
    previous = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = tmpdir
    os.mkdir(os.path.join(tmpdir, "ray"))  # where Ray writes the current cluster's address
    head = {**_node_args(0), "_system_config": FAST_HEALTH_CHECKS}
    with _own_signal_handlers():
        cluster = Cluster(initialize_head=True, head_node_args=head)
    running = RayCluster(cluster, cluster.address, tmpdir)
    try:
        for _ in range(nodes):
            running.add_node(gpus_per_node)
        yield running
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()
        _kill_leftovers(tmpdir)
        shutil.rmtree(tmpdir, ignore_errors=True)
        if previous is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = previous


def _tree(root: int) -> set[int]:
    """`root` and every process below it, from /proc (parent ids)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry))
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo += children.get(pid, [])
    return found


def _kill_leftovers(tmpdir: str) -> None:
    """Processes of this cluster still running (agents a killed driver left with parent 1):
    found by the cluster's own temporary directory on their command line."""
    found = subprocess.run(["pgrep", "-f", tmpdir], capture_output=True, text=True, check=False)
    for pid in found.stdout.split():
        with suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)
