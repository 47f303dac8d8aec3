"""EDTApp's pluggable classes are configuration (as jupyter-scheduler's are): a deployment
names its own by class or import path, and anything else is refused when configured."""

from __future__ import annotations

import pytest
from traitlets import TraitError

from jupyter_edt.app import EDTApp
from jupyter_edt.launch.local import LocalLauncher


class QuietLauncher(LocalLauncher):
    """A deployment's own launcher (here: the local one under another name)."""


def test_the_launcher_class_is_configurable_by_class_or_import_path():
    assert EDTApp().launcher_class is LocalLauncher
    assert EDTApp(launcher_class=f"{__name__}.QuietLauncher").launcher_class is QuietLauncher
    expected = r"expected a subclass of 'jupyter_edt\.launch\.base\.Launcher'"
    with pytest.raises(TraitError, match=expected):
        EDTApp(launcher_class="collections.OrderedDict")
