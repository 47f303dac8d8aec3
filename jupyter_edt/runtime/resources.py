"""A worker's share of its node's CPU cores: torch's threads and its data-loading processes.

Why a share per GPU of the node, not per worker of the job: a job's workers on a node come and
go with its allocation, while the node's GPUs do not, so each worker's share stays the same
whatever else runs beside it. On virtual GPUs (the CPU trains) workers share the cores with one
another, so each keeps one thread and reads its samples itself.

Results and threads: on a GPU the model computes on the device and the thread count changes no
result. On the CPU, a kernel may split a reduction over threads, so a result can depend on the
thread count; every worker of a virtual-GPU job uses the same (1, or ``EDT_NUM_THREADS``), so
results still do not depend on the allocation.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["THREADS_ENV", "cores_per_gpu", "default_num_workers", "worker_threads"]

THREADS_ENV = "EDT_NUM_THREADS"
#: a worker's data-loading processes at most, by default (DataLoader's usual advice: a few)
MAX_LOADERS = 4
NVIDIA_GPUS = "/proc/driver/nvidia/gpus"


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _node_gpus() -> int:
    """The node's GPUs, all of them: the NVIDIA driver lists one folder per GPU, whatever
    ``CUDA_VISIBLE_DEVICES`` hides (1 without the driver)."""
    try:
        return max(1, len(os.listdir(NVIDIA_GPUS)))
    except OSError:
        return 1


def cores_per_gpu() -> int:
    """This node's cores divided among its GPUs (at least 1)."""
    return max(1, _cores() // _node_gpus())


def _on_gpu(env: Mapping[str, str]) -> bool:
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:  # a plain process: whatever CUDA offers
        import torch

        return bool(torch.cuda.is_available())
    from .group import names_gpu

    return names_gpu(visible)


def worker_threads(env: Mapping[str, str] | None = None) -> int:
    """torch's intra-op threads for a job's worker: ``EDT_NUM_THREADS`` when set, else its GPU's
    share of the node's cores on a GPU worker, else 1. ValueError naming the variable on a bad
    value."""
    env = os.environ if env is None else env
    raw = env.get(THREADS_ENV)
    if raw is not None and raw.strip():
        try:
            value = int(raw.strip())
        except ValueError:
            value = 0
        if value < 1:
            raise ValueError(f"{THREADS_ENV} must be a positive integer, got {raw!r}")
        return value
    return cores_per_gpu() if _on_gpu(env) else 1


def default_num_workers(device_type: str) -> int:
    """``fit(num_workers=None)``: on a GPU, its share of the node's cores less the one the
    training process keeps, at most ``MAX_LOADERS``; on the CPU none (the training processes
    already use the cores)."""
    if device_type != "cuda":
        return 0
    return max(0, min(MAX_LOADERS, cores_per_gpu() - 1))
