"""The speed model of the scheduler simulator, read from the Pollux (OSDI'21) measurements.

The data (``../shared/data/pollux``, see its README) are measured step times of six
applications at many placements and per-GPU batch sizes, and per-epoch gradient statistics at
several global batch sizes. This module turns them into what the simulator needs, following the
rules the published simulations used, so that a baseline run here reproduces the published
figures and comparisons against them are fair:

- a job's per-GPU micro-batch and gradient-accumulation steps for its fixed global batch on
  ``r`` GPUs (:meth:`Application.batch_config`);
- the time of one optimizer step on a placement (:meth:`Application.step_time`): interpolated
  in the micro-batch size where the placement was measured, else piecewise-linear over
  (nodes, replicas, micro-batch) on a Delaunay triangulation of all measurements;
- the statistical progress one step makes in an epoch (:meth:`Application.gain`), and the
  progress at which each epoch ends (:meth:`Application.progress`).

Progress is counted in steps at the application's smallest validated batch ``B0``: one step at
``B0`` adds 1, a step at a larger batch adds less than ``B / B0``. That is why a job that keeps a
large batch needs more steps per epoch than ``dataset / B``.
"""

from __future__ import annotations

import csv
import math
import os
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

#: Epochs each application trains for, as in the published runs.
EPOCHS = {"bert": 2, "cifar10": 100, "ncf": 10, "imagenet": 90, "deepspeech2": 80, "yolov3": 50}
#: The largest micro-batch one GPU takes (yolov3's rows measured at 16 exceed its memory).
MAX_LOCAL_BATCH = {
    "bert": 12,
    "cifar10": 1024,
    "deepspeech2": 80,
    "imagenet": 200,
    "ncf": 32768,
    "yolov3": 8,
}


def default_data_dir() -> Path:
    """``$EDT_POLLUX_DATA``, else ``shared/data/pollux`` beside the repository checkout."""
    env = os.environ.get("EDT_POLLUX_DATA")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3] / "shared" / "data" / "pollux"


def canonical_placement(placement: Sequence[int]) -> tuple[int, ...]:
    """Per-node counts rotated to the smallest sequence: how placements.csv names them."""
    p = tuple(n for n in placement if n)
    if not p:
        return p
    return min(p[i:] + p[:i] for i in range(len(p)))


