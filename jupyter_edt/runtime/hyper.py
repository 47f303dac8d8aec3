"""One source of truth for the optimizer's hyperparameters across a job's workers.

Why: user code changes ``optimizer.param_groups`` (a scheduler, a callback) on whichever worker
it runs on, and WMLA's ``user_callback`` runs on rank 0 alone. Each worker applies its own
values in ``optimizer.step()``, so a change on some workers only would make the replicas drift
apart silently and the result depend on the GPU count.

The rule, per value (one key of one param group):

- The workers keep the last agreed values (``agreed``); it is the same on every worker, and a
  joiner receives it with the training state, with the sender's trace (below).
- Before each optimizer step, every worker puts a fingerprint of its current values into the
  step's reduction (the maximum of ``fp`` and of ``-fp``: one extra pair of numbers). When the
  fingerprints are equal, the current values become the agreed ones and nothing else is sent:
  the common case, also when a scheduler steps on every worker.
- When they differ, the workers exchange their traces (:func:`agree`): the values after each
  piece of user code that ran since the agreement (the scheduler's step, each callback), the
  current ones last. Per value, each worker's successive distinct values must be a beginning of
  the longest such sequence, whose last value every worker takes; otherwise every worker raises
  :class:`HyperparameterConflict`, naming the value and the ranks: loud, never a silent drift.

  So a worker that changed a value wins over those that did not, and a scheduler that steps on
  every worker followed by a change on rank 0 alone (WMLA's ``user_callback``) ends with rank 0's
  value, as in one process. Why traces rather than the last values alone: there every worker
  would have changed ``lr`` (0.9 x on all, then 0.45 x on rank 0), which looks like a conflict.
  What stays a conflict: changes on different workers that do not extend each other, such as
  rank 0 and rank 1 each setting their own value, or a rank-0 change made before a change on
  every worker that reads it (only rank 0 then knows the outcome of both). The trace's grain is
  one callback call: within one, only the values it leaves are seen.

What is agreed: every entry of a param group but ``params``, when it is a number, a boolean, a
string, None, a tuple or list of those (Adam's ``betas``), or a tensor. Tensors (``lr`` as a
tensor for fused or captured optimizers) are compared by value, which costs a device sync each
time the trainer looks (after each callback, and at each step) for a CUDA tensor, and written
back in place so the optimizer keeps its tensor. Any other
object is left alone: it cannot be compared between processes. Adding or removing a key counts
as a change to it; the number of param groups must be the same on every worker.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import torch

__all__ = [
    "HyperparameterConflict",
    "Snapshot",
    "Tracker",
    "agree",
    "apply",
    "fingerprint",
    "snapshot",
]

# per param group, its (key, value) pairs sorted by key; values as made by _plain
Snapshot = tuple[tuple[tuple[str, Any], ...], ...]

TENSOR = "__tensor__"  # tag of a tensor's value: (TENSOR, dtype, shape, values)
_ABSENT = object()
_SKIP = object()
_ATOMS = {float, int, bool, str, type(None)}


class HyperparameterConflict(RuntimeError):
    """Workers changed an optimizer hyperparameter to different values between two steps."""


def _plain(value: Any) -> Any:
    """``value`` made of plain, picklable Python values that compare by ``repr`` across
    processes; ``_SKIP`` for what cannot."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, torch.Tensor):
        flat = value.detach().reshape(-1).tolist()
        return (TENSOR, str(value.dtype).removeprefix("torch."), tuple(value.shape), tuple(flat))
    if isinstance(value, tuple | list):
        items = [_plain(v) for v in value]
        if any(v is _SKIP for v in items):
            return _SKIP
        return tuple(items) if isinstance(value, tuple) else items
    return _SKIP


def snapshot(optimizer: torch.optim.Optimizer) -> Snapshot:
    """The optimizer's agreeable hyperparameters, in a canonical order."""
    groups = []
    for group in optimizer.param_groups:
        pairs = []
        for key in sorted(group):
            value = group[key]
            if type(value) not in _ATOMS:
                if key == "params":
                    continue
                value = _plain(value)
                if value is _SKIP:
                    continue
            pairs.append((key, value))
        groups.append(tuple(pairs))
    return tuple(groups)


def _immutable(value: Any) -> bool:
    return type(value) in _ATOMS or (type(value) is tuple and all(_immutable(v) for v in value))


class Tracker:
    """An optimizer's snapshot and fingerprint, rebuilt only when a param group changed.

    Why: the trainer looks at the hyperparameters after each callback and at each step; with
    many param groups a full snapshot costs a millisecond, while comparing each group with a
    shallow copy is one C-level dict comparison. That comparison cannot see a value changed in
    place (a tensor's ``fill_``, a list's item), so a group holding a mutable value is always
    read again.
    """

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer = optimizer
        self._copies: list[dict[str, Any] | None] = []
        self._snap: Snapshot | None = None
        self._fp: int | None = None

    def _unchanged(self) -> bool:
        groups = self.optimizer.param_groups
        if self._snap is None or len(groups) != len(self._copies):
            return False
        try:
            for g, c in zip(groups, self._copies, strict=True):
                if c is None or g != c:
                    return False
        except RuntimeError:  # new parameter tensors compared element-wise
            return False
        return True

    def snapshot(self) -> Snapshot:
        if not self._unchanged():
            self._snap, self._fp = snapshot(self.optimizer), None
            self._copies = [
                dict(g) if all(_immutable(v) for k, v in g.items() if k != "params") else None
                for g in self.optimizer.param_groups
            ]
        assert self._snap is not None
        return self._snap

    def fingerprint(self) -> int:
        """The fingerprint of the last :meth:`snapshot`."""
        assert self._snap is not None
        if self._fp is None:
            self._fp = fingerprint(self._snap)
        return self._fp


