"""Loads the magics in kernels started by a Jupyter server that runs jupyter-edt.

The package installs an IPython kernel config (`etc/ipython/ipython_kernel_config.json`) naming
this module, so every IPython kernel of the environment imports it; the server extension sets
`EDT_LOAD_MAGICS=1` in its environment, which its kernels inherit (`EDTApp.load_magics`). A
kernel started any other way therefore stays as it was: `%load_ext jupyter_edt` loads the magics
there.
"""

from __future__ import annotations

import os
from typing import Any


def load_ipython_extension(ipython: Any) -> None:
    if os.environ.get("EDT_LOAD_MAGICS") == "1":
        from .magics import load_ipython_extension as load

        load(ipython)
