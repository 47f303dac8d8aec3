"""The client's errors. Each says what went wrong in terms a notebook user can act on.

They all derive from :class:`EDTError`, so ``except EDTError`` catches whatever the client
raises; the subclasses also derive from the matching built-in (``LookupError`` for an unknown
job, ``TimeoutError`` for a wait that timed out, ``ValueError`` for bad input) so generic
handlers keep working.
"""

from __future__ import annotations

from typing import Any


class EDTError(Exception):
    """Any failure of a jupyter-edt client call."""


class ConfigurationError(EDTError):
    """No server was given and none could be found (see ``discovery``)."""


class ServerUnreachable(EDTError):
    """The server did not answer, or is not a Jupyter server running jupyter-edt."""

    def __init__(self, url: str, message: str) -> None:
        super().__init__(message)
        self.url = url


class Forbidden(EDTError, PermissionError):
    """Not authenticated (a wrong or missing token), or not allowed to do this to the job."""

    def __init__(self, message: str, status: int = 403) -> None:
        super().__init__(message)
        self.status = status


class BadRequest(EDTError, ValueError):
    """The server refused the input; ``field`` names the bad field when the server said which."""

    def __init__(self, message: str, field: str | None = None, status: int = 400) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.message = message
        self.status = status


class Conflict(BadRequest):
    """The job's state does not allow the change (HTTP 409)."""


class NoSuchJob(EDTError, LookupError):
    """No job with this id, or not one of the caller's jobs."""

    def __init__(self, job_id: str, message: str | None = None) -> None:
        super().__init__(message or f"No job with id {job_id!r} (or it is not yours).")
        self.job_id = job_id

    def __str__(self) -> str:  # LookupError would show the repr of the message
        return str(self.args[0])


class NoSuchArtifact(EDTError, FileNotFoundError):
    """The job's result directory has no such file (yet: the model is saved at the end)."""

    def __str__(self) -> str:
        return str(self.args[0])


class WaitTimeout(EDTError, TimeoutError):
    """``Job.wait(timeout=...)`` ran out of time; the job keeps running."""

    def __init__(self, job: Any, timeout: float) -> None:
        super().__init__(
            f"Job {job.id} is still {job.state} after {timeout:g} s; it keeps running "
            "(job.cancel() stops it)."
        )
        self.job = job


class JobFailed(EDTError, RuntimeError):
    """The job ended FAILED. Its message is the job's reason (the program's exception, the
    user's frame, the workers that raised it); ``job`` is the failed job and ``report`` adds
    the folded tracebacks and the end of its logs (``client.failure_report``), which a
    notebook shows in place of a traceback of the client's own frames."""

    def __init__(self, job: Any, report: str | None = None) -> None:
        super().__init__(job.reason or f"Job {job.id} failed without a reason.")
        self.job = job
        self.report = report if report is not None else str(self)

    def __str__(self) -> str:
        return str(self.args[0])

    def _render_traceback_(self) -> list[str]:
        """What IPython shows for it (its hook for errors from elsewhere, which ipyparallel's
        remote errors use too): the report, not the client's frames that raised it."""
        return self.report.splitlines()
