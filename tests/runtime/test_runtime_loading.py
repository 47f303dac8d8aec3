"""Reading micro-batches ahead in DataLoader worker processes (runtime/loading.py): the same data
whatever the number of workers and whoever reads it, read ahead, re-planned when the trainer
asks for something else, and no worker process left behind."""

from __future__ import annotations

import itertools
import os
import random
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset, default_collate
from waiting import eventually_sync

from jupyter_edt.runtime import partition as part
from jupyter_edt.runtime.loading import MicroBatchLoader, Task, data_seed, read

SEED = 7
N, BATCH, MICRO = 48, 12, 3  # 4 steps an epoch, 4 micro-batches a step
WAIT_S = 15.0


class Augmented(Dataset):
    """Samples drawn with every kind of randomness a Dataset may use: a torch crop offset, a
    torch flip with probability 0.5, Python's random, NumPy's. With `log`, each read leaves a
    file there named by the index and the reading process."""

    def __init__(self, log: Path | None = None) -> None:
        self.images = torch.arange(N * 10, dtype=torch.float32).reshape(N, 10)
        self.log = log

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> tuple[torch.Tensor, float, float, int]:
        if self.log is not None:
            (self.log / f"{i}-{os.getpid()}-{uuid.uuid4().hex}").touch()
        start = int(torch.randint(0, 3, ()))
        x = self.images[i][start : start + 8]
        if torch.rand(()) < 0.5:
            x = x.flip(0)
        return x, random.random(), float(np.random.normal()), i


def tasks_of(epoch: int, steps: range, block: tuple[int, int]) -> list[Task]:
    """The trainer's plan: micro-batches `block` of each of `steps`, in order."""
    perm = part.epoch_permutation(N, SEED, epoch)
    plan = []
    for step in steps:
        mbs = part.micro_batches(part.global_batch(perm, step, BATCH), MICRO)
        plan += [
            Task(("train", epoch, step, j), mbs[j], data_seed(SEED, epoch, step, j))
            for j in range(*block)
        ]
    return plan


def same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def reads(log: Path) -> list[tuple[int, int]]:
    """(index, pid) of every read so far."""
    return [(int(i), int(pid)) for i, pid, _ in (f.name.split("-") for f in log.iterdir())]


def children() -> set[int]:
    """This process's live child processes."""
    me, found = str(os.getpid()), set()
    for entry in os.scandir("/proc"):
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                state, ppid = f.read().rsplit(")", 1)[1].split()[:2]
        except (OSError, ValueError):
            continue
        if ppid == me and state != "Z":
            found.add(int(entry.name))
    return found


def test_data_seed_is_stable_and_apart_from_the_forward_seed() -> None:
    # A golden value: checkpoints resumed by another version must see the same augmentation.
    assert data_seed(0, 0, 0, 0) == data_seed(0, 0, 0, 0) == 60018157137348192
    seeds = {data_seed(*a) for a in itertools.product((0, 1), (0, 1), (-1, 0), (0, 1))}
    assert len(seeds) == 16 and all(0 <= s < 2**63 for s in seeds)
    assert data_seed(3, 1, 2, 0) != part.micro_batch_seed(3, 1, 2, 0)


def test_read_depends_on_the_task_only_and_leaves_the_callers_randomness() -> None:
    ds, task = Augmented(), Task(("t",), list(range(12)), data_seed(SEED, 0, 0, 0))

    def seed_all(seed: int) -> None:
        torch.manual_seed(seed)
        random.seed(seed)
        np.random.seed(seed)

    def draws() -> tuple[float, float, float]:
        return torch.rand(()).item(), random.random(), float(np.random.rand())

    seed_all(1)
    plain = draws()
    seed_all(1)
    first = read(ds, default_collate, task)
    assert draws() == plain  # the caller's generators are where they were
    seed_all(2)
    assert same(read(ds, default_collate, task), first)
    # Not vacuous: another seed moves every kind of randomness.
    other = read(ds, default_collate, task._replace(seed=task.seed + 1))
    assert all(not torch.equal(a, b) for a, b in zip(first[:3], other[:3], strict=True))
    assert torch.equal(first[3], other[3])


def test_batches_are_the_same_whatever_num_workers_and_read_order() -> None:
    ds, plan = Augmented(), tasks_of(0, range(2), (0, 4))
    expected = {t.key: read(ds, default_collate, t) for t in reversed(plan)}
    for num_workers in (0, 1, 2):
        with MicroBatchLoader(ds, default_collate, num_workers) as loader:
            # Two plans: the second half first (nothing read before it), then the first half.
            for part_ in (plan[4:], plan[:4]):
                for k, task in enumerate(part_):
                    batch = loader.get(task, lambda p=part_, k=k: iter(p[k:]))
                    assert same(batch, expected[task.key]), (num_workers, task.key)


