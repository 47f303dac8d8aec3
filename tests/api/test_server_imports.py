"""The server never imports torch: training runs in job processes (ARCHITECTURE.md)."""

from __future__ import annotations

import subprocess
import sys


def test_loading_the_server_extension_does_not_import_torch():
    code = (
        "import sys, jupyter_edt.app, jupyter_edt.api, jupyter_edt.notebook.client;"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
