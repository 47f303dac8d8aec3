"""From job records and devices to orders: start, resize or suspend a job.

The policy decides the target allocation; this module turns stored jobs into the policy's
input and the difference between target and current into orders. The job service applies them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .inventory import Device
from .policy import DeviceSlot, JobDemand, Policy, PolicyName, allocate

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
    policy: PolicyName | Policy,
    *,
    now: float,
    min_rescale_interval: float,
    progress: Mapping[str, tuple[float | None, Mapping[int, float]]] | None = None,
) -> list[Order]:
    """Orders that take the jobs from their current devices to the policy's target.

    `progress` gives, per job, its remaining steps and its measured steps/s at each GPU count
    (goodput schedules by them; fair-share and priority order ties by the remaining time).
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
            rigid=not j["elastic"],
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
    orders.sort(key=lambda o: (change[o.job_id], o.job_id))
    return _release_first(orders, {d: j["id"] for j in active for d in j["devices"]})


def _release_first(orders: list[Order], holder: Mapping[str, str]) -> list[Order]:
    """`orders` reordered so that each comes after the orders of the jobs holding its devices.

    A job the policy moves to other nodes may take devices that another moving job still
    holds; applied first, it would share them for a moment. Among the orders free to go,
    the earliest in the given order goes first; a cycle (two jobs swapping devices) is
    broken in that order.
    """
    pending = {o.job_id for o in orders}

    def blocked(order: Order) -> bool:
        return any(
            holder.get(d, order.job_id) != order.job_id and holder[d] in pending
            for d in order.devices
        )

    orders = list(orders)
    out: list[Order] = []
    while orders:
        i = next((k for k, o in enumerate(orders) if not blocked(o)), 0)
        pending.discard(orders[i].job_id)
        out.append(orders.pop(i))
    return out
