"""The Galata Hub test's server: a real JupyterHub on $EDT_UI_HUB_PORT with `jupyter edt
serve` as its service, the user alice-ui's server started in the remote mode, and one job of
hers submitted through it. Runs until SIGTERM (Playwright's webServer stops it)."""

from __future__ import annotations

import signal
import sys
import tempfile
import threading
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "tests")]

from hubdeploy import Hub  # noqa: E402

from jupyter_edt.notebook import EDTClient  # noqa: E402

USER = "alice-ui"


def main() -> None:
    import os

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with tempfile.TemporaryDirectory(prefix="edt-ui-hub-") as root:
        hub = Hub(
            Path(root),
            [USER],
            port=int(os.environ["EDT_UI_HUB_PORT"]),
            service_settings={
                "virtual_gpus": 4,
                "run_as_users": False,
                "allow_shared_account": True,
                "refresh_interval": 0.5,
            },
        )
        try:
            hub.start()
            url = hub.start_server(USER)
            job = EDTClient(url, hub.token(USER)).submit("print('hi')", name="from-the-hub")
            print(f"hub ready at {hub.url}; job {job.id}", flush=True)
            stop.wait()
        finally:
            hub.stop()


if __name__ == "__main__":
    main()
