"""IPython magics: ``%%edt_submit``, ``%edt_jobs``, ``%edt_cancel`` and ``%edt_connect``.

Load them with ``%load_ext jupyter_edt``. The magics find the Jupyter server by themselves
(see :mod:`.discovery`); ``%edt_connect URL --token T`` points them elsewhere.

``%%edt_submit`` submits the cell's code as an elastic job and shows the job: a live
:class:`~.widgets.JobWidget` in a notebook, the ``Job`` handle in a terminal. Nothing is
half-submitted: the options are checked, the cell is compiled and the server is found before the
one request that submits; any failure is shown as a short ``UsageError`` in the cell's output,
without a traceback, and leaves no job behind. With ``--wait``, a job that fails raises the
client's :class:`~.errors.JobFailed`, whose message is the job's reason (the program's
exception, its frame and the workers that raised it); the cell shows the reason, then each
distinct traceback once with the framework's frames folded, and the end of the logs.

The cell runs as a plain Python program (``main.py``) in the job's processes, not in this
kernel: it cannot see this kernel's variables, and IPython syntax (``%magics``, ``!commands``)
is not available there.

Options that reach the program
------------------------------
``--epochs``, ``--effective-batch-size``, ``--checkpoint-every`` and ``--data-dir`` are passed to
the program as environment variables, ``EDT_EPOCHS``, ``EDT_EFFECTIVE_BATCH_SIZE``,
``EDT_CHECKPOINT_EVERY`` and ``EDT_DATA_DIR``; ``--env K=V`` sets any other variable.

Precedence: **an option given to the magic wins over the value written in the code**, which
wins over the runtime's default. ``Trainer.fit(epochs=10, ...)`` in a cell submitted with
``--epochs 3`` trains 3 epochs: the option is the later, more specific choice, made at the
moment of submitting, and it lets one cell be re-submitted with other settings without editing
it. The runtime's ``Trainer.fit`` is where the rule is applied (it reads the variables and notes
in the job's log when one replaced a value from the code); a program that does not use the
``Trainer`` can read them from ``os.environ`` itself. A value given both as an option and in
``--env`` (``--epochs 3 --env EDT_EPOCHS=5``) takes the option.
``--data-dir`` is made absolute against the kernel's working directory (the notebook's folder),
since the job runs elsewhere.

``--files a.py data/`` ships files and folders with the program: they are uploaded in one
archive with the cell's code and appear next to ``main.py`` in the job's working directory
(relative paths are the kernel's, i.e. the notebook's folder).
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from .client import EDTClient, Job
from .errors import BadRequest, EDTError, JobFailed
from .submit_options import SUBMIT_OPTIONS, job_options, submit_option_error
from .table import JobTable

# The server's field names, as the magic's options spell them (for 400 answers).
OPTION_OF_FIELD = {
    **{option.dest: option.flag for option in SUBMIT_OPTIONS},
    "code": "the cell",
    "file": "--files",
}


def _usage_errors(method: Callable[..., Any]) -> Callable[..., Any]:
    """Show a client error as a short message in the cell output, not as a traceback."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except JobFailed:
            raise  # the job's own failure: IPython shows its report (`JobFailed`)
        except BadRequest as err:
            option = OPTION_OF_FIELD.get(err.field or "", err.field)
            where = f"{option}: " if option else ""
            raise UsageError(f"{where}{err.message} (nothing was submitted or changed)") from None
        except EDTError as err:
            raise UsageError(str(err)) from None

    return wrapper


def parse_line(magic: Callable[..., Any], line: str) -> Any:
    """Parse a magic's options with shell quoting (``--env NOTE='two words'``); IPython's
    own splitter keeps quotes inside words. Any problem is a UsageError."""
    try:
        argv = shlex.split(line)
    except ValueError as err:
        raise UsageError(f"{err} in {line!r}") from None
    return magic.parser.parse_args(argv)  # type: ignore[attr-defined]


def check_compiles(cell: str) -> None:
    """Raise a UsageError showing the SyntaxError when the cell is not a valid program."""
    try:
        compile(cell, "<edt_submit cell>", "exec")
    except (SyntaxError, ValueError) as err:
        detail = "".join(traceback.format_exception_only(type(err), err)).rstrip()
        hint = ""
        if re.search(r"^\s*[%!]", cell, re.MULTILINE):
            hint = (
                "\nThe cell runs as a plain Python program: IPython syntax (%magics, "
                "!commands) is not available in a job."
            )
        raise UsageError(
            f"The cell does not compile, so nothing was submitted:\n{detail}{hint}"
        ) from None


