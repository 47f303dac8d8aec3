"""Notebooks run end to end with nbclient against a live server: examples/elastic_digits.ipynb,
and a WMLA FabricModel notebook whose ``train()`` submits the kernel's own cells.

The server (pytest-jupyter, 2 virtual GPUs) runs in this process on the test's event loop, so
the notebook is executed with nbclient's async API on that loop; its kernel is a separate
process that finds the server through EDT_URL and EDT_TOKEN (the zero-configuration path a CI
job or a remote user takes).
"""

from __future__ import annotations

import io
import json
import re
import shutil
import zipfile
from pathlib import Path

import nbformat
import pytest
import torch
from multiuser import as_user
from nbclient import NotebookClient

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "elastic_digits.ipynb"


pytestmark = pytest.mark.multi_user


@pytest.fixture
def edt_config():
    return {"devices": "virtual", "virtual_gpus": 2}


def outputs_text(cell) -> str:
    parts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            parts.append(output["text"])
        elif "data" in output:
            parts.append(output["data"].get("text/plain", ""))
        elif output.get("output_type") == "error":
            parts.append(f"{output['ename']}: {output['evalue']}")
    return "".join(parts)


async def execute(nb, workdir: Path, port: int, base_url: str, monkeypatch) -> None:
    """Run `nb` in a fresh kernel in `workdir`, as alice of the live server."""
    monkeypatch.setenv("EDT_URL", f"http://127.0.0.1:{port}{base_url}")
    monkeypatch.setenv("EDT_TOKEN", "alice")
    client = NotebookClient(
        nb,
        timeout=180,
        kernel_name="python3",
        resources={"metadata": {"path": str(workdir)}},
    )
    await client.async_execute()


@pytest.mark.timeout(240)
async def test_the_example_notebook_runs_end_to_end(
    http_server, jp_http_port, jp_base_url, tmp_path, monkeypatch
):
    workdir = tmp_path / "work"
    workdir.mkdir()
    notebook = shutil.copy(EXAMPLE, workdir / EXAMPLE.name)
    nb = nbformat.read(notebook, as_version=4)
    await execute(nb, workdir, jp_http_port, jp_base_url, monkeypatch)

    code = [c for c in nb.cells if c.cell_type == "code"]
    by_source = {c.source.splitlines()[0]: c for c in code}
    for cell in code:  # only the tagged cell may fail
        errors = [o for o in cell.outputs if o.get("output_type") == "error"]
        if "raises-exception" not in cell.metadata.get("tags", []):
            assert not errors, (cell.source, outputs_text(cell))

    assert (workdir / "digits_data.py").exists()
    plain = outputs_text(code[1])
    assert "after one epoch: test accuracy" in plain

    # the in-process debug run drew a LossChart widget
    chart_cell = code[2]
    widget_outputs = [
        o
        for o in chart_cell.outputs
        if "application/vnd.jupyter.widget-view+json" in o.get("data", {})
    ]
    assert widget_outputs and "LossChart" in widget_outputs[0]["data"]["text/plain"]
    assert "epoch 0: val_loss" in outputs_text(code[3])

    # the submission's result is the job widget, with the job's summary as its fallbacks
    submitted = by_source[
        "%%edt_submit --name digits --max-gpus 2 --epochs 3 --files digits_data.py --wait"
    ]
    result = [o for o in submitted.outputs if o.get("output_type") == "execute_result"]
    assert result, outputs_text(submitted)
    data = result[0]["data"]
    assert "application/vnd.jupyter.widget-view+json" in data
    assert "'digits': state=SUCCEEDED" in data["text/plain"]

    monitored = outputs_text(code[6])
    assert monitored.startswith("SUCCEEDED on 2 GPUs at most")
    assert [line.split(":")[0] for line in monitored.splitlines()[1:]] == [
        "epoch 0",
        "epoch 1",
        "epoch 2",
    ]
    assert "digits" in outputs_text(code[8])  # %edt_jobs
    used = outputs_text(code[9])
    accuracy = float(used.split("test accuracy of the job's model: ")[1].split()[0])
    assert accuracy > 0.5, used

    # the failing job: JobFailed, whose message is the job's reason (the exception, the line of
    # the cell it came from, the workers), shown with the folded traceback; then its widget
    broken = by_source[
        "%%edt_submit --name digits-broken --max-gpus 2 --files digits_data.py --wait"
    ]
    (error,) = [o for o in broken.outputs if o.get("output_type") == "error"]
    assert error["ename"] == "JobFailed"
    assert re.fullmatch(
        r"RuntimeError: mat1 and mat2 shapes cannot be multiplied \(\d+x64 and 32x10\) "
        r"\(main\.py:\d+ in <module>; workers w0, w1(, w\d+)*\)",
        error["evalue"],
    ), error["evalue"]
    report = "\n".join(error["traceback"])
    assert report.startswith("Job ") and f"(digits-broken) FAILED: {error['evalue']}" in report
    assert (
        "frames in jupyter_edt, torch …" in report and report.count("Traceback (most recent") == 1
    )
    last = outputs_text(code[-1])
    assert last.startswith(f"digits-broken FAILED - {error['evalue']}\n")  # the same sentence
    assert "<Job " in last


