"""From jobs' demands and devices to orders: start, resize or suspend a job.

The policy decides the target allocation; this module turns the difference between target and
current into orders, in an order that frees devices before they are taken. The job service's
scheduling loop (``jobs/scheduler.py``) builds the demands from its records and applies the
orders.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from .inventory import Device
from .policy import DeviceSlot, JobDemand, Policy, PolicyName, allocate

Action = Literal["start", "resize", "suspend"]


@dataclass(frozen=True)
class Order:
    job_id: str
    action: Action
    devices: tuple[str, ...]


def plan(
    jobs: Sequence[JobDemand],
    devices: Sequence[Device],
    policy: PolicyName | Policy,
    *,
    now: float,
    min_rescale_interval: float,
    restart_interval: float = 0.0,
) -> list[Order]:
    """Orders that take the jobs from the devices they hold (`JobDemand.current`) to the
    policy's target. `jobs` are those the policy deals devices to: running or waiting."""
    slots = [DeviceSlot(d.id, d.node) for d in devices]
    target = allocate(
        jobs,
        slots,
        policy,
        now=now,
        min_rescale_interval=min_rescale_interval,
        restart_interval=restart_interval,
    )
    orders = []
    change: dict[str, int] = {}
    for job in jobs:
        want = tuple(target[job.id])
        have = job.current
        if want == have:
            continue
        change[job.id] = len(want) - len(have)
        if not have:
            orders.append(Order(job.id, "start", want))
        elif not want:
            orders.append(Order(job.id, "suspend", want))
        else:
            orders.append(Order(job.id, "resize", want))
    # Free devices before anyone takes them: suspensions and shrinks come first.
    orders.sort(key=lambda o: (change[o.job_id], o.job_id))
    return _release_first(orders, {d: j.id for j in jobs for d in j.current})


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
