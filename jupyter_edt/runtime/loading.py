"""Reading micro-batches ahead, in DataLoader worker processes, with data that never depends on
who reads them.

The trainer knows every micro-batch in advance (``partition.py``: a pure function of seed,
epoch, step and index), so worker processes can read and collate the next ones while the
current one computes. What they read must not depend on ``num_workers`` or on which process reads
a micro-batch: a DataLoader seeds each worker once (``base_seed + worker_id``), so random
augmentation in ``Dataset.__getitem__`` would follow the worker count and the dealing of tasks to
workers. Here every micro-batch is read under its own seed (:func:`data_seed`), whichever process
reads it, after whichever others.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import random
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

import torch
from torch.utils.data import DataLoader, Dataset

__all__ = ["MicroBatchLoader", "Task", "data_seed", "read"]


class Task(NamedTuple):
    """One micro-batch to read: its data is a pure function of ``indices`` and ``seed``."""

    key: tuple  # which micro-batch, e.g. ("train", epoch, step, j) or ("val", epoch, j)
    indices: list[int]  # dataset indices, in order
    seed: int  # the seed of its data randomness: data_seed(...)


def data_seed(seed: int, epoch: int, step: int, index: int) -> int:
    """63-bit seed of one micro-batch's data randomness (``step`` -1 for validation).

    Stable across processes and Python versions; salted, so that it differs from
    ``partition.micro_batch_seed`` of the same micro-batch: the augmentation and the forward
    (Dropout) draw independent streams."""
    text = f"{seed},{epoch},{step},{index}".encode()
    digest = hashlib.blake2b(text, digest_size=8, salt=b"edt-data").digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def read(dataset: Dataset[Any], collate_fn: Callable[[list[Any]], Any], task: Task) -> Any:
    """``collate_fn([dataset[i] for i in task.indices])`` with torch's default generator, Python's
    ``random`` and NumPy's global RNG seeded by ``task.seed``: what a Dataset draws depends on
    the task only. The caller's RNG states are restored afterwards, so reading in the training
    process (``num_workers=0``) leaves its randomness as a worker process would."""
    # torch imports numpy whenever it is installed, so a dataset's numpy is already here.
    np = sys.modules.get("numpy")
    saved = torch.default_generator.get_state(), random.getstate()
    np_saved = np.random.get_state() if np is not None else None
    # torch.default_generator rather than torch.manual_seed, which would also seed CUDA: a
    # forked worker must not touch CUDA.
    torch.default_generator.manual_seed(task.seed)
    random.seed(task.seed)
    if np is not None:
        np.random.seed([task.seed & 0xFFFFFFFF, task.seed >> 32])  # all 63 bits, as 32-bit words
    try:
        return collate_fn([dataset[i] for i in task.indices])
    finally:
        torch.default_generator.set_state(saved[0])
        random.setstate(saved[1])
        if np is not None:
            np.random.set_state(np_saved)


class _Reader(Dataset[Any]):
    """What the DataLoader's workers index: a task in, its key and collated batch out (the key
    lets the loader check that what arrives is what it expects)."""

    def __init__(self, dataset: Dataset[Any], collate_fn: Callable[[list[Any]], Any]) -> None:
        self.dataset, self.collate_fn = dataset, collate_fn

    def __getitem__(self, task: Task) -> tuple[tuple, Any]:  # type: ignore[override]
        return task.key, read(self.dataset, self.collate_fn, task)


class _Plan:
    """The DataLoader's sampler: yields the current plan's tasks lazily, in the training
    process, remembering those sent to the workers and not yet taken."""

    def __init__(self) -> None:
        self.tasks: Iterable[Task] = ()
        self.sent: deque[Task] = deque()

    def __iter__(self) -> Iterator[Task]:
        for task in self.tasks:
            self.sent.append(task)
            yield task


def _as_is(item: Any) -> Any:
    """The DataLoader's collate_fn: batches are collated by :func:`read` already (with
    ``batch_size=None`` the DataLoader would otherwise ``default_convert`` them)."""
    return item


class MicroBatchLoader:
    """The micro-batches of a plan, read ahead by ``num_workers`` processes (0: read on demand,
    in this process).

    Built on a DataLoader with persistent workers: a new plan restarts its iterator (``_reset``)
    instead of forking new processes. A re-plan waits for the reads in flight (at most
    ``prefetch_factor`` per worker) to finish and drops them, as the DataLoader's reset does.
    With ``pin_memory`` (for a CUDA device; ignored with ``num_workers=0``, where nothing would
    overlap the copy) a thread of this process pins each batch as it arrives, so that the
    copy to the GPU can be asynchronous. That thread works on the CUDA device current when the
    workers start: make the training device current first, or a process that sees several GPUs
    opens a context on GPU 0 too."""

    def __init__(
        self,
        dataset: Dataset[Any],
        collate_fn: Callable[[list[Any]], Any],
        num_workers: int,
        *,
        pin_memory: bool = False,
        prefetch_factor: int = 2,
    ) -> None:
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError(f"num_workers must be an int >= 0, not {num_workers!r}")
        if isinstance(prefetch_factor, bool) or not isinstance(prefetch_factor, int):
            raise ValueError(f"prefetch_factor must be an int >= 1, not {prefetch_factor!r}")
        if prefetch_factor < 1:
            raise ValueError(f"prefetch_factor must be an int >= 1, not {prefetch_factor!r}")
        self.dataset, self.collate_fn, self.num_workers = dataset, collate_fn, num_workers
        self._plan = _Plan()
        self._batches: Any = None  # the DataLoader's iterator, once started
        self._closed = False
        self._loader: DataLoader[Any] | None = None
        if num_workers == 0:
            return
        self._loader = DataLoader(
            _Reader(dataset, collate_fn),
            batch_size=None,
            sampler=self._plan,  # type: ignore[arg-type]
            collate_fn=_as_is,
            num_workers=num_workers,
            pin_memory=pin_memory,
            prefetch_factor=prefetch_factor,
            persistent_workers=True,
            # Fork: the workers start at once, with the dataset as it is here, nothing pickled.
            # The trainer process runs torch.distributed (and CUDA) threads that a forked child
            # does not have: a Dataset must not use torch.distributed or CUDA in __getitem__.
            multiprocessing_context=(
                "fork" if "fork" in multiprocessing.get_all_start_methods() else None
            ),
            # The DataLoader draws its workers' base seed from this generator when it starts
            # them; a private one keeps the training process's global RNG untouched.
            generator=torch.Generator(),
        )

    def start(self) -> None:
        """Start the worker processes now (a joiner calls this before it joins its group, so
        they start while it receives the state). No-op with ``num_workers=0``. Idempotent."""
        self._check_open()
        if self._loader is not None and self._batches is None:
            self._plan.tasks = ()  # the first get() re-plans
            self._batches = iter(self._loader)

    def get(self, task: Task, upcoming: Callable[[], Iterable[Task]]) -> Any:
        """The collated micro-batch of ``task``. When it is the next one read ahead, it comes from
        the workers; otherwise (first call, a new epoch's plan, a resize changed which
        micro-batches this worker computes, a failed step is redone) what was read ahead is
        dropped and reading starts over from ``upcoming()``, a (lazy, possibly long) iterable of
        tasks whose first item is ``task``. With ``num_workers=0`` it is read here, now.

        A reading error in a worker is raised here, as the Dataset raised it."""
        self._check_open()
        if self._loader is None:
            return read(self.dataset, self.collate_fn, task)
        for fresh in (False, True):
            if fresh:
                self._replan(upcoming)
            if self._plan.sent and self._plan.sent[0] == task:
                self._plan.sent.popleft()
                key, batch = next(self._batches)
                if key == task.key:
                    return batch
                # Out of step with the workers (a get() interrupted while waiting): start over.
            elif fresh:
                raise ValueError(f"upcoming() does not start with the task asked for, {task}")
        raise RuntimeError(f"the workers did not return {task.key} after a re-plan")

    def _replan(self, upcoming: Callable[[], Iterable[Task]]) -> None:
        # DataLoader.__iter__ with persistent workers creates its iterator (and forks the
        # workers) once, and later resets it: it calls iter(sampler), waits until every worker
        # has acknowledged the reset (so after the reads queued before it, whose results are
        # dropped), then sends prefetch_factor tasks per worker from the new plan.
        self._plan.tasks = upcoming()
        self._plan.sent.clear()
        self._batches = iter(self._loader)

    def close(self) -> None:
        """End the worker processes (and the pinning thread); idempotent. Were this process to
        die instead, each worker's watchdog (torch's ``ManagerWatchdog``: its parent pid
        changed) ends it within 5 s of its current read."""
        self._closed = True
        batches, self._batches = self._batches, None
        if batches is not None:
            # What DataLoader's own __del__ does; calling it now ends the workers at once,
            # whatever other references there are. It joins them, killing any that linger.
            batches._shutdown_workers()
        if self._loader is not None:
            self._loader._iterator = None
        self._plan.sent.clear()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this MicroBatchLoader is closed")

    def __enter__(self) -> MicroBatchLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