def submit_arguments(magic: Callable[..., Any]) -> Callable[..., Any]:
    """Add the submit options of :data:`SUBMIT_OPTIONS` to a magic as its ``@argument``
    decorators, in the table's order (the CLI adds the same rows to its parser)."""
    for option in reversed(SUBMIT_OPTIONS):
        arguments = option.arguments(name_default="the notebook's name")
        magic = argument(option.flag, **arguments)(magic)
    return magic


@magics_class
class EDTMagics(Magics):
    """The magics, with one client per shell (created when a magic first needs it)."""

    def __init__(self, shell: Any = None, client: EDTClient | None = None) -> None:
        super().__init__(shell)
        self._client = client

    @property
    def client(self) -> EDTClient:
        if self._client is None:
            self._client = EDTClient()  # discovery errors become UsageErrors in the callers
        return self._client

    def view(self, job: Job) -> Any:
        """What a submission cell displays: in a kernel with ipywidgets, the live job widget
        (its text and HTML fallbacks are the job's); elsewhere (a terminal IPython, no
        ipywidgets) the plain :class:`Job` handle."""
        try:
            from .widgets import JobWidget, widgets_available
        except ImportError:
            return job
        if not widgets_available(self.shell):
            return job
        return JobWidget.for_job(job)

    # -- %edt_connect -------------------------------------------------------------------------

    @line_magic
    @magic_arguments()
    @argument("url", nargs="?", help="The Jupyter server's base URL, e.g. http://host:8888/")
    @argument("--token", default=None, help="A Jupyter API token for that server")
    @_usage_errors
    def edt_connect(self, line: str) -> EDTClient:
        """Use this server for the magics (default: the server found automatically)."""
        args = parse_line(self.edt_connect, line)
        self._client = EDTClient(args.url, args.token)
        self._client.cluster()  # fail now, not at the first submission
        return self._client

    # -- %%edt_submit -------------------------------------------------------------------------

    @cell_magic
    @magic_arguments()
    @submit_arguments
    @_usage_errors
    def edt_submit(self, line: str, cell: str) -> Any:
        """Submit this cell's code as an elastic training job.

        See the module docstring for how options reach the program and their precedence.
        """
        args = parse_line(self.edt_submit, line)
        problem = submit_option_error(args)
        if problem is not None:
            raise UsageError(problem)
        options = job_options(args)
        if not cell.strip():
            raise UsageError("The cell is empty: there is no program to submit.")
        check_compiles(cell)
        # The kernel's paths: no shell expanded a ~ in them.
        files = [os.path.expanduser(p) for group in args.files or [] for p in group]
        job = self.client.submit(
            code=cell,
            files=files,
            name=default_name() if args.name is None else args.name,
            **options,
        )
        if args.wait:
            return self._wait(job)
        return self.view(job)

    def _wait(self, job: Job) -> Any:
        try:
            job.wait(progress=True)
        except KeyboardInterrupt:
            print(f"Stopped waiting; job {job.id} keeps running (%edt_cancel {job.id} stops it).")
            return self.view(job)
        job.check()  # a failure raises JobFailed: its reason, then its folded tracebacks
        return self.view(job)

    # -- %edt_jobs, %edt_cancel -----------------------------------------------------------------

    @line_magic
    @magic_arguments()
    @argument("--state", action="append", default=None, help="Keep jobs in this state (repeatable)")
    @argument("--user", default=None, help="Another user's jobs (administrators)")
    @_usage_errors
    def edt_jobs(self, line: str) -> JobTable:
        """List your jobs, newest first, as a table."""
        args = parse_line(self.edt_jobs, line)
        states = [s.upper() for s in args.state or []]
        return JobTable(self.client.list(state=states, user=args.user))

    @line_magic
    @magic_arguments()
    @argument("job_ids", nargs="+", metavar="ID", help="The jobs to cancel")
    @_usage_errors
    def edt_cancel(self, line: str) -> None:
        """Cancel jobs: their processes stop and their GPUs are freed."""
        args = parse_line(self.edt_cancel, line)
        for job_id in args.job_ids:
            job = self.client.cancel(job_id)
            print(f"Cancelled job {job.id} ({job.name or 'unnamed'}).")


def default_name() -> str:
    """The notebook's name: jupyter_server gives kernels its path in ``JPY_SESSION_NAME``."""
    session = os.environ.get("JPY_SESSION_NAME", "")
    return Path(session).stem if session else ""


def load_ipython_extension(ipython: Any) -> None:
    ipython.register_magics(EDTMagics)
