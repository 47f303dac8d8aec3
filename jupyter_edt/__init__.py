"""jupyter-edt: elastic distributed training for JupyterLab.

This module only names the extension points; importing it must stay cheap because Jupyter
imports it while discovering extensions (and training workers import the package too).
"""

from __future__ import annotations

from typing import Any

from .version import __version__

__all__ = ["__version__"]


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    from .app import EDTApp

    return [{"module": "jupyter_edt.app", "app": EDTApp}]


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "jupyter-edt"}]


def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext jupyter_edt`: the notebook magics (imported only when loaded)."""
    from .notebook.magics import load_ipython_extension as load

    load(ipython)