def test_get_follows_the_plan_and_replans_for_anything_else() -> None:
    ds = Augmented()

    def check(loader: MicroBatchLoader, plan: list[Task], k: int) -> None:
        batch = loader.get(plan[k], lambda: iter(plan[k:]))
        assert same(batch, read(ds, default_collate, plan[k])), plan[k].key

    with MicroBatchLoader(ds, default_collate, 2) as loader:
        rank0 = tasks_of(0, range(4), (0, 2))  # rank 0 of 2
        for k in range(3):
            check(loader, rank0, k)
        alone = tasks_of(0, range(2, 4), (0, 4))  # the group shrank to 1 at step 2
        for k in range(3):
            check(loader, alone, k)
        for k in (0, 1, 1, 2, 3):  # the step redone from its start, then its task 1 again
            check(loader, alone, k)
        with pytest.raises(ValueError, match="does not start with"):
            loader.get(alone[0], lambda: iter(alone[1:]))
        # A reading error reaches the caller as the Dataset raised it; the loader reads on.
        broken = Task(("train", 9, 0, 0), [0, N + 1], 0)
        with pytest.raises(IndexError):
            loader.get(broken, lambda: iter([broken, *alone]))
        check(loader, [broken, *alone], 1)

        # A lazy, endless plan: every epoch from 1 on, rank 1 of 2.
        def from_epoch_1() -> Iterator[Task]:
            epochs = itertools.count(1)
            return itertools.chain.from_iterable(tasks_of(e, range(4), (2, 4)) for e in epochs)

        ahead, endless = list(itertools.islice(from_epoch_1(), 10)), from_epoch_1()
        for k, task in enumerate(ahead):
            assert same(loader.get(task, lambda: endless), read(ds, default_collate, task)), k


def test_an_interrupted_get_leaves_the_loader_in_step() -> None:
    ds, plan = Augmented(), tasks_of(0, range(1), (0, 4))
    with MicroBatchLoader(ds, default_collate, 1) as loader:
        loader.get(plan[0], lambda: iter(plan))
        waiting = loader._batches  # the DataLoader's iterator

        def interrupted() -> None:  # Ctrl-C while waiting for the workers: once
            del waiting._get_data
            raise KeyboardInterrupt

        waiting._get_data = interrupted
        with pytest.raises(KeyboardInterrupt):
            loader.get(plan[1], lambda: iter(plan[1:]))
        # The batch of plan[1] comes next from the workers: not taken for plan[2]'s.
        batch = loader.get(plan[2], lambda: iter(plan[2:]))
        assert same(batch, read(ds, default_collate, plan[2]))


def test_workers_read_ahead_in_other_processes(tmp_path: Path) -> None:
    plan = tasks_of(0, range(4), (0, 4))  # 16 tasks, no index twice
    before = children()
    with MicroBatchLoader(Augmented(log=tmp_path), default_collate, 2, prefetch_factor=2) as lo:
        lo.get(plan[0], lambda: iter(plan))

        def read_tasks() -> set[int]:
            done = {i for i, _ in reads(tmp_path)}
            return {k for k, t in enumerate(plan) if done.issuperset(t.indices)}

        # Without another get(): the next prefetch_factor * num_workers tasks, and no more.
        eventually_sync(
            read_tasks, "tasks 1-4 read ahead", until=set(range(5)).issubset, timeout=WAIT_S
        )
        assert read_tasks() == set(range(5))
        workers = children() - before
        assert len(workers) == 2
        assert {pid for _, pid in reads(tmp_path)} == workers  # both read, neither is this one


def test_start_forks_the_workers_once_and_close_ends_them(tmp_path: Path) -> None:
    plan = tasks_of(0, range(2), (0, 4))
    before = children()
    loader = MicroBatchLoader(Augmented(log=tmp_path), default_collate, 2)
    rng = torch.get_rng_state()
    loader.start()
    workers = children() - before
    assert len(workers) == 2  # forked by start(), before anything is asked for
    loader.start()
    for k in range(len(plan)):
        loader.get(plan[k], lambda k=k: iter(plan[k:]))
    loader.get(plan[2], lambda: iter(plan[2:]))  # a re-plan resets the same workers
    assert children() - before == workers
    assert torch.equal(torch.get_rng_state(), rng)  # the training process's randomness is its own
    assert {pid for _, pid in reads(tmp_path)} <= workers
    loader.close()
    eventually_sync(lambda: not workers & children(), "the workers ended", timeout=WAIT_S)
    loader.close()
    with pytest.raises(RuntimeError, match="closed"):
        loader.get(plan[0], lambda: iter(plan))


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"num_workers": -1}, "num_workers"),
        ({"num_workers": 1.5}, "num_workers"),
        ({"num_workers": True}, "num_workers"),
        ({"num_workers": 1, "prefetch_factor": 0}, "prefetch_factor"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        MicroBatchLoader(Augmented(), default_collate, **kwargs)
