"""Training state: capture, restore, move between workers, and atomic checkpoints.

:class:`TrainState` is what the workers of a job keep equal (in the spirit of Horovod's elastic
``State``): the model, the optimizer, the LR scheduler, fp16's loss scale, the agreed
hyperparameters with the changes not yet agreed, the data cursor and the RNG. What it captures
is a plain nested structure of dicts, lists and tensors (model, optimizer and LR
scheduler ``state_dict``s, the data cursor and the RNG). To move it to a joiner without touching
disk it is split into a small pickled skeleton and its tensors, which travel one by one as raw
bytes over point-to-point messages of the process group: no copy into one big buffer on the
sender, one allocation per tensor on the receiver.

On a CUDA job (``on_device=True``) the tensors that live on the GPU travel GPU to GPU over
NCCL, in one batch of point-to-point calls on the generation's communicator; the skeleton and the
host tensors (RNG states, Adam's step counters) go over gloo. (The alternative, staging
everything through host memory over gloo, which ``EDT_BACKEND=gloo`` selects, moves about
0.8 GB/s on loopback: 0.12 s for 100 MB on the 2-core dev machine, plus the device copies; NCCL
moves the same over NVLink in milliseconds, which matters from a few hundred MB of Adam state.)
Checkpoints are always written
with host tensors (:func:`to_cpu`) and read with ``map_location="cpu"``; ``load_state_dict``
then puts each tensor where its module or optimizer lives, so a job saved on GPUs resumes on
CPUs and the other way round.
"""

from __future__ import annotations

import copy
import os
import pickle
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from . import hyper
from .jobdir import checkpoint_name, checkpoints

__all__ = [
    "TrainState",
    "atomic_save",
    "flatten",
    "latest_checkpoint",
    "recv_state",
    "save_checkpoint",
    "send_state",
    "to_cpu",
    "unflatten",
]


class TrainState:
    """Everything a joiner or a checkpoint needs to continue exactly, and nothing of where the
    worker sits (rank, generation: see ``membership.py``).

    The cursor (``epoch``, ``step`` within it, ``global_step``, ``ckpt_seen``: checkpoint
    requests already served) says where training stands. The hyperparameters are agreed
    between workers before each optimizer step (``hyper.py``): ``hp_agreed`` is the last
    agreement, ``hp_trace`` the values after each piece of user code since then.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        lr_scheduler: Any,
        device: torch.device,
        scaler: Any = None,
    ) -> None:
        self.model = model
        self.scaler = scaler  # fp16's loss scale (precision.LossScaler), None otherwise
        self.optimizer = optimizer
        self.lr_scheduler = lr_scheduler
        self.device = device
        self.epoch = self.step = self.global_step = self.ckpt_seen = 0
        self.hp = hyper.Tracker(optimizer)
        self.hp_agreed: hyper.Snapshot | None = None  # the last agreed hyperparameters
        self.hp_trace: list[hyper.Snapshot] = []  # after each piece of user code since then

    def agreed_hp(self) -> hyper.Snapshot:
        """The agreed hyperparameters; before any agreement, the optimizer's own."""
        if self.hp_agreed is None:
            return self.hp.snapshot()
        return self.hp_agreed

    def note_hyperparameters(self) -> None:
        """Add the hyperparameters that user code just left to the trace, if they changed (the
        trace that ``hyper.agree`` reads when workers differ; usually a comparison per param
        group)."""
        snap = self.hp.snapshot()
        if snap != (self.hp_trace[-1] if self.hp_trace else self.hp_agreed):
            self.hp_trace.append(snap)

    def capture(self) -> dict[str, Any]:
        """The state as a plain structure (tensors where they live)."""
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "lr_scheduler": self.lr_scheduler.state_dict() if self.lr_scheduler else None,
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "hyperparameters": {"agreed": self.agreed_hp(), "trace": list(self.hp_trace)},
            "cursor": {
                "epoch": self.epoch,
                "step": self.step,
                "global_step": self.global_step,
                "ckpt_seen": self.ckpt_seen,
            },
            "rng": torch.get_rng_state(),
            "cuda_rng": (
                torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None
            ),
        }

    def restore(self, state: Mapping[str, Any]) -> None:
        """Take a state made by :meth:`capture` (from a peer or a checkpoint)."""
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.lr_scheduler is not None and state["lr_scheduler"] is not None:
            self.lr_scheduler.load_state_dict(state["lr_scheduler"])
        if self.scaler is not None and state.get("scaler") is not None:
            self.scaler.load_state_dict(state["scaler"])
        # a joiner takes the sender's pending changes as its own; a state from before the
        # agreement existed: its own hyperparameters are the agreed ones
        hp = state.get("hyperparameters") or {}
        self.hp_agreed = hp.get("agreed") or self.hp.snapshot()
        self.hp_trace = list(hp.get("trace", []))
        c = state["cursor"]
        self.epoch, self.step = int(c["epoch"]), int(c["step"])
        self.global_step, self.ckpt_seen = int(c["global_step"]), int(c["ckpt_seen"])
        torch.set_rng_state(state["rng"].cpu())
        cuda_rng = state.get("cuda_rng")
        if cuda_rng is not None and self.device.type == "cuda":
            torch.cuda.set_rng_state(cuda_rng.cpu(), self.device)


@dataclass(frozen=True)
class _Ref:
    """Placeholder for the ``index``-th tensor in a flattened structure."""

    index: int


