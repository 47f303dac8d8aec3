"""The notebook widgets' Python side: JobWidget's synced identity and fallbacks, the magic's
choice of widget or handle, and LossChart's batching, binary buffers, capping and replay.

The lab extension side is tested by jest (src/__tests__/) and Galata (ui-tests/).
"""

from __future__ import annotations

import json
import sys
import time
from array import array
from pathlib import Path

import pytest
from waiting import eventually_sync

import jupyter_edt
from jupyter_edt.notebook import Job, JobWidget, LossChart
from jupyter_edt.notebook.magics import EDTMagics
from jupyter_edt.notebook.widgets import (
    MODULE_NAME,
    MODULE_VERSION,
    WIDGET_MIME,
    thin_older_half,
    widgets_available,
)

ROOT = Path(__file__).resolve().parents[2]

JOB_DATA = {
    "id": "a1b2c3d4e5f6",
    "user": "alice",
    "name": "digits",
    "state": "RUNNING",
    "reason": "started",
    "spec": {},
    "min_gpus": 1,
    "max_gpus": 2,
    "priority": 0,
    "devices": ["gpu0"],
    "rescaled": None,
    "created": 1.0,
    "updated": 1.0,
    "finished": None,
}


class Sent:
    """Records what a LossChart sends to its views."""

    def __init__(self, chart: LossChart) -> None:
        self.messages: list[tuple[dict, list[bytes]]] = []
        chart.send = self.send  # type: ignore[method-assign]

    def send(self, content, buffers=None) -> None:
        self.messages.append((content, [bytes(b) for b in buffers or []]))

    def decoded(self, index: int = -1) -> dict[str, tuple[list[float], list[float]]]:
        content, buffers = self.messages[index]
        out = {}
        for i, name in enumerate(content["names"]):
            xs, ys = array("d"), array("d")
            xs.frombytes(buffers[2 * i])
            ys.frombytes(buffers[2 * i + 1])
            assert len(xs) == len(ys) == content["counts"][i]
            out[name] = (list(xs), list(ys))
        return out


# -- module identity --------------------------------------------------------------------------


def test_the_widgets_ask_for_the_lab_extensions_module():
    package = json.loads((ROOT / "package.json").read_text())
    assert MODULE_NAME == package["name"] == "jupyter-edt"
    assert MODULE_VERSION == f"^{package['version']}" == f"^{jupyter_edt.__version__}"
    chart = LossChart()
    state = chart.get_state()
    assert (state["_model_name"], state["_view_name"]) == ("LossChartModel", "LossChartView")
    assert state["_model_module"] == state["_view_module"] == "jupyter-edt"
    assert state["_model_module_version"] == MODULE_VERSION


# -- JobWidget ----------------------------------------------------------------------------------


def test_job_widget_syncs_only_the_jobs_identity():
    widget = JobWidget.for_job(Job(None, JOB_DATA))  # type: ignore[arg-type]
    state = widget.get_state()
    assert state["job_id"] == "a1b2c3d4e5f6"
    assert (state["_model_name"], state["_view_name"]) == ("JobModel", "JobView")
    synced = set(widget.keys) - set(JobWidget.__base__().keys)  # type: ignore[misc]
    assert synced == {"job_id", "log_tail"}  # no data: the browser fetches it

    bundle = widget._repr_mimebundle_()
    assert bundle[WIDGET_MIME]["model_id"] == widget.model_id
    assert bundle["text/plain"] == repr(widget.job)
    assert bundle["text/plain"].startswith("<Job a1b2c3d4e5f6 'digits': state=RUNNING")
    assert "digits [a1b2c3d4e5f6]" in bundle["text/html"]
    assert widget.job.id == "a1b2c3d4e5f6"

    bare = JobWidget(job_id="0123456789ab")
    assert repr(bare) == "JobWidget(job_id='0123456789ab')"
    assert "text/html" not in bare._repr_mimebundle_()


def test_the_magic_shows_a_widget_in_a_kernel_and_the_handle_elsewhere(shell, monkeypatch):
    magics = EDTMagics(shell)
    job = Job(None, JOB_DATA)  # type: ignore[arg-type]
    # a terminal IPython: no kernel, the plain handle
    assert not widgets_available(shell)
    assert magics.view(job) is job
    # a kernel's shell (ipykernel's shell has a `kernel`)
    monkeypatch.setattr(shell, "kernel", object(), raising=False)
    assert widgets_available(shell)
    widget = magics.view(job)
    assert isinstance(widget, JobWidget) and widget.job is job and widget.job_id == job.id
    # without ipywidgets, the handle again
    monkeypatch.setitem(sys.modules, "jupyter_edt.notebook.widgets", None)
    assert magics.view(job) is job


