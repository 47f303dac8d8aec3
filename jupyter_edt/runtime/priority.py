"""A joiner's CPU priority: lowered while it prepares (its launcher may start it so, see
``ProcessSpec.nice``), so that the job's training processes go first on shared cores; raised
back as it joins, since from then on the whole job waits for its slowest worker."""

from __future__ import annotations

import contextlib
import os

#: Set by the launcher when it started this process that much lower than its own priority.
START_NICE_ENV = "EDT_START_NICE"


def restore_start_priority() -> int:
    """Raise every thread of this process back by what it started lower; returns by how much
    (0: it did not start lower). Linux keeps a priority per thread, and threads started meanwhile
    (intra-op, gloo) inherited the lowered one."""
    lowered = int(os.environ.pop(START_NICE_ENV, "0") or 0)
    if lowered <= 0:
        return 0
    try:
        raise_threads("self", lowered)
    except PermissionError:
        # the user's own account may not: the fork server that lowered it raises it back
        from ..launch.forkserver import FORKSERVER_ENV, ForkClient

        with contextlib.suppress(KeyError, OSError):
            ForkClient(os.environ[FORKSERVER_ENV]).restore(lowered)
    return lowered


def raise_threads(pid: int | str, by: int, ceiling: int = -20) -> None:
    """Raise the CPU priority of every thread of process `pid` (``"self"``: this one) by `by`,
    never above `ceiling` (a nice value). PermissionError when this process may not."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(ProcessLookupError):  # a thread that just ended
            now = os.getpriority(os.PRIO_PROCESS, int(tid))
            os.setpriority(os.PRIO_PROCESS, int(tid), max(ceiling, now - max(0, by)))
