"""Notebook widgets rendered by the jupyter-edt lab extension (ipywidgets 8).

:class:`JobWidget` is what ``%%edt_submit`` shows: the job's name and state, GPUs with an
allocation timeline, progress, a live loss chart, a log tail, and cancel / priority / max-GPU
controls. Its model syncs only the job's identity; the browser fetches the job, its metrics and
logs from the REST API and follows the events WebSocket itself, so the widget keeps updating
while the kernel runs other cells, and after a page reload. The browser turns the metric records
into chart series (``src/charts/series.ts``, shared with the lab's job detail tab): train loss
by step, validation per epoch, and a WMLA program's emetrics as ``train/<name>`` and
``test/<name>`` by iteration.

:class:`LossChart` charts any training loop of the kernel: ``chart.append(step, loss=...,
val_loss=...)``. Points travel as float64 binary buffers, batched (at most ~10 messages a
second), each series capped at ``max_points`` by thinning its older half (the same rule as the
browser's, so both hold the same points). A new view (a reload) asks for everything again.

ipywidgets is imported here only; the client, the magics and :class:`~.client.Job` work
without it.
"""

from __future__ import annotations

import threading
import time
from array import array
from collections.abc import Callable, Iterable
from typing import Any

import ipywidgets
from traitlets import Int, Unicode

from .. import __version__

MODULE_NAME = "jupyter-edt"
MODULE_VERSION = f"^{__version__}"  # the lab extension registers package.json's version
DEFAULT_MAX_POINTS = 100_000
FLUSH_INTERVAL_S = 0.1
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def thin_older_half(xs: array, ys: array) -> None:
    """Keep every other point of the older half (from its first) and all of the newer half:
    the rule of ``src/charts/downsample.ts``, in place."""
    n = len(xs)
    half = n // 2
    xs[:] = xs[0:half:2] + xs[half:]
    ys[:] = ys[0:half:2] + ys[half:]


def widgets_available(shell: Any = None) -> bool:
    """Whether a widget can be shown: ipywidgets is importable (it is, if this module is) and
    the shell is a kernel's, whose front end may render it (a terminal IPython cannot)."""
    if shell is None:
        try:
            from IPython import get_ipython
        except ImportError:  # pragma: no cover - IPython comes with ipykernel
            return False
        shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


class JobWidget(ipywidgets.DOMWidget):
    """A live view of one job, rendered by the lab extension.

    ``JobWidget(job_id="...")``, or ``JobWidget.for_job(job)`` to keep the :class:`Job` handle
    (``widget.job``) and show its summary where widgets are not rendered (nbconvert, GitHub).
    """

    _model_name = Unicode("JobModel").tag(sync=True)
    _model_module = Unicode(MODULE_NAME).tag(sync=True)
    _model_module_version = Unicode(MODULE_VERSION).tag(sync=True)
    _view_name = Unicode("JobView").tag(sync=True)
    _view_module = Unicode(MODULE_NAME).tag(sync=True)
    _view_module_version = Unicode(MODULE_VERSION).tag(sync=True)

    job_id = Unicode(help="The job shown").tag(sync=True)
    log_tail = Int(30, help="Lines of log tail shown").tag(sync=True)

    def __init__(self, job_id: str = "", *, job: Any = None, **kwargs: Any) -> None:
        if job is not None and not job_id:
            job_id = job.id
        super().__init__(job_id=job_id, **kwargs)
        self.job = job

    @classmethod
    def for_job(cls, job: Any, **kwargs: Any) -> JobWidget:
        return cls(job=job, **kwargs)

    def __repr__(self) -> str:
        if self.job is not None:
            return repr(self.job)
        return f"JobWidget(job_id={self.job_id!r})"

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any] | None:
        data = super()._repr_mimebundle_(**kwargs)
        if data is None:
            return None
        data["text/plain"] = repr(self)  # the job's summary, whole (not cut at 110 chars)
        if self.job is not None:
            data["text/html"] = self.job._repr_html_()  # where widgets are not rendered
        return data