# -- LossChart ------------------------------------------------------------------------------------


def test_thinning_matches_the_front_end():
    # the same pushes as src/__tests__/charts.spec.ts ("caps a series deterministically")
    chart = LossChart(max_points=10, flush_interval=3600)
    Sent(chart)
    for x in range(25):
        chart.append(x, loss=-x)
    xs, ys = chart.data()["loss"]
    assert xs == [0, 16, 18, 19, 20, 21, 22, 23, 24]
    assert ys == [-x for x in xs]

    xs, ys = array("d", range(10)), array("d", range(10))
    thin_older_half(xs, ys)
    assert list(xs) == [0, 2, 4, 5, 6, 7, 8, 9]


def test_appends_are_batched_into_float64_buffers():
    chart = LossChart(flush_interval=3600)
    sent = Sent(chart)
    chart.append(0, loss=1.0)  # the first goes at once
    assert len(sent.messages) == 1
    assert sent.messages[0][0] == {
        "type": "data",
        "reset": False,
        "names": ["loss"],
        "counts": [1],
    }
    for step in range(1, 1001):
        chart.append(step, loss=1 / step, val_loss=0.5 if step % 100 == 0 else None)
    assert len(sent.messages) == 1  # buffered: the interval has not passed
    chart.flush()
    assert len(sent.messages) == 2
    data = sent.decoded()
    assert data["loss"][0] == [float(s) for s in range(1, 1001)]
    assert data["loss"][1][:2] == [1.0, 0.5]
    assert data["val_loss"] == ([float(s) for s in range(100, 1001, 100)], [0.5] * 10)
    chart.flush()
    assert len(sent.messages) == 2  # nothing new, nothing sent


@pytest.mark.parametrize("uptime", [0.0, 12.5, 821.0])
def test_the_first_point_goes_at_once_on_a_machine_booted_moments_ago(uptime):
    """A monotonic clock counts from boot: right after boot it is below the flush interval,
    which must not hold the first point back (it did with "last sent" starting at 0.0)."""
    now = [uptime]
    chart = LossChart(flush_interval=3600, clock=lambda: now[0])
    sent = Sent(chart)
    chart.append(0, loss=1.0)
    assert len(sent.messages) == 1
    chart.append(1, loss=0.5)
    assert len(sent.messages) == 1  # the interval has not passed since the first
    now[0] += 3600
    chart.append(2, loss=0.25)
    assert len(sent.messages) == 2
    assert sent.decoded(1)["loss"][0] == [1.0, 2.0]


def test_the_last_points_are_sent_when_the_loop_pauses():
    chart = LossChart(flush_interval=0.05)
    sent = Sent(chart)
    start = time.monotonic()
    for step in range(200):
        chart.append(step, loss=float(step))
    # one message at once, the rest from the timer: far fewer than one per point
    eventually_sync(
        lambda: sum(m[0]["counts"][0] for m in sent.messages) == 200,
        "sent all 200 points",
        timeout=5.0,
        interval=0.005,
    )
    elapsed = time.monotonic() - start
    assert len(sent.messages) <= 2 + elapsed / 0.05
    steps = [x for i in range(len(sent.messages)) for x in sent.decoded(i)["loss"][0]]
    assert steps == [float(s) for s in range(200)]


def test_a_new_view_gets_everything_again_and_clear_resets():
    chart = LossChart(flush_interval=3600, max_points=100)
    sent = Sent(chart)
    for step in range(300):
        chart.append(step, loss=step * 2.0)
    chart.append(299, val_loss=1.5)
    # a page reload: the restored model asks for the data
    chart._handle_custom_msg({"type": "request_data"}, [])
    content, _ = sent.messages[-1]
    assert content["reset"] is True and content["names"] == ["loss", "val_loss"]
    data = sent.decoded()
    assert data == chart.data()
    assert len(data["loss"][0]) <= 100 and data["loss"][0][-1] == 299.0
    assert data["val_loss"] == ([299.0], [1.5])
    before = len(sent.messages)
    chart.flush()
    assert len(sent.messages) == before  # the reset carried the pending points

    chart.clear()
    assert sent.messages[-1][0] == {"type": "data", "reset": True, "names": [], "counts": []}
    assert chart.data() == {}


def test_extend_and_bad_settings():
    chart = LossChart(flush_interval=3600)
    Sent(chart)
    chart.extend(range(3), loss=[3.0, 2.0, 1.0], acc=[0.1, 0.2])
    assert chart.data() == {
        "loss": ([0.0, 1.0, 2.0], [3.0, 2.0, 1.0]),
        "acc": ([0.0, 1.0], [0.1, 0.2]),
    }
    with pytest.raises(ValueError, match="max_points"):
        LossChart(max_points=2)
