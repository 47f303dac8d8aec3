"""What a job's workers left behind, for tests of the runtime: each worker's step events and the
model the job saved."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch


def worker_steps(events: list[dict[str, Any]], worker: str) -> list[dict[str, Any]]:
    """`worker`'s step events, in order."""
    return [e for e in events if e["worker"] == worker and e["type"] == "step"]


def final_model(result_dir: Path) -> dict[str, torch.Tensor]:
    """The model the job saved at its end (rank 0's)."""
    return torch.load(result_dir / "model" / "model_epoch_final.pth")
