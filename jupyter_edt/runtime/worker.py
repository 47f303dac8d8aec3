"""Worker entry point: ``python -m jupyter_edt.runtime.worker program.py [args...]``.

Runs the user's program as ``__main__`` in a process that the controller configured through
``EDT_*`` environment variables; the program's ``Trainer.fit`` then joins the elastic group.
``EDT_NUM_THREADS`` (default 1) sets torch's intra-op threads, so that several CPU workers do not
oversubscribe the cores and results do not depend on the thread count.
"""

from __future__ import annotations

import os
import runpy
import sys


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print("usage: python -m jupyter_edt.runtime.worker program.py [args...]", file=sys.stderr)
        return 2
    import torch

    torch.set_num_threads(int(os.environ.get("EDT_NUM_THREADS", "1")))
    wmla_log_dir()
    sys.argv = list(args)
    sys.path.insert(0, os.path.dirname(os.path.abspath(args[0])))
    runpy.run_path(args[0], run_name="__main__")
    return 0


def wmla_log_dir() -> None:
    """A WMLA exec's processes each have their own LOG_DIR, RESULT_DIR/log/<worker>, where
    its elog and emetrics helpers write (``compat.wmla.process_log_dir``)."""
    result, worker = os.environ.get("RESULT_DIR"), os.environ.get("EDT_WORKER_ID")
    if os.environ.get("EDT_WMLA_MODEL_DIR") is None or not result or not worker:
        return
    log_dir = os.path.join(result, "log", worker)
    os.makedirs(log_dir, exist_ok=True)
    os.environ["LOG_DIR"] = log_dir


if __name__ == "__main__":
    sys.exit(main())
