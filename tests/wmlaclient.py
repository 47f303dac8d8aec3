"""A client written as WMLA's tutorial notebooks write theirs (``requests``, the args pasted into
the URL unencoded, the log read into pandas, the result downloaded with the size from
Content-Disposition), and the CPD-era program they submit: shared by the tests that drive it
against the embedded server (tests/compat/) and through a Hub user's server (tests/hub/).

The credentials are one parameter of the client (``auth``, anything ``requests`` takes: WMLA's
Basic ``(user, password)``, or `TokenAuth`), or a header (CPD's ``X-Auth-Token``)."""

from __future__ import annotations

import asyncio
from io import StringIO
from pathlib import Path
from typing import Any

import pandas as pd
import requests
from waiting import eventually
from wmla_program import MAIN

DL = "platform/rest/deeplearning/v1"
SC = "platform/rest/conductor/v1"
ELOG_COLUMNS = ["timestamp", "global_steps", "iteration", "loss", "accuracy"]

# The tutorial's program as CPD runs it: FabricModel and callbacks already on the path. It
# prints to stdout and stderr and writes a text line into its elog file, none of which may
# reach the training log; after a few samples it holds until DATA_DIR/go exists, so a test
# sees it RUNNING however fast it trains.
CPD_MAIN = (
    MAIN.replace(
        'path = os.path.join(os.getenv("FABRIC_HOME"), "libs", "fabric.zip")\n'
        "sys.path.insert(0, path)\n",
        "",
    )
    .replace(
        "from edtcallback import EDTLoggerCallback\n",
        "from edtcallback import EDTLoggerCallback\nfrom callbacks import Callback\n"
        "from elog import ELog\nimport warnings\n",
    )
    .replace("Digits(64, 1), Digits(32, 2)", "Digits(32, 1), Digits(16, 2)")
    .replace(
        "        time.sleep(DELAY)  # stands for the work of reading a real sample",
        "        READ[0] += 1\n"
        "        go = os.path.join(dataDir, 'go')\n"
        "        while READ[0] > 4 and not os.path.exists(go):\n"
        "            time.sleep(0.05)",
    )
    .replace(
        "DELAY = 0.0\n",
        "DELAY = 0.0\nREAD = [0]\n\n\nclass Epochs(Callback):\n"
        "    def on_epoch_end(self, epoch):\n        print('epoch ended:', epoch)\n",
    )
    .replace(
        '    print("unknown arguments:", unknown)\n',
        '    print("unknown arguments:", unknown)\n'
        '    print("argv:", json.dumps(sys.argv[1:]))\n'
        '    print("a line for stderr", file=sys.stderr)\n'
        '    warnings.warn("a warning as torch would print one")\n'
        "    with ELog.open() as log:\n"
        '        log.recordText("Training starts at " + os.getcwd())\n',
    )
    .replace(
        "driver_logger=EDTLoggerCallback()",
        "driver_logger=EDTLoggerCallback(), user_callback=Epochs()",
    )
)
assert "sys.path.insert" not in CPD_MAIN and "READ[0] > 4" in CPD_MAIN


class TokenAuth(requests.auth.AuthBase):
    """The Jupyter token header, as `requests` auth (WMLA's Basic is a tuple)."""

    def __init__(self, token: str) -> None:
        self.token = token

    def __call__(self, r: requests.PreparedRequest) -> requests.PreparedRequest:
        r.headers["Authorization"] = f"token {self.token}"
        return r


class TutorialClient:
    """The calls of WMLA's tutorial notebooks, as they write them (blocking: a test whose server
    shares its event loop runs each in a thread, `call`)."""

    def __init__(self, dl_rest_url: str, auth: Any, headers: dict[str, str] | None = None) -> None:
        self.dl_rest_url = dl_rest_url
        self.auth = auth
        self.headers = headers or {"Accept": "application/json"}

    def get(self, path: str, **kw: Any) -> requests.Response:
        kw.setdefault("headers", self.headers)
        return requests.get(self.dl_rest_url + path, auth=self.auth, timeout=60, **kw)

    def submit(self, args: str, tar: Path, sig_name: str = "") -> requests.Response:
        with open(tar, "rb") as f:
            return requests.post(
                self.dl_rest_url + "/execs?sigName=" + sig_name + "&args=" + args,
                files={"file": f},
                auth=self.auth,
                headers=self.headers,
                timeout=60,
            )

    def download(self, exec_id: str, out: Path) -> tuple[int, int]:
        """(the size Content-Disposition announced, the bytes received)."""
        r = self.get("/execs/" + exec_id + "/result", stream=True)
        r.raise_for_status()
        total = int(r.headers["Content-Disposition"].split("size=")[1])
        got = 0
        with open(out, "wb") as f:
            for chunk in r.iter_content(chunk_size=1024):
                f.write(chunk)
                got += len(chunk)
        return total, got


def log_frame(log: str) -> pd.DataFrame:
    """The training log as the 1.2.x tutorials read it into pandas."""
    return pd.read_csv(
        StringIO(log.replace(":", ",")), usecols=[4, 6, 8, 10, 12], names=ELOG_COLUMNS
    )


async def call(fn, *args, **kw):
    return await asyncio.to_thread(fn, *args, **kw)


async def wait_state(client: TutorialClient, exec_id: str, until, what: str) -> dict:
    async def probe() -> dict:
        r = await call(client.get, "/execs/" + exec_id)
        r.raise_for_status()
        return r.json()

    return await eventually(probe, f"became {what} (exec {exec_id})", until=until, interval=0.1)
