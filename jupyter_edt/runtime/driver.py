"""A job's driver: ``python -m jupyter_edt.runtime.driver <job dir>``.

One per job, on the service's machine. It hosts the job's rendezvous (through
``LocalController``), starts one worker per device, and carries out the orders the server writes
into the job directory: a new device set (grow, shrink, move) or "suspend" (checkpoint, then
stop). It reports in ``status.json``. A worker that dies is dropped at once by the controller and
then replaced on its device, a few times at most, so a job keeps the devices it was given.

Exit status: 0 when the job's last workers all finished training (or it was suspended), 1 when
training failed; the reason is in ``status.json`` under ``error``.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .control import LocalController, formed_key
from .jobdir import JobDir, process_start_time, read_json

TICK_S = 0.1
MAX_REPLACEMENTS = 3
SUSPEND_TIMEOUT_S = 120.0


def device_env(device: Mapping[str, Any]) -> dict[str, str]:
    """A worker's view of its device: one GPU, or none for a virtual device (a CPU slot)."""
    return {
        "CUDA_VISIBLE_DEVICES": "" if device["virtual"] else str(device["index"]),
        "EDT_DEVICE_ID": str(device["id"]),
    }


class Driver:
    def __init__(self, job_dir: Path) -> None:
        self.dir = JobDir(job_dir)
        job = read_json(self.dir.job)
        if job is None:
            raise RuntimeError(f"{self.dir.job} is missing: the job directory is incomplete.")
        self.job = job
        self.status: dict[str, Any] = {
            "pid": os.getpid(),
            "started": process_start_time(os.getpid()),
            "state": "starting",
            "generation": 0,
            "workers": {},
        }
        self.devices: list[dict[str, Any]] = []  # the devices the server gave the job
        self.device_of: dict[str, dict[str, Any]] = {}  # worker id -> device
        self.orders_seq = 0
        self.replacements = 0
        self.ctl: LocalController | None = None

    # life ---------------------------------------------------------------------------------

    def run(self) -> int:
        self._report()
        orders = self.dir.read_orders() or {}
        self.orders_seq = orders.get("seq", 0)
        devices = orders.get("devices", [])
        if orders.get("action") != "run" or not devices:
            return self._exit(1, "the driver started without devices to run on")
        self.ctl = LocalController(
            self.job["program"],
            self.dir.result,
            log_dir=self.dir.logs,
            cwd=self.dir.code,
            timeout_s=float(os.environ.get("EDT_TIMEOUT_S", "10")),
        )
        self.devices = devices
        ids = self.ctl.start(len(devices), [device_env(d) for d in devices])
        self.device_of = dict(zip(ids, devices, strict=True))
        self._report()
        try:
            return self._loop()
        finally:
            self.ctl.close()

    def _loop(self) -> int:
        assert self.ctl is not None
        ctl = self.ctl
        while True:
            gen = ctl.ctl["gen"]
            if self.status["state"] == "starting" and ctl.store.check([formed_key(gen)]):
                self.status["state"] = "running"
                self._report()
            orders = self.dir.read_orders() or {}
            if orders.get("seq", 0) > self.orders_seq:
                self.orders_seq = orders["seq"]
                if orders["action"] == "suspend":
                    return self._suspend()
                self._apply(orders["devices"])
            if all(p.poll() is not None for p in ctl.procs.values()):
                return self._finished()
            self._replace_dead()
            time.sleep(TICK_S)

    # orders -------------------------------------------------------------------------------

    def _apply(self, devices: list[dict[str, Any]]) -> None:
        """Move to exactly these devices: keep the workers on devices that stay, start one
        worker per new device, and let the workers on devices taken away leave."""
        assert self.ctl is not None
        self.devices = devices
        wanted = {d["id"]: d for d in devices}
        keep = [w for w in self.ctl.members if self.device_of[w]["id"] in wanted]
        held = {self.device_of[w]["id"] for w in keep}
        new = [d for d in devices if d["id"] not in held]
        moving = not keep and bool(self.ctl.members)
        # A job moved to all-new devices grows onto them first, so the joiners receive the
        # state from the workers that then leave; otherwise nobody would hold it.
        _, joiners = self.ctl.resize(
            list(self.ctl.members) if moving else keep,
            [device_env(d) for d in new],
            wait=moving,
        )
        for w, d in zip(joiners, new, strict=True):
            self.device_of[w] = d
        if moving:
            self.ctl.resize(joiners, [], wait=False)
        self._report()

    def _replace_dead(self) -> None:
        """Give the device of a worker that died to a new worker (the controller has already
        re-formed the group without it)."""
        assert self.ctl is not None
        members = self.ctl.members
        if not members:
            return  # nobody left to carry the state: the job has failed
        held = {self.device_of[w]["id"] for w in members}
        vacant = [d for d in self.devices if d["id"] not in held]
        if not vacant or self.replacements >= MAX_REPLACEMENTS:
            return
        self.replacements += len(vacant)
        _, joiners = self.ctl.resize(
            list(self.ctl.members), [device_env(d) for d in vacant], wait=False
        )
        for w, d in zip(joiners, vacant, strict=True):
            self.device_of[w] = d
        self._report()

    def _suspend(self) -> int:
        """Checkpoint at the next step boundary, then stop every worker."""
        assert self.ctl is not None
        self.status["state"] = "suspending"
        self._report()
        before = self._checkpoints()
        self.ctl.request_checkpoint()
        deadline = time.monotonic() + SUSPEND_TIMEOUT_S
        while self._checkpoints() == before and time.monotonic() < deadline:
            if all(p.poll() is not None for p in self.ctl.procs.values()):
                break
            time.sleep(TICK_S)
        self.ctl.close()
        self.status["state"] = "suspended"
        return self._exit(0, None)

    # reports ------------------------------------------------------------------------------

    def _finished(self) -> int:
        assert self.ctl is not None
        codes = {w: p.poll() for w, p in self.ctl.procs.items()}
        last = self.ctl.members
        if last and all(codes[w] == 0 for w in last):
            self.status["state"] = "exited"
            return self._exit(0, None)
        failed = {w: c for w, c in codes.items() if c != 0}
        worker = next(iter(failed), None)
        detail = self._log_tail(worker) if worker else ""
        return self._exit(1, f"workers failed {failed}: {detail}".strip())

    def _checkpoints(self) -> list[str]:
        ckpt = self.dir.result / "checkpoint"
        return sorted(p.name for p in ckpt.glob("*.pt")) if ckpt.is_dir() else []

    def _log_tail(self, worker: str, limit: int = 1500) -> str:
        try:
            data = (self.dir.logs / f"{worker}.out").read_bytes()[-limit:]
        except FileNotFoundError:
            return ""
        return data.decode(errors="replace").strip()

    def _exit(self, code: int, error: str | None) -> int:
        if self.status["state"] not in ("suspended", "exited"):
            self.status["state"] = "failed" if code else "exited"
        self.status["exit_code"] = code
        if error:
            self.status["error"] = error
        self._report()
        return code

    def _report(self) -> None:
        if self.ctl is not None:
            self.status["generation"] = self.ctl.ctl["gen"]
            members = [w for w in self.ctl.members if w in self.device_of]
            self.status["workers"] = {w: self.device_of[w]["id"] for w in members}
            self.status["pids"] = {w: self.ctl.procs[w].pid for w in members}
        self.dir.write_status(self.status)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m jupyter_edt.runtime.driver <job dir>", file=sys.stderr)
        return 2
    driver = Driver(Path(args[0]))

    def stop(signum: int, _frame: object) -> None:
        # cancel: the launcher signals the whole process group; leave through `finally`
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    return driver.run()


if __name__ == "__main__":
    sys.exit(main())