FABRIC_CELLS = [
    "import torch\n"
    "from torch import nn\n"
    "from torch.utils.data import TensorDataset\n"
    "from jupyter_edt.compat.fabric_model import FabricModel",
    "%%capture\n"  # a cell magic: kept out of the job's program
    "print('not in the job')",
    "def getDatasets():\n"
    "    g = torch.Generator().manual_seed(0)\n"
    "    x = torch.randn(32, 4, generator=g)\n"
    "    y = (x.sum(1) > 0).long()\n"
    "    return TensorDataset(x, y), TensorDataset(x[:8], y[:8])",
    "%env EDT_NOTEBOOK_MARK=1\n"  # a line magic and a shell escape: dropped too
    "!echo not in the job\n"
    "model = nn.Linear(4, 2)\n"
    "fm = FabricModel(model, getDatasets, nn.functional.cross_entropy,\n"
    "                 torch.optim.SGD(model.parameters(), lr=0.1))",
    "fm.train(1, 8, 2)",
    "path = fm.download('results')\nprint(path)",
]


@pytest.mark.timeout(240)
async def test_fabric_model_train_in_a_notebook_submits_its_cells(
    http_server, jp_http_port, jp_base_url, tmp_path, monkeypatch, jp_fetch
):
    """The path a WMLA user takes: ``train()`` reads the cells from the kernel's history."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in FABRIC_CELLS])
    await execute(nb, workdir, jp_http_port, jp_base_url, monkeypatch)

    for cell in nb.cells:
        assert not [o for o in cell.outputs if o.get("output_type") == "error"], outputs_text(cell)
    train_cell = nb.cells[4]
    printed = "".join(o["text"] for o in train_cell.outputs if o["output_type"] == "stream")
    assert printed.startswith("Job ") and printed.endswith(" finishes with state FINISHED.\n")
    job_id = printed.split()[1]
    assert printed == f"Job {job_id} finishes with state FINISHED.\n", outputs_text(train_cell)
    # the live progress line: one display, redrawn in place, ending on the final state
    drawn = [o for o in train_cell.outputs if o["output_type"] == "display_data"]
    assert len(drawn) == 1, train_cell.outputs
    assert f"[{job_id}] SUCCEEDED" in drawn[0]["data"]["text/plain"]

    response = await jp_fetch("edt", "api", "v1", "jobs", job_id, headers=as_user("alice"))
    job = json.loads(response.body)
    assert job["state"] == "SUCCEEDED" and job["user"] == "alice"
    program = job["spec"]["code"]
    assert "fm.train(1, 8, 2)" in program and "download" not in program
    assert "not in the job" not in program and "EDT_NOTEBOOK_MARK" not in program

    saved = workdir / "results" / f"{job_id}.zip"
    assert outputs_text(nb.cells[5]).strip() == str(Path("results") / f"{job_id}.zip")
    with zipfile.ZipFile(saved) as archive:
        assert "model/model_epoch_final.pth" in archive.namelist(), archive.namelist()
        with archive.open("model/model_epoch_final.pth") as f:
            state = torch.load(io.BytesIO(f.read()), map_location="cpu")
    assert state["weight"].shape == (2, 4)  # the notebook's model, trained in the job