def flatten(obj: Any) -> tuple[Any, list[torch.Tensor]]:
    """Split ``obj`` into a picklable skeleton and the list of its tensors."""
    tensors: list[torch.Tensor] = []

    def walk(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            tensors.append(x.detach())
            return _Ref(len(tensors) - 1)
        if isinstance(x, dict):
            return {k: walk(v) for k, v in x.items()}
        if isinstance(x, list):
            return [walk(v) for v in x]
        if isinstance(x, tuple):
            return tuple(walk(v) for v in x)
        return x

    return walk(obj), tensors


def unflatten(skeleton: Any, tensors: list[torch.Tensor]) -> Any:
    """Inverse of :func:`flatten`."""
    if isinstance(skeleton, _Ref):
        return tensors[skeleton.index]
    if isinstance(skeleton, dict):
        return {k: unflatten(v, tensors) for k, v in skeleton.items()}
    if isinstance(skeleton, list):
        return [unflatten(v, tensors) for v in skeleton]
    if isinstance(skeleton, tuple):
        return tuple(unflatten(v, tensors) for v in skeleton)
    return skeleton


def _on_device(t: torch.Tensor) -> bool:
    return t.device.type != "cpu"


def _as_bytes(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().reshape(-1).view(torch.uint8)


def send_state(
    state: Any,
    dst: int,
    *,
    on_device: bool = False,
    settle: Callable[[], None] | None = None,
) -> int:
    """Send ``state`` to rank ``dst`` of the current group; returns the bytes sent.

    With ``on_device``, tensors not on the CPU are sent as they are (over the group's device
    backend, batched) and ``settle`` is called once they are under way; the rest go from host
    memory, each as it comes.
    """
    skeleton, tensors = flatten(state)
    device_side = [on_device and _on_device(t) for t in tensors]
    meta = [(tuple(t.shape), t.dtype, d) for t, d in zip(tensors, device_side, strict=True)]
    blob = pickle.dumps((skeleton, meta))
    dist.send(torch.tensor([len(blob)], dtype=torch.int64), dst)
    dist.send(torch.frombuffer(bytearray(blob), dtype=torch.uint8), dst)
    sent = len(blob)
    ops = []
    for t, d in zip(tensors, device_side, strict=True):
        if t.numel():
            data = _as_bytes(t if d else t.cpu())
            if d:
                ops.append(dist.P2POp(dist.isend, data, dst))
            else:
                dist.send(data, dst)
            sent += data.numel()
    _run_batch(ops, settle)
    return sent


def recv_state(
    src: int,
    *,
    device: torch.device | str | None = None,
    settle: Callable[[], None] | None = None,
) -> Any:
    """Receive a state sent by :func:`send_state` from rank ``src``; tensors the sender sent
    from its device land on ``device``."""
    size = torch.zeros(1, dtype=torch.int64)
    dist.recv(size, src)
    blob = torch.empty(int(size.item()), dtype=torch.uint8)
    dist.recv(blob, src)
    skeleton, meta = pickle.loads(blob.numpy().tobytes())
    tensors, ops = [], []
    for shape, dtype, d in meta:
        t = torch.empty(shape, dtype=dtype, device=device if d else "cpu")
        if t.numel():
            if d:
                ops.append(dist.P2POp(dist.irecv, _as_bytes(t), src))
            else:
                dist.recv(_as_bytes(t), src)
        tensors.append(t)
    _run_batch(ops, settle)
    return unflatten(skeleton, tensors)


def _run_batch(ops: list[Any], settle: Callable[[], None] | None) -> None:
    if not ops:
        return
    for work in dist.batch_isend_irecv(ops):
        work.wait()  # orders the current stream after the transfer
    if settle is not None:
        settle()


def to_cpu(obj: Any) -> Any:
    """``obj`` with every tensor copied to host memory (the same object when all already are).

    Keeps dict types and a state dict's ``_metadata``, so ``load_state_dict`` reads it as usual.
    """
    _, tensors = flatten(obj)
    if all(t.device.type == "cpu" for t in tensors):
        return obj

    def walk(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return x.detach().cpu()
        if isinstance(x, dict):
            out = copy.copy(x)  # same type and attributes (a state dict's _metadata)
            for k, v in x.items():
                out[k] = walk(v)
            return out
        if isinstance(x, list):
            return [walk(v) for v in x]
        if isinstance(x, tuple):
            return tuple(walk(v) for v in x)
        return x

    return walk(obj)


def atomic_save(obj: Any, path: str | os.PathLike[str]) -> Path:
    """``torch.save`` to a temporary file beside ``path``, fsync, then rename over ``path``.

    A reader sees either the previous file or the complete new one, never a torn write.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def save_checkpoint(
    state: dict[str, Any], directory: str | os.PathLike[str], keep: int = 3
) -> Path:
    """Write ``state`` as ``ckpt-<global step>.pt`` atomically; keep the newest ``keep``."""
    step = int(state["cursor"]["global_step"])
    path = atomic_save(state, Path(directory) / checkpoint_name(step))
    for p in checkpoints(directory)[:-keep]:
        p.unlink(missing_ok=True)
    return path


def latest_checkpoint(directory: str | os.PathLike[str]) -> Path | None:
    """The checkpoint with the highest global step in ``directory``, if any."""
    found = checkpoints(directory)
    return found[-1] if found else None
