"""A synthetic job driver for the events benchmark: `python -m jupyter_edt.bench.emitter <dir>`.

It speaks the job-directory protocol (runtime/jobdir.py) like the real driver, but instead of
training it appends rank-0 `step` events at a fixed rate (`EDT_EMIT_RATE` per second, for
`EDT_EMIT_SECONDS`), each stamped with the time it was written, so the benchmark can measure
the way from a worker's event file to a WebSocket subscriber.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from ..runtime.jobdir import JobDir, process_start_time


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    d = JobDir(Path(args[0]))
    rate = float(os.environ.get("EDT_EMIT_RATE", "50"))
    seconds = float(os.environ.get("EDT_EMIT_SECONDS", "10"))
    status = {"pid": os.getpid(), "started": process_start_time(os.getpid()), "state": "running"}
    d.write_status(status)
    d.logs.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    total = int(rate * seconds)
    with (d.logs / "events-w0.jsonl").open("a") as out:
        for n in range(total):
            # pace by the schedule, not by sleeping a fixed time, so the rate holds under load
            delay = start + n / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            event = {"seq": n + 1, "time": time.time(), "type": "step", "worker": "w0"}
            event.update({"rank": 0, "global_step": n, "loss": 1.0 / (n + 1)})
            out.write(json.dumps(event) + "\n")
            out.flush()
    d.write_status({**status, "state": "exited", "exit_code": 0})
    return 0


if __name__ == "__main__":
    sys.exit(main())
