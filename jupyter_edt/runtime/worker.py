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
    sys.argv = list(args)
    sys.path.insert(0, os.path.dirname(os.path.abspath(args[0])))
    runpy.run_path(args[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
