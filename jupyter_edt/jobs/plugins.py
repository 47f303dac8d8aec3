"""Where an add-on contributes to every job without the core knowing it.

The core (``jobs/``, ``runtime/``) runs any program; an add-on such as WMLA compatibility
(``compat/``) adds what its programs expect: environment variables, files prepared before the
job starts, metric files its programs write, and a setup run in each worker before the
program. The application wires add-ons in (``EDTApp``); the core never imports them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..runtime.worker import WORKER_SETUP_ENV
from .models import Job

if TYPE_CHECKING:
    from ..runtime.jobdir import JobDir

__all__ = ["WORKER_SETUP_ENV", "JobPlugin"]


class JobPlugin(Protocol):
    #: Globs, relative to the job directory, of JSON-lines files whose lines
    #: :meth:`metric_records` turns into the job's metric records.
    metric_files: Sequence[str]

    def environment(self, job: Job, job_dir: JobDir) -> Mapping[str, str]:
        """Variables every process of the job gets, beside the core's contract."""
        ...

    def prepare(self, job: Job, job_dir: JobDir) -> None:
        """Runs (in a thread) before the job's driver starts; its directories exist."""
        ...

    def metric_records(self, lines: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """The metric records among lines read from :attr:`metric_files`."""
        ...
