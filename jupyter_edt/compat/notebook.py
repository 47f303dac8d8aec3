"""``FabricModel.train()`` in a notebook: submit the notebook's code as a job and follow it.

As in WMLA, training a FabricModel from a notebook runs it on the cluster, not in the kernel.
The job's program is the notebook's code cells run so far, in order (the current one, which
calls ``train()``, last), without IPython magics and shell escapes; in the job the same
``train()`` call finds itself in a worker and trains there. ``train()`` blocks with a live
progress line and ends with ``Job <id> finishes with state FINISHED.`` (WMLA's state names).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from .wmla import exec_state

if TYPE_CHECKING:
    from ..notebook.client import EDTClient, Job
    from .fabric_model import FabricModel

__all__ = ["download_zip", "notebook_program", "submit_and_wait"]


def notebook_program(cells: list[str]) -> str:
    """The Python of the cells, without cell magics, line magics and shell escapes."""
    kept = []
    for cell in cells:
        if cell.lstrip().startswith("%%"):
            continue
        lines = [ln for ln in cell.splitlines() if not ln.lstrip().startswith(("%", "!"))]
        kept.append("\n".join(lines))
    return "\n\n".join(kept) + "\n"


def _kernel_cells() -> list[str]:
    from IPython import get_ipython

    shell = get_ipython()
    # the cells as typed: ``In`` holds IPython's translation, where a magic is a call of
    # get_ipython(), which a job's plain Python does not have
    cells = list(shell.history_manager.input_hist_raw)[1:] if shell is not None else []
    if not cells:
        raise ValueError("FabricModel.train() found no notebook cells to submit")
    return cells


def submit_and_wait(
    fm: FabricModel,
    epochs: int,
    batch_size: int,
    engines_number: int,
    *,
    client: EDTClient | None = None,
    cells: list[str] | None = None,
    stream: TextIO | None = None,
    timeout: float | None = None,
) -> Job:
    """Submit the notebook's code as a job on at most `engines_number` GPUs; block until it
    ends, showing its progress; returns the job."""
    from ..notebook.client import EDTClient, failure_report

    client = client or EDTClient()
    code = notebook_program(cells if cells is not None else _kernel_cells())
    job = client.submit(
        code=code, name=f"{type(fm.model).__name__}-fabric", max_gpus=engines_number
    )
    job.wait(timeout=timeout, progress=True, stream=stream)
    state = exec_state(job.data["state"], job.data.get("reason") or "")
    print(f"Job {job.id} finishes with state {state}.", file=stream)
    if state in ("FAILED", "ERROR"):  # say why, as the magics do, so the cell is enough
        print(failure_report(job), file=stream)
    return job


def download_zip(job: Any, out_dir: Path) -> Path:
    """Save the job's result directory as ``out_dir/<job id>.zip``."""
    from ..notebook.client import _job_path
    from ..notebook.transfer import copy_response

    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{job.id}.zip"
    path = _job_path(job.id, "result.zip")
    with job.client._open("GET", path, job_id=job.id) as response, open(target, "wb") as f:
        copy_response(response, f)
    return target
