"""From job records and devices to orders: start, resize or suspend a job.

The policy decides the target allocation; this module turns stored jobs into the policy's
input and the difference between target and current into orders. The job service applies them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .inventory import Device
from .policy import DeviceSlot, JobDemand, PolicyName, allocate

Action = Literal["start", "resize", "suspend"]

# Jobs that hold, or wait for, devices.
SCHEDULED_STATES = frozenset({"QUEUED", "STARTING", "RUNNING"})


@dataclass(frozen=True)
class Order:
    job_id: str
    action: Action
    devices: tuple[str, ...]


def plan(
    jobs: Sequence[Mapping[str, Any]],
    devices: Sequence[Device],
    policy: PolicyName,
    *,
    now: float,
    min_rescale_interval: float,
    progress: Mapping[str, tuple[float | None, Mapping[int, float]]] | None = None,
) -> list[Order]:
    """Orders that take the jobs from their current devices to the policy's target.

    `progress` gives, per job, its remaining steps and its measured steps/s at each GPU count
    (what the goodput policy uses; the others ignore it).
    """
    progress = progress or {}
    active = [j for j in jobs if j["state"] in SCHEDULED_STATES]
    demands = [
        JobDemand(
            id=j["id"],
            user=j["user"],
            min_gpus=j["min_gpus"],
            max_gpus=j["max_gpus"],
            priority=j["priority"],
            submitted=j["created"],
            current=tuple(j["devices"]),
            last_rescale=j["rescaled"],
            remaining_steps=progress.get(j["id"], (None, {}))[0],
            throughput=dict(progress.get(j["id"], (None, {}))[1]) or None,
        )
        for j in active
    ]
    slots = [DeviceSlot(d.id, d.node) for d in devices]
    target = allocate(demands, slots, policy, now=now, min_rescale_interval=min_rescale_interval)
    orders = []
    change: dict[str, int] = {}
    for job in active:
        want = tuple(target[job["id"]])
        have = tuple(job["devices"])
        if want == have:
            continue
        change[job["id"]] = len(want) - len(have)
        if not have:
            orders.append(Order(job["id"], "start", want))
        elif not want:
            orders.append(Order(job["id"], "suspend", want))
        else:
            orders.append(Order(job["id"], "resize", want))
    # Free devices before anyone takes them: suspensions and shrinks come first.
    return sorted(orders, key=lambda o: (change[o.job_id], o.job_id))
