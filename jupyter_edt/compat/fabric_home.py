"""``FABRIC_HOME``: a directory whose ``libs/fabric.zip`` holds WMLA's import names.

WMLA programs do ``sys.path.insert(0, $FABRIC_HOME/libs/fabric.zip)`` and then
``from fabric_model import FabricModel`` (or ``from pyedt.fabric_model import ...``,
``from callbacks import LoggerCallback``). The zip holds small modules that re-export
``jupyter_edt.compat``, so the code that runs is the installed package's, never a stale copy.
Built once per server (the contents are fixed), atomically, so concurrent jobs never see half
a zip; readable by everyone, since a shared service's jobs run as their users' accounts.
"""

from __future__ import annotations

import io
import os
import tempfile
import zipfile
from pathlib import Path

__all__ = ["FABRIC_MODULES", "ensure_fabric_home", "fabric_zip"]

_FABRIC = "from jupyter_edt.compat.fabric_model import *  # noqa: F401,F403\n"
_FABRIC += "from jupyter_edt.compat.fabric_model import FabricModel  # noqa: F401\n"
_CALLBACKS = "from jupyter_edt.compat.callbacks import *  # noqa: F401,F403\n"
_CALLBACKS += "from jupyter_edt.compat.callbacks import Callback, LoggerCallback  # noqa: F401\n"

# file in the zip -> its source
FABRIC_MODULES: dict[str, str] = {
    "fabric_model.py": _FABRIC,
    "callbacks.py": _CALLBACKS,
    "pyedt/__init__.py": '"""WMLA\'s newer import path for FabricModel (jupyter-edt)."""\n',
    "pyedt/fabric_model.py": _FABRIC,
    "pyedt/callbacks.py": _CALLBACKS,
}


def _zip_bytes() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, source in sorted(FABRIC_MODULES.items()):
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            z.writestr(info, source)
    return out.getvalue()


def fabric_zip(root: str | os.PathLike[str]) -> Path:
    """``FABRIC_HOME/libs/fabric.zip``: on an exec's PYTHONPATH, as on WMLA."""
    return Path(root) / "libs" / "fabric.zip"


def ensure_fabric_home(root: str | os.PathLike[str]) -> Path:
    """Make ``root/libs/fabric.zip`` if it is missing or differs; returns ``root``."""
    root = Path(root)
    target = fabric_zip(root)
    data = _zip_bytes()
    try:
        if target.read_bytes() == data:
            if target.stat().st_mode & 0o444 != 0o444:  # made private by an older version
                target.chmod(0o644)
            return root
    except FileNotFoundError:
        pass
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".fabric.", suffix=".zip")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(fd, 0o644)  # mkstemp makes it 0600: the service's account's alone
            f.write(data)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return root