def fingerprint(snap: Snapshot) -> int:
    """A 53-bit hash of ``snap`` (exact in a float64), the same in every process."""
    digest = hashlib.blake2b(repr(snap).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 11


def _show(value: Any) -> str:
    if value is _ABSENT:
        return "<absent>"
    if isinstance(value, tuple) and len(value) == 4 and value[0] == TENSOR:
        return f"tensor({list(value[3])}, dtype={value[1]})"
    return repr(value)


def _changes(agreed: Any, trace: Sequence[dict[str, Any]], key: str) -> list[Any]:
    """The successive distinct values of ``key`` along ``trace``, after ``agreed``."""
    seq, last = [], repr(agreed)
    for snap in trace:
        value = snap.get(key, _ABSENT)
        if repr(value) != last:
            seq.append(value)
            last = repr(value)
    return seq


def agree(agreed: Snapshot, traces: Sequence[Sequence[Snapshot]]) -> Snapshot:
    """The new agreed values from every rank's trace (``traces[rank]``: its snapshots after each
    piece of user code since ``agreed``, the current one last).

    Per value, each rank's successive distinct values must begin the longest rank's, whose last
    value wins. Raises HyperparameterConflict (the same on every rank: it depends on the
    arguments alone) when they do not, or when the ranks have different numbers of param
    groups.
    """
    views = [trace[-1] for trace in traces]
    sizes = [len(v) for v in views]
    if len(set(sizes)) > 1:
        per_rank = ", ".join(f"{n} on rank {r}" for r, n in enumerate(sizes))
        raise HyperparameterConflict(
            f"the optimizer has a different number of param groups on different workers "
            f"({per_rank}): add param groups on every worker, the same way"
        )
    old = [dict(g) for g in agreed]
    old += [{} for _ in range(len(old), sizes[0])]
    conflicts, result = [], []
    for i in range(sizes[0]):
        # per rank, group i of each snapshot of its trace (absent where it has fewer groups)
        seen = [[dict(s[i]) if i < len(s) else {} for s in trace] for trace in traces]
        keys = sorted(set(old[i]).union(*(g for trace in seen for g in trace)))
        group = {}
        for key in keys:
            before = old[i].get(key, _ABSENT)
            seqs = [_changes(before, trace, key) for trace in seen]
            longest = max(seqs, key=len)
            if any(repr(seq) != repr(longest[: len(seq)]) for seq in seqs):
                by_rank = ", ".join(
                    f"{' then '.join(_show(x) for x in seq)} on rank {r}"
                    for r, seq in enumerate(seqs)
                    if seq
                )
                conflicts.append(f"param_groups[{i}][{key!r}]: {by_rank} (was {_show(before)})")
                continue
            value = longest[-1] if longest else before
            if value is not _ABSENT:
                group[key] = value
        result.append(tuple(sorted(group.items())))
    if conflicts:
        raise HyperparameterConflict(
            "optimizer hyperparameters were changed differently on different workers since "
            "the last step: "
            + "; ".join(conflicts)
            + ". Change a hyperparameter on one worker only (e.g. when trainer.rank == 0), or "
            "the same way on every worker, or on rank 0 after the change made on every worker."
        )
    return tuple(result)


def _value(plain: Any, current: Any) -> Any:
    """The live value for ``plain``, written into ``current`` when that is a tensor of its
    shape and dtype (a fused or captured optimizer keeps its tensor)."""
    if isinstance(plain, tuple) and len(plain) == 4 and plain[0] == TENSOR:
        _, dtype, shape, values = plain
        data = torch.tensor(values, dtype=getattr(torch, dtype)).reshape(shape)
        if isinstance(current, torch.Tensor) and current.dtype == data.dtype:
            if current.shape == data.shape:
                with torch.no_grad():
                    current.copy_(data)
                return current
            return data.to(current.device)
        return data
    if isinstance(plain, tuple | list):
        olds = list(current) if isinstance(current, tuple | list) else []
        olds += [None] * (len(plain) - len(olds))
        items = [_value(p, o) for p, o in zip(plain, olds, strict=False)]
        return tuple(items) if isinstance(plain, tuple) else items
    return plain


def apply(optimizer: torch.optim.Optimizer, snap: Snapshot) -> list[str]:
    """Make the optimizer's hyperparameters those of ``snap``; returns what changed here."""
    changed = []
    for i, (group, pairs) in enumerate(zip(optimizer.param_groups, snap, strict=True)):
        want = dict(pairs)
        for key in [k for k in group if k != "params" and k not in want]:
            if _plain(group[key]) is not _SKIP:
                del group[key]
                changed.append(f"param_groups[{i}][{key!r}] removed")
        for key, value in want.items():
            if key not in group or repr(_plain(group[key])) != repr(value):
                group[key] = _value(value, group.get(key))
                changed.append(f"param_groups[{i}][{key!r}] = {_show(value)}")
    return changed
