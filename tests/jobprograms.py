"""Training programs that tests submit as jobs, and how long a test may wait for one."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from jupyter_edt.jobs.models import Job

DEADLINE_S = 180.0


def program(
    epochs: int,
    *,
    samples: int = 48,
    batch: int = 8,
    delay: float = 0.0,
    fail=False,
    hold: Path | None = None,
):
    """A tiny classifier in the runtime's Trainer; `delay` seconds per sample stands for work.
    `hold`: each process, once it has read a few samples (a step or two), waits until that
    file exists, so a test keeps the job running through what it does meanwhile however fast
    its processes start (the machine's files: every local Ray node sees them)."""
    held = None if hold is None else str(hold)
    return textwrap.dedent(
        f"""
        import os
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
                read[0] += 1
                while {held!r} and read[0] > 4 and not os.path.exists({held!r}):
                    time.sleep(0.05)
                return self.x[i], self.y[i]

        read = [0]

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


#: A model whose layer expects 32 features, fed 64: every worker fails in its forward (main.py:11,
#: ``RuntimeError: mat1 and mat2 shapes cannot be multiplied (8x64 and 32x10)``), after printing
#: "loading data".
SHAPE_BUG = textwrap.dedent(
    """\
    import torch
    from torch import nn
    from torch.utils.data import TensorDataset
    from jupyter_edt.runtime import Trainer

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(32, 10)
        def forward(self, x):
            return self.fc(x)

    x, y = torch.randn(64, 64), torch.randint(0, 10, (64,))
    print("loading data")
    trainer = Trainer(
        Net(),
        lambda: (TensorDataset(x, y), TensorDataset(x[:8], y[:8])),
        nn.functional.cross_entropy,
        lambda params: torch.optim.SGD(params, lr=0.1),
    )
    trainer.fit(1, 32, 2, micro_batch_size=8)
    """
)


def elastic(job: Job | dict) -> bool:
    """Running and resizable in place: its program's elastic runtime has announced itself
    (until then a job is rigid, and the allocator leaves its devices as they are). `job`: a
    record from the store, or its JSON from the API."""
    record = job.to_dict() if isinstance(job, Job) else job
    return record["state"] == "RUNNING" and record["elastic"]


#: Names, in an exact program's environment, the directory of its reference run (no job).
REFERENCE_ENV = "EDT_TEST_REFERENCE_DIR"
#: Where the trainer saves the final model, below a job's RESULT_DIR or a reference directory.
FINAL_MODEL = Path("model") / "model_epoch_final.pth"


def exact_program(
    epochs: int,
    max_gpus: int,
    *,
    work_s: float,
    checkpoint_every: int,
    hurry: Path | None = None,
) -> str:
    """A float64 job with momentum and a learning-rate scheduler: a rescale, a move or a
    resume that lost or changed any state would not end where an uninterrupted run ends.
    Each loss computation takes `work_s` more seconds in a job (none in the reference run), so
    that the job is still running while a test acts on it; once the file `hurry` exists, none
    (the test has seen what it waited for: the rest need not take long)."""
    return textwrap.dedent(
        f"""
        import os, time
        import torch
        from torch import nn
        from torch.utils.data import TensorDataset
        from jupyter_edt.runtime import Trainer

        torch.set_default_dtype(torch.float64)
        g = torch.Generator().manual_seed(1)
        x = torch.randn(48, 4, generator=g)
        y = (x[:, 0] > 0).long()
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
        # in a job its RESULT_DIR; the uninterrupted reference run names its own
        reference = os.environ.get({REFERENCE_ENV!r})

        hurry = {str(hurry) if hurry else None!r}

        def loss(out, target):
            if not reference and not (hurry and os.path.exists(hurry)):
                time.sleep({work_s})
            return nn.functional.cross_entropy(out, target)

        trainer = Trainer(
            model,
            lambda: (TensorDataset(x, y), TensorDataset(x[:8], y[:8])),
            loss,
            lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9),
            lr_scheduler=lambda opt: torch.optim.lr_scheduler.StepLR(opt, 3, gamma=0.5),
        )
        trainer.fit(
            {epochs}, 8, {max_gpus}, checkpoint_every={checkpoint_every}, micro_batch_size=2,
            result_dir=reference,
        )
        """
    )


def reference_model(code: str, tmp_path: Path) -> dict:
    """The final parameters of `code` (an `exact_program`) run once in a plain process."""
    import torch

    reference = tmp_path / "reference"
    (tmp_path / "program.py").write_text(code)
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDT_")}
    subprocess.run(
        [sys.executable, str(tmp_path / "program.py")],
        env={**env, REFERENCE_ENV: str(reference)},
        check=True,
        timeout=DEADLINE_S,
    )
    return torch.load(reference / FINAL_MODEL)


#: What a torchrun program reads of its environment; `ddp_program` records it per start.
TORCHRUN_NAMES = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "ROLE_NAME",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "OMP_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES",
)


def ddp_program(
    *,
    samples: int = 64,
    batch: int = 4,
    hold: Path | None = None,
    ignore_sigterm: bool = False,
    fail: bool = False,
) -> str:
    """An unmodified torchrun DDP program: `init_process_group` from the environment, a
    `DistributedSampler`, `DistributedDataParallel`, a checkpoint from rank 0. Each rank
    writes ``start<restart count>-rank<rank>.json`` into RESULT_DIR as soon as its group has
    formed (its torchrun variables, its node, the samples it read, so far and at the end).
    `hold`: the ranks train epoch after epoch until that file exists (they agree on it each
    step), so a test can resize or stop the job meanwhile. `ignore_sigterm`: it ignores
    SIGTERM, as a program may. `fail`: it fails at every start, with its own error."""
    held = None if hold is None else str(hold)
    return textwrap.dedent(
        f"""
        import json, os, signal, socket
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

        if {ignore_sigterm!r}:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if {fail!r}:
            raise RuntimeError("the training data has no labels")
        torch.set_num_threads(1)
        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
        out = os.environ["RESULT_DIR"]
        names = {TORCHRUN_NAMES!r}
        record = {{"env": {{k: os.environ.get(k) for k in names}}, "rank": rank,
                   "world": world, "host": socket.gethostname(),
                   "worker": os.environ.get("EDT_WORKER_ID"), "seen": [], "done": False}}
        count = os.environ["TORCHELASTIC_RESTART_COUNT"]
        path = os.path.join(out, f"start{{count}}-rank{{rank}}.json")

        def write():
            with open(path + ".tmp", "w") as f:
                json.dump(record, f)
            os.replace(path + ".tmp", path)

        write()
        g = torch.Generator().manual_seed(0)
        x = torch.randn({samples}, 4, generator=g)
        data = TensorDataset(torch.arange({samples}), x, x.sum(1, keepdim=True))
        sampler = DistributedSampler(data, shuffle=False)
        loader = DataLoader(data, batch_size={batch}, sampler=sampler)
        torch.manual_seed(0)
        model = DDP(torch.nn.Linear(4, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        epoch = 0
        while True:
            sampler.set_epoch(epoch)
            for index, xb, yb in loader:
                if epoch == 0:
                    record["seen"] += index.tolist()
                opt.zero_grad()
                torch.nn.functional.mse_loss(model(xb), yb).backward()
                opt.step()
            epoch += 1
            go_on = torch.tensor([{held!r} is not None and not os.path.exists({held!r} or "")])
            dist.all_reduce(go_on, op=dist.ReduceOp.MIN)
            write()
            if not go_on.item():
                break
        if rank == 0:
            torch.save(model.module.state_dict(), os.path.join(out, "ddp.pt"))
        record["done"] = True
        write()
        dist.destroy_process_group()
        """
    )
