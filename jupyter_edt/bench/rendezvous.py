"""The store a benchmark's DDP workers meet at, held by the benchmark itself, as torchrun's
agent holds it for its workers.

A port found free and handed to rank 0 to listen on may be taken meanwhile by any other
process of a busy machine (a test suite's), and the run then fails. The store here listens
from the moment its port is known; the workers connect to it as torchrun's workers connect to
their agent's (``TORCHELASTIC_USE_AGENT_STORE``), so `init_process_group` reads the same
torchrun variables as ever."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import timedelta


@contextlib.contextmanager
def agent_store(world: int, host: str = "127.0.0.1") -> Iterator[dict[str, str]]:
    """While it lasts, the environment (beyond RANK and the world's sizes) that gets `world`
    workers of this machine into one group through ``env://``."""
    import torch.distributed as dist

    store = dist.TCPStore(
        host, 0, world, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=120)
    )
    try:
        yield {
            "MASTER_ADDR": host,
            "MASTER_PORT": str(store.port),
            "TORCHELASTIC_USE_AGENT_STORE": "True",
            "TORCHELASTIC_RESTART_COUNT": "0",
        }
    finally:
        del store