class LossChart(ipywidgets.DOMWidget):
    """A live loss chart for a training loop in this kernel.

    >>> chart = LossChart(title="digits")
    >>> chart                                   # display it
    >>> for step in range(steps):
    ...     chart.append(step, loss=loss.item())
    ...     if step % 100 == 0:
    ...         chart.append(step, val_loss=val, val_acc=acc)

    Each keyword is a series (losses on the left axis, other metrics on the right; names
    starting with ``val_`` get a dot per point). Appends are buffered and sent at most every
    ``flush_interval`` seconds, from a timer thread too, so a tight loop sends few messages and
    the last points arrive even when the loop stops; :meth:`flush` sends at once.
    """

    _model_name = Unicode("LossChartModel").tag(sync=True)
    _model_module = Unicode(MODULE_NAME).tag(sync=True)
    _model_module_version = Unicode(MODULE_VERSION).tag(sync=True)
    _view_name = Unicode("LossChartView").tag(sync=True)
    _view_module = Unicode(MODULE_NAME).tag(sync=True)
    _view_module_version = Unicode(MODULE_VERSION).tag(sync=True)

    title = Unicode("", help="Shown above the chart").tag(sync=True)
    height = Int(240, help="Chart height in pixels").tag(sync=True)
    max_points = Int(DEFAULT_MAX_POINTS, help="Points kept per series").tag(sync=True)

    def __init__(
        self,
        *,
        flush_interval: float = FLUSH_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if self.max_points < 4:
            raise ValueError(f"max_points must be at least 4, got {self.max_points}")
        self.flush_interval = flush_interval
        # A monotonic clock counts from an arbitrary point (boot, on Linux): "never sent" is
        # None, not 0.0, or a machine up for less than `flush_interval` holds the first point.
        self._clock = clock
        self._last_sent: float | None = None
        self._lock = threading.RLock()
        self._series: dict[str, tuple[array, array]] = {}
        self._pending: dict[str, tuple[array, array]] = {}
        self._timer: threading.Timer | None = None
        self.messages_sent = 0
        self.on_msg(self._on_frontend_msg)

    # -- data -------------------------------------------------------------------------------

    def append(self, step: float, **values: float | None) -> None:
        """Add one point per keyword at x = `step`; None values are skipped."""
        x = float(step)
        with self._lock:
            for name, value in values.items():
                if value is None:
                    continue
                y = float(value)
                xs, ys = self._series.setdefault(name, (array("d"), array("d")))
                xs.append(x)
                ys.append(y)
                if len(xs) > self.max_points:
                    thin_older_half(xs, ys)
                px, py = self._pending.setdefault(name, (array("d"), array("d")))
                px.append(x)
                py.append(y)
            self._schedule()

    def extend(self, steps: Iterable[float], **series: Iterable[float | None]) -> None:
        """Append many points: ``extend(range(10), loss=losses)``."""
        columns = {name: list(values) for name, values in series.items()}
        for i, step in enumerate(steps):
            self.append(step, **{n: v[i] for n, v in columns.items() if i < len(v)})

    def data(self) -> dict[str, tuple[list[float], list[float]]]:
        """The points held, by series: ``{name: (steps, values)}``."""
        with self._lock:
            return {name: (list(xs), list(ys)) for name, (xs, ys) in self._series.items()}

    def clear(self) -> None:
        """Forget every point, here and in the views."""
        with self._lock:
            self._series.clear()
            self._pending.clear()
            self._send_points({}, reset=True)

    def flush(self) -> None:
        """Send the buffered points now."""
        with self._lock:
            self._cancel_timer()
            if self._pending:
                pending, self._pending = self._pending, {}
                self._send_points(pending, reset=False)

    def close(self) -> None:
        with self._lock:
            self._cancel_timer()
        super().close()

    # -- sending ----------------------------------------------------------------------------

    def _schedule(self) -> None:
        if self._last_sent is None:
            self.flush()
            return
        wait = self._last_sent + self.flush_interval - self._clock()
        if wait <= 0:
            self.flush()
        elif self._timer is None:
            self._timer = threading.Timer(wait, self.flush)
            self._timer.daemon = True
            self._timer.start()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            if self._timer is not threading.current_thread():
                self._timer.cancel()
            self._timer = None

    def _send_points(self, series: dict[str, tuple[array, array]], *, reset: bool) -> None:
        names = list(series)
        buffers: list[memoryview] = []
        for name in names:
            xs, ys = series[name]
            buffers += [memoryview(xs.tobytes()), memoryview(ys.tobytes())]
        content = {
            "type": "data",
            "reset": reset,
            "names": names,
            "counts": [len(series[n][0]) for n in names],
        }
        self._last_sent = self._clock()
        if self.comm is None:
            return  # closed
        self.send(content, buffers=buffers)
        self.messages_sent += 1

    def _on_frontend_msg(self, _widget: Any, content: dict[str, Any], _buffers: Any) -> None:
        if isinstance(content, dict) and content.get("type") == "request_data":
            with self._lock:
                self._cancel_timer()
                self._pending.clear()  # all of it goes in the reset
                self._send_points(dict(self._series), reset=True)
