"""Training programs that tests submit as jobs, and how long a test may wait for one."""

from __future__ import annotations

import textwrap

from jupyter_edt.jobs.models import Job

DEADLINE_S = 180.0


def program(epochs: int, *, samples: int = 48, batch: int = 8, delay: float = 0.0, fail=False):
    """A tiny classifier in the runtime's Trainer; `delay` seconds per sample stands for work."""
    return textwrap.dedent(
        f"""
        import time
        import torch
        from torch import nn
        from torch.utils.data import Dataset
        from jupyter_edt.runtime import Trainer

        class Data(Dataset):
            def __init__(self, n, seed):
                g = torch.Generator().manual_seed(seed)
                self.x = torch.randn(n, 4, generator=g)
                self.y = (self.x[:, 0] > 0).long()
            def __len__(self):
                return len(self.x)
            def __getitem__(self, i):
                time.sleep({delay})
                return self.x[i], self.y[i]

        if {fail!r}:
            raise ValueError("the data directory is empty")
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
        trainer = Trainer(
            model,
            lambda: (Data({samples}, 1), Data(16, 2)),
            nn.functional.cross_entropy,
            lambda params: torch.optim.SGD(params, lr=0.1),
        )
        trainer.fit({epochs}, {batch}, 4, checkpoint_every=1, micro_batch_size=2)
        """
    )


def elastic(job: Job | dict) -> bool:
    """Running and resizable in place: its program's elastic runtime has announced itself
    (until then a job is rigid, and the allocator leaves its devices as they are). `job`: a
    record from the store, or its JSON from the API."""
    record = job.to_dict() if isinstance(job, Job) else job
    return record["state"] == "RUNNING" and record["elastic"]
