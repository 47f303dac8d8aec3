"""Worker entry point: ``python -m jupyter_edt.runtime.worker program.py [args...]``.

Runs the user's program as ``__main__`` in a process that the controller configured through
``EDT_*`` environment variables; the program's ``Trainer.fit`` then joins the elastic group.
``EDT_NUM_THREADS`` sets torch's intra-op threads; by default a GPU worker takes its GPU's share
of the node's cores and a worker on a virtual GPU one thread, so that CPU workers do not
oversubscribe the cores (``resources.py``). ``EDT_WORKER_SETUP``
(``module:function``, set by a job plugin, see ``jobs.plugins``) is called before the program:
an add-on's per-process rule (WMLA's own LOG_DIR per process) without the runtime knowing it.
A program that dies of an exception says which before it exits (``failures.report_exception``):
the job's reason is built from it.
"""

from __future__ import annotations

import importlib
import os
import runpy
import sys

from .failures import report_exception

#: ``module:function`` that each worker calls before the program (set by a job plugin)
WORKER_SETUP_ENV = "EDT_WORKER_SETUP"


class StopForRestart(SystemExit):
    """A program's workers checkpointed at the step they agreed on, to be started again at
    another size (a restart job's integrations raise it): the worker ends at once, status 0,
    without the interpreter's shutdown (seconds with torch and a framework loaded, all of them
    in the restart's time)."""

    def __init__(self) -> None:
        super().__init__(0)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print("usage: python -m jupyter_edt.runtime.worker program.py [args...]", file=sys.stderr)
        return 2
    try:
        run(args)
    except StopForRestart:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    except BaseException as err:
        # the driver builds the job's reason from it; the traceback still reaches the log
        report_exception(err)
        raise
    return 0


def run(args: list[str]) -> None:
    """Run the program ``args[0]`` as ``__main__`` with ``args`` as its ``sys.argv``."""
    import torch

    from .resources import worker_threads

    torch.set_num_threads(worker_threads())
    run_setup(os.environ.get(WORKER_SETUP_ENV))
    sys.argv = list(args)
    sys.path.insert(0, os.path.dirname(os.path.abspath(args[0])))
    runpy.run_path(args[0], run_name="__main__")


def run_setup(target: str | None) -> None:
    """Call ``module:function`` (no arguments), if one is named."""
    if not target:
        return
    module, _, name = target.partition(":")
    if not module or not name:
        raise ValueError(f"{WORKER_SETUP_ENV} must name module:function, got {target!r}")
    getattr(importlib.import_module(module), name)()


if __name__ == "__main__":
    sys.exit(main())
