"""Jupyter Server configuration for the jupyter-edt Galata (Playwright) UI tests.

Used by ``playwright.config.js`` (``webServer.command``); start it by hand with
``npm start`` from this folder.

Warning: this configuration removes the server's security protections (no token,
no XSRF check).  Never use it outside the test suite.

Environment:
    EDT_UI_PORT         port the test server listens on (default 18888; Playwright
                        also passes --ServerApp.port and --ServerApp.base_url)
    EDT_VIRTUAL_GPUS    virtual GPU count for the jupyter_edt server extension (default 4)
"""

import os
import tempfile

from jupyterlab.galata import configure_jupyter_server

c = get_config()  # noqa: F821  (provided by the traitlets config loader)

configure_jupyter_server(c)

# The test machine and CI run as root; Jupyter refuses that unless told.
c.ServerApp.allow_root = True
c.ServerApp.ip = "127.0.0.1"
# Port 8888 may be taken on a shared machine: Playwright and the server agree on
# EDT_UI_PORT.  No port retries, so a clash fails loudly instead of silently
# serving on a port Playwright does not talk to.
c.ServerApp.port = int(os.environ.get("EDT_UI_PORT", "18888"))
c.ServerApp.port_retries = 0
c.ServerApp.open_browser = False

# The server extension under test, with a fixed number of virtual GPUs so the
# sidebar shows a known device list on a machine without NVIDIA GPUs.
c.ServerApp.jpserver_extensions = {"jupyter_edt": True}
c.EDTApp.virtual_gpus = int(os.environ.get("EDT_VIRTUAL_GPUS", "4"))
# Each server its own job database and job directories, new at each start: the servers of one
# run (and of runs at once) never schedule the same jobs, and what a test shows (the allocation
# timeline's picture) is its run's jobs only.
_state = tempfile.mkdtemp(prefix="edt-ui-")
c.EDTApp.database_url = f"sqlite:///{_state}/edt.sqlite"
c.EDTApp.jobs_dir = f"{_state}/jobs"

# Keep the news/update checks (network) out of the test run.
c.LabApp.news_url = None
c.LabApp.check_for_updates_class = "jupyterlab.handlers.announcements.NeverCheckForUpdate"
