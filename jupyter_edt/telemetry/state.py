"""Gauges of what the service holds now, read from the store and the device monitor at each
scrape: values that are state, not events, so they cannot drift from what the API answers.

A device is, in `edt_gpus`, exactly one of:

- ``allocated``: held by a RUNNING job, which trains on it;
- ``held_not_used``: held by a job that does not train on it yet or any more (STARTING: its
  processes launching; SUSPENDED: writing its checkpoint before it gives the device back), the
  usage report's held minus used;
- ``idle``: held by no job.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..jobs.models import HOLDING, JOB_KINDS, JobState
from ..jobs.service import JobService
from ..scheduling.monitor import InventoryMonitor

#: The states of a device, as `edt_gpus` labels them.
GPU_STATES = ("allocated", "held_not_used", "idle")


class StateCollector(Collector):
    def __init__(self, service: JobService, monitor: InventoryMonitor) -> None:
        self.service = service
        self.monitor = monitor

    def describe(self) -> Iterable[Metric]:
        """The families, without reading anything: the registry checks names with them."""
        return _families()

    def collect(self) -> Iterator[Metric]:
        gpus, user_gpus, quotas, utilization, memory, jobs, queue = _families()
        present = {d.id for d in self.monitor.devices}
        by_state = dict.fromkeys(GPU_STATES, 0)
        by_user: dict[tuple[str, str], int] = {}
        for job in self.service.store.list_jobs(states=HOLDING):
            state = "allocated" if job.state == JobState.RUNNING else "held_not_used"
            held = sum(1 for d in job.devices if d in present)  # a vanished one is no GPU
            by_state[state] += held
            by_user[job.user, state] = by_user.get((job.user, state), 0) + held
        by_state["idle"] = len(present) - by_state["allocated"] - by_state["held_not_used"]
        for state, n in by_state.items():
            gpus.add_metric([state], n)
        for (user, state), n in sorted(by_user.items()):
            user_gpus.add_metric([user, state], n)
        for user in sorted(self.service.users.groups()):  # every user seen, and configured
            quota = self.service.quota(user).gpus
            if quota is not None:
                quotas.add_metric([user], quota)
        for device in self.monitor.devices:
            if device.utilization is not None:
                utilization.add_metric([device.id, device.node], device.utilization)
            if device.memory_used is not None:
                memory.add_metric([device.id, device.node], device.memory_used)
        counts = self.service.store.count_jobs()
        kinds = sorted({*JOB_KINDS, *(kind for _, kind in counts)})
        for state in JobState:
            for kind in kinds:
                jobs.add_metric([state.value, kind], counts.get((state, kind), 0))
        queue.add_metric([], sum(n for (state, _), n in counts.items() if state == JobState.QUEUED))
        yield from (gpus, user_gpus, quotas, utilization, memory, jobs, queue)


def _families() -> tuple[GaugeMetricFamily, ...]:
    return (
        GaugeMetricFamily(
            "edt_gpus",
            "GPUs by state: allocated (held by a running job), held_not_used (held by a "
            "starting or suspended job) or idle (held by no job).",
            labels=["state"],
        ),
        GaugeMetricFamily(
            "edt_user_gpus",
            "GPUs each user's jobs hold, by state (allocated or held_not_used).",
            labels=["user", "state"],
        ),
        GaugeMetricFamily(
            "edt_user_gpu_quota",
            "The most GPUs each user's jobs may hold at once (the least of their own and "
            "their groups' quotas); users without a quota are left out.",
            labels=["user"],
        ),
        GaugeMetricFamily(
            "edt_gpu_utilization_percent",
            "Each GPU's utilisation at the latest device reading (NVML; none for virtual GPUs).",
            labels=["device", "node"],
        ),
        GaugeMetricFamily(
            "edt_gpu_memory_used_bytes",
            "Each GPU's memory in use at the latest device reading (NVML; none for virtual GPUs).",
            labels=["device", "node"],
        ),
        GaugeMetricFamily(
            "edt_jobs",
            "Jobs in the store by state and kind (deleted jobs are not counted).",
            labels=["state", "kind"],
        ),
        GaugeMetricFamily("edt_queue_length", "Jobs waiting for GPUs (QUEUED)."),
    )