@dataclass(eq=False)  # identity: one object per application, cached by the simulator
class Application:
    """One application's measured curves and the rules that turn them into speeds."""

    name: str
    epochs: int
    max_local: int
    min_local: int
    b0: int
    bmax: int
    #: P_e for e = 0..epochs: the progress at which epoch e ends (P_0 = 0).
    boundaries: list[float]
    #: validated batch size -> per-epoch (grad_sqr, grad_var) rows
    grad_stats: dict[int, list[tuple[float, float]]]
    #: canonical placement -> (local_bsz, step_time, sync_time) sorted by local_bsz
    placements: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray, np.ndarray]]
    #: Delaunay points and values for placements that were not measured
    points: np.ndarray
    values: np.ndarray
    _interp: object | None = field(default=None, repr=False)
    _cache: dict = field(default_factory=dict, repr=False)

    # ---- progress and statistical efficiency -------------------------------------------------
    def progress(self, epoch: int) -> float:
        """Progress at which (1-based) ``epoch`` ends; ``progress(0) == 0``."""
        return self.boundaries[epoch]

    def grad(self, batch: float, epoch0: int) -> tuple[float, float]:
        """(grad_sqr, grad_var) during 0-based ``epoch0`` at global ``batch``, interpolated
        linearly between the two nearest validated batch sizes."""
        sizes = sorted(self.grad_stats)
        batch = min(max(batch, sizes[0]), sizes[-1])
        i = bisect_left(sizes, batch)
        if sizes[i] == batch:
            return self.grad_stats[sizes[i]][epoch0]
        lo, hi = sizes[i - 1], sizes[i]
        (s0, v0), (s1, v1) = self.grad_stats[lo][epoch0], self.grad_stats[hi][epoch0]
        w = (batch - lo) / (hi - lo)
        return s0 + w * (s1 - s0), v0 + w * (v1 - v0)

    def gain(self, batch: float, epoch0: int) -> float:
        """Progress one optimizer step at ``batch`` makes during 0-based ``epoch0`` (1 at B0)."""
        sqr, var = self.grad(batch, epoch0)
        return (var + sqr) / (var * self.b0 / batch + sqr)

    # ---- batch configuration -----------------------------------------------------------------
    def batch_config(self, batch: int, replicas: int) -> tuple[int, int]:
        """(micro-batch m, extra accumulation steps k) for global ``batch`` on ``replicas``."""
        local = -(-batch // replicas)
        k = -(-local // self.max_local) - 1
        if replicas == 1 and batch > self.b0:
            k = max(1, k)
        m = -(-local // (k + 1))
        m = min(m, self.bmax // (replicas * (k + 1)))
        return m, k

    def max_replicas(self, batch: int) -> int:
        """Most GPUs a job with a fixed ``batch`` can use: each must get the smallest measured
        micro-batch (fewer samples than that per GPU were never measured)."""
        r = 1
        while self.batch_config(batch, r + 1)[0] >= self.min_local:
            r += 1
        return r

    # ---- step time ---------------------------------------------------------------------------
    def step_time(self, placement: Sequence[int], micro: float) -> tuple[float, float]:
        """(step_time, sync_time) of one micro-step at per-node counts ``placement``."""
        key = (canonical_placement(placement), micro)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        p = key[0]
        measured = self.placements.get(p)
        if measured is not None and measured[0][0] <= micro <= measured[0][-1]:
            xs, st, sy = measured
            out = (float(np.interp(micro, xs, st)), float(np.interp(micro, xs, sy)))
        else:
            out = self._delaunay(min(len(p), 16), sum(p), micro)
        self._cache[key] = out
        return out

    def _delaunay(self, nodes: int, replicas: int, micro: float) -> tuple[float, float]:
        if self._interp is None:
            from scipy.interpolate import LinearNDInterpolator

            self._interp = LinearNDInterpolator(self.points, self.values)
        st, sy = self._interp([nodes, replicas, micro])[0]  # type: ignore[operator]
        if not (math.isfinite(st) and math.isfinite(sy)):
            raise ValueError(
                f"{self.name}: no step time for {nodes} nodes, {replicas} GPUs, micro-batch "
                f"{micro} (outside the measurements)."
            )
        return float(st), float(sy)

    def iteration_time(self, placement: Sequence[int], batch: int) -> tuple[float, int]:
        """(seconds per optimizer step, actual global batch) for a job of global ``batch``."""
        replicas = sum(placement)
        m, k = self.batch_config(batch, replicas)
        st, sy = self.step_time(placement, m)
        return st + k * (st - sy), replicas * m * (k + 1)


def _read(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _load(directory: Path) -> Application:
    name = directory.name
    epochs = EPOCHS[name]
    validation: dict[int, list[dict[str, str]]] = {}
    for path in directory.glob("validation-*.csv"):
        validation[int(path.stem.split("-")[-1])] = _read(path)
    boundaries = [0.0] + [
        min(float(rows[e]["progress"]) for rows in validation.values()) for e in range(epochs)
    ]
    grads = {
        b: [(float(r["grad_sqr"]), float(r["grad_var"])) for r in rows]
        for b, rows in validation.items()
    }
    by_placement: dict[tuple[int, ...], list[tuple[float, float, float]]] = defaultdict(list)
    by_triple: dict[tuple[int, int, float], list[tuple[float, float]]] = defaultdict(list)
    rows = _read(directory / "placements.csv")
    for r in rows:
        counts = tuple(int(c) for c in r["placement"])
        local, st, sy = float(r["local_bsz"]), float(r["step_time"]), float(r["sync_time"])
        by_placement[canonical_placement(counts)].append((local, st, sy))
        by_triple[(len(counts), sum(counts), local)].append((st, sy))
    placements = {}
    for p, items in by_placement.items():
        items.sort()
        arr = np.array(items)
        placements[p] = (arr[:, 0], arr[:, 1], arr[:, 2])
    # Point order matters where the grid is degenerate (Qhull then picks one of several valid
    # triangulations): sorted triples, then scalability.csv in file order, as published.
    points = [list(t) for t in sorted(by_triple)]
    values = [list(np.mean(by_triple[t], axis=0)) for t in sorted(by_triple)]
    for r in _read(directory / "scalability.csv"):
        points.append([float(r["num_nodes"]), float(r["num_replicas"]), float(r["local_bsz"])])
        values.append([float(r["step_time"]), float(r["sync_time"])])
    return Application(
        name=name,
        epochs=epochs,
        max_local=MAX_LOCAL_BATCH[name],
        min_local=int(min(float(r["local_bsz"]) for r in rows)),
        b0=min(validation),
        bmax=max(validation),
        boundaries=boundaries,
        grad_stats=grads,
        placements=placements,
        points=np.array(points, dtype=float),
        values=np.array(values, dtype=float),
    )


@lru_cache(maxsize=4)
def load_applications(data_dir: str | None = None) -> dict[str, Application]:
    """Every application under ``data_dir/traces`` (cached: the simulator asks per workload)."""
    root = Path(data_dir) if data_dir else default_data_dir()
    traces = root / "traces"
    if not traces.is_dir():
        raise FileNotFoundError(
            f"No Pollux traces at {traces}; set EDT_POLLUX_DATA or pass --data."
        )
    return {d.name: _load(d) for d in sorted(traces.iterdir()) if d.is_dir() and d.name in EPOCHS}
