"""The integrations stay optional: importing their package imports no training framework (each
module imports only its own), so a program or the server that never uses one needs none."""

from __future__ import annotations

import subprocess
import sys


def test_the_package_imports_no_framework() -> None:
    probe = (
        "import sys, jupyter_edt.integrations, jupyter_edt.integrations._common\n"
        "print(sorted(m for m in ('transformers', 'accelerate', 'lightning', 'pytorch_lightning',"
        " 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
