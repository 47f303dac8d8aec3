"""A job's driver: ``python -m jupyter_edt.runtime.driver <job dir>``.

One per job, on the service's machine. It hosts the job's rendezvous (through
``LocalController``), starts one worker per device through the same ``Launcher`` interface
the server starts drivers with (``launch/``), and carries out the orders the server writes
into the job directory: a new device set (grow, shrink, move) or "suspend" (checkpoint, then
stop). It reports in ``status.json``. A worker that dies is dropped at once by the controller and
the job trains on with the others. After a short rest its device gets a new worker, so a job
keeps the devices it was given; a device whose worker fails again (a GPU that is failing) is
left idle until the orders take it away and give it back, and the job carries on without it.
Retries are bounded, so a program that fails everywhere fails the job with its error.

Every worker gets torchrun's environment (``environment.torchrun_environment``), so a program
written for torchrun forms its group unchanged. What a change does to the job depends on its
kind (``job.json``'s ``kind``), unless its program announces the elastic runtime (its workers'
first generation has formed, ``formed/<g>``; ``status.json`` then says ``"elastic": true``),
which makes any job elastic:

- ``elastic``: resized in place by the runtime. One whose program never announces it (a plain
  script) runs on the devices it started with: a worker that fails fails the job, and a
  suspension stops it at once, since it cannot checkpoint.
- ``restart``: a new allocation, or a worker that fails (``max_restarts`` times over the
  job's life), restarts every worker (``LocalController.restart``): SIGTERM, ``restart_grace_s``
  to checkpoint and exit, SIGKILL, then all of them at the new size. A suspension stops them
  the same way. ``status.json``'s ``restart_history`` says what each restart did.
- ``rigid``: the devices it started with; a worker that fails fails the job; a suspension
  gives its workers the grace to checkpoint.

Exit status: 0 when the job's last workers all finished training (or it was suspended), 1 when
training failed; the reason is in ``status.json`` under ``error`` and ``state`` is ``failed``:
the program's exception with the user's frame and the workers that raised it
(``failures.failure_reason``).
Any other end (a signal, an exit without that report) is the driver's own failure, which the
server may recover from the job's newest checkpoint.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..launch import workers_launcher
from ..launch.local import merged_log_path
from .control import LocalController, Placement, WorkerCrashed
from .environment import JOB_ENV_KEY
from .failures import error_from_log, failure_reason, read_error
from .jobdir import JobDir, checkpoints, process_start_time, read_json
from .store_keys import formed_key

TICK_S = 0.1
MAX_REPLACEMENTS = 3  # new workers on devices whose worker failed, over the job's life
MAX_DEVICE_FAILURES = 2  # failed workers on one device before it is left idle
# A failed worker's device rests this long before a new worker starts on it: a lost GPU takes
# its worker down first, and the server's order to give it up follows within a reading or two.
REPLACE_DELAY_S = 1.0
SUSPEND_TIMEOUT_S = 120.0
#: How long a worker of a restart or rigid job has, after SIGTERM, to checkpoint and exit.
RESTART_GRACE_S = 30.0
#: Restarts of a restart job after a worker failed, over the job's life (a resize is free).
MAX_RESTARTS = 3
MAX_HISTORY = 20  # restarts kept in status.json
#: How long, after a worker of a rigid or restart job failed for good, the others have to fail
#: too before the reason is written (they usually raise the same error in the same step).
FAILURE_GRACE_S = 1.0


def placement(device: Mapping[str, Any]) -> Placement:
    """Where the worker on `device` runs: the device's node (a cluster launcher pins it there;
    a local one has one node), holding that one GPU."""
    return Placement(node=device.get("node"), gpus=1)


def device_env(device: Mapping[str, Any]) -> dict[str, str]:
    """A worker's view of its device: one GPU, or none for a virtual device (a CPU slot).

    A GPU is named by its UUID when it has one: NVML indices shift when a GPU disappears and
    need not follow CUDA's order, a UUID names the same GPU for both.
    """
    if device["virtual"]:
        visible = ""
    elif uuid := device.get("uuid"):
        visible = uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"
    else:
        visible = str(device["index"])
    return {"CUDA_VISIBLE_DEVICES": visible, "EDT_DEVICE_ID": str(device["id"])}


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
            "elastic": False,
            "generation": 0,
            "workers": {},
            "restarts": 0,
        }
        self.kind = str(job.get("kind", "elastic"))
        self.grace_s = float(job.get("restart_grace_s", RESTART_GRACE_S))
        self.max_restarts = int(job.get("max_restarts", MAX_RESTARTS))
        self.gang: tuple[str, ...] = ()  # the workers of the newest start (non-elastic)
        self.failed_restarts = 0  # restarts after a worker failed
        self.devices: list[dict[str, Any]] = []  # the devices the server gave the job
        self.device_of: dict[str, dict[str, Any]] = {}  # worker id -> device
        self.orders_seq = 0
        self.replacements = 0
        self.device_failures: dict[str, int] = {}  # device id -> workers failed on it
        self.failed_at: dict[str, float] = {}  # device id -> monotonic time of the last failure
        self.failures_seen = 0  # controller failure records already counted
        self.lost_with_node = 0  # workers lost with their node (not charged to the devices)
        self.formed_gen = 0  # the newest generation reported as formed
        self.moving_gen: int | None = None  # a move waits for this generation's state transfer
        self.ctl: LocalController | None = None

    # life ---------------------------------------------------------------------------------

    def run(self) -> int:
        self._report()
        orders = self.dir.read_orders() or {}
        self.orders_seq = orders.get("seq", 0)
        devices = orders.get("devices", [])
        if orders.get("action") != "run" or not devices:
            return self._exit(1, "the driver started without devices to run on")
        launcher = workers_launcher()  # the kind that started this driver
        self.ctl = LocalController(
            self.job["program"],
            self.dir.result,
            log_dir=self.dir.logs,
            cwd=self.dir.code,
            timeout_s=float(os.environ.get("EDT_TIMEOUT_S", "10")),
            job_id=self.job["id"],
            env=self.job.get(JOB_ENV_KEY, {}),  # every worker's, on any node
            launcher=launcher,
            store_host=launcher.reachable_host(),
            job_dir=self.dir.root,  # copied to nodes that do not share this file system
            max_restarts=self.max_restarts if self.kind == "restart" else 0,
        )
        try:  # from here on, a stop stops whatever workers have started
            self.devices = devices
            ids = self.ctl.start(
                len(devices), [device_env(d) for d in devices], [placement(d) for d in devices]
            )
            self.device_of = dict(zip(ids, devices, strict=True))
            self.gang = ids
            self.status["state"] = "running"  # its processes are up; elastic once they form
            self._report()
            return self._loop()
        finally:
            self.ctl.close()

    def _loop(self) -> int:
        assert self.ctl is not None
        ctl = self.ctl
        while True:
            if not self.dir.job.exists():
                return self._abandoned()
            turned = not self.elastic and ctl.store.check([formed_key(ctl.ctl["gen"])])
            if turned:
                self.status["elastic"] = True  # the runtime announced itself
            # one report with the group that formed: the service never sees the job elastic
            # (and resizes it) before it has recorded its first group
            if not self._note_formed() and turned:
                self._report()
            orders = self.dir.read_orders() or {}
            if orders.get("seq", 0) > self.orders_seq:
                self.orders_seq = orders["seq"]
                if orders["action"] == "suspend":
                    return self._suspend()
                self._apply(orders["devices"])
            if all(p.returncode is not None for p in ctl.procs.values()):
                if self.kind == "restart" and not self.elastic:
                    error = self._restart_if_needed()  # a failure it may yet start again from
                    if error is not None:
                        return self._exit(1, error)
                    if any(p.returncode is None for p in ctl.procs.values()):
                        continue
                return self._finished()
            vanished = [w for w in self.gang if ctl.procs[w].vanished]
            if vanished and not self.elastic:
                ctl.close()  # nothing carries on without them; the job runs again elsewhere
                return self._lost(vanished)
            if self.elastic:
                error = self._reconcile()
            elif self.kind == "restart":
                error = self._restart_if_needed()
            else:
                error = self._rigid_failure()
            if error is not None:
                return self._exit(1, error)
            time.sleep(TICK_S)

    def _note_formed(self) -> bool:
        """Report a generation that formed since the last report (the service records when
        its devices started training, and the survivors' pause); whether it did."""
        assert self.ctl is not None
        gen = self.ctl.ctl["gen"]
        if gen <= self.formed_gen or not self.ctl.store.check([formed_key(gen)]):
            return False
        self.formed_gen = gen
        info = json.loads(self.ctl.store.get(formed_key(gen)))
        self.status["formed"] = {
            "generation": gen,
            "world_size": info.get("world_size"),
            "pause_s": info.get("pause_s"),
            "time": time.time(),
        }
        self._report()
        return True

    @property
    def elastic(self) -> bool:
        return bool(self.status["elastic"])

    # orders -------------------------------------------------------------------------------

    def _apply(self, devices: list[dict[str, Any]]) -> None:
        """Take these devices as the job's allocation; :meth:`_reconcile` moves the workers.

        A device that left the allocation and comes back is tried afresh: the server dealt it
        out again because it answers again. A rigid job cannot move: the server never sends it
        other devices, and if it did they wait until the runtime announces itself."""
        self.devices = devices
        wanted = {d["id"] for d in devices}
        for device_id in [d for d in self.device_failures if d not in wanted]:
            del self.device_failures[device_id]
            self.failed_at.pop(device_id, None)
        self._report()

    def _reconcile(self) -> str | None:
        """Bring the workers to the allocation: keep the workers on devices that stay, start
        one worker per vacant device that may take one, and let the workers on devices taken
        away leave. Returns an error when the job cannot go on."""
        assert self.ctl is not None
        ctl = self.ctl
        self._count_failures()
        members = ctl.members
        if not members:
            return None  # nobody left to carry the state: once all have exited, it has failed
        if any(ctl.procs[w].returncode == 0 for w in members):
            return None  # a member finished training: the job is ending, nobody new joins it
        if self.moving_gen is not None:
            formed = {self.moving_gen, ctl.ctl["gen"]}
            if not any(ctl.store.check([formed_key(g)]) for g in formed):
                return None  # the newcomers have not received the state yet
            self.moving_gen = None
        wanted = {d["id"] for d in self.devices}
        keep = [w for w in members if self.device_of[w]["id"] in wanted]
        held = {self.device_of[w]["id"] for w in keep}
        vacant = [d for d in self.devices if d["id"] not in held]
        new = [d for d in vacant if self._may_start(d)]
        if not new and len(keep) == len(members):
            return None
        if not keep and not new:
            retry = self.replacements < MAX_REPLACEMENTS and any(
                self.device_failures.get(d["id"], 0) < MAX_DEVICE_FAILURES for d in vacant
            )
            if retry:
                return None  # a device of the allocation rests before its next try
            tries = ", ".join(f"{d} {n}" for d, n in sorted(self.device_failures.items()))
            why = self._why(self._failed_workers())
            return f"{why}; no device of the allocation could run a worker (failures: {tries})"
        moving = not keep
        self.replacements += sum(1 for d in new if d["id"] in self.device_failures)
        # A job moved to all-new devices grows onto them first, so the joiners receive the
        # state from the workers that leave once it has formed; otherwise nobody would hold it.
        try:
            gen, joiners = ctl.resize(
                list(members) if moving else keep,
                [device_env(d) for d in new],
                wait=False,
                placements=[placement(d) for d in new],
            )
        except WorkerCrashed as err:
            for w, d in zip(err.joiners, new, strict=True):
                self.device_of[w] = d
                if w in err.codes and not ctl.procs[w].vanished:
                    self._failed_on(d["id"])
            self._report()
            return None
        for w, d in zip(joiners, new, strict=True):
            self.device_of[w] = d
        if moving:
            self.moving_gen = gen
        self._report()
        return None

    def _rigid_failure(self) -> str | None:
        """A rigid job's worker that failed fails the job: nothing carries on without it, and
        its peers would wait for it (as torchrun without elasticity does)."""
        if self._failed_worker() is None:
            return None
        return self._why(self._gang_failures())

    def _failed_worker(self) -> tuple[str, int] | None:
        """The first worker of the newest start that exited with an error, and its status."""
        assert self.ctl is not None
        for w in self.gang:
            if (code := self.ctl.procs[w].returncode) not in (None, 0):
                return w, code
        return None

    def _restart_if_needed(self) -> str | None:
        """A restart job starts all its workers again on a new allocation, and after a worker
        failed while restarts are left (torchrun's ``--max-restarts``); past them, the failure
        fails the job with the program's own error."""
        assert self.ctl is not None
        held = sorted(self.device_of[w]["id"] for w in self.gang)
        if held != sorted(d["id"] for d in self.devices):
            self._restart("resize", f"resized from {len(held)} to {len(self.devices)} GPU(s)")
            return None
        failed = self._failed_worker()
        if failed is None:
            return None
        w, _ = failed
        if self.failed_restarts >= self.max_restarts:
            why = self._why(self._gang_failures())
            return f"{why}, at every start ({self.max_restarts} restart(s) allowed)"
        self.failed_restarts += 1
        self._restart(
            "failure",
            f"{self._why([w])} (restart {self.failed_restarts} of {self.max_restarts})",
        )
        return None

    def _restart(self, reason: str, detail: str) -> None:
        """Stop every worker (SIGTERM, the grace, SIGKILL) and start them all on the job's
        devices; ``status.json``'s ``restart`` says why and how the workers ended."""
        assert self.ctl is not None
        asked = time.time()
        devices = self.devices
        ids, ended = self.ctl.restart(
            [device_env(d) for d in devices], [placement(d) for d in devices], grace_s=self.grace_s
        )
        self.device_of.update(zip(ids, devices, strict=True))
        self.gang = ids
        self.status["restarts"] = self.ctl.restarts
        restart = {
            "count": self.ctl.restarts,
            "reason": reason,
            "detail": detail,
            "world_size": len(ids),
            "exited": {w: self.ctl.procs[w].returncode for w in ended["exited"]},
            "killed": ended["killed"],
            "grace_s": self.grace_s,
            "asked": asked,
            "started": time.time(),
        }
        # every restart, so a reader polling slower than the restarts come misses none
        history = self.status.setdefault("restart_history", [])
        history[:] = [*history, restart][-MAX_HISTORY:]
        self._report()

    def _may_start(self, device: Mapping[str, Any]) -> bool:
        """Whether a vacant device may get a worker now: not on a node that is gone or whose
        workers just vanished (`Launcher.available`), not one that keeps failing, not right
        after a failure, and not beyond the job's budget of replacements."""
        assert self.ctl is not None
        if not self.ctl.launcher.available(device.get("node")):
            return False
        device_id = device["id"]
        failures = self.device_failures.get(device_id, 0)
        if failures == 0:
            return True
        if failures >= MAX_DEVICE_FAILURES or self.replacements >= MAX_REPLACEMENTS:
            return False
        return time.monotonic() - self.failed_at[device_id] >= REPLACE_DELAY_S

    def _count_failures(self) -> None:
        """Charge each worker the controller dropped as dead to its device; not one lost with
        its node (`vanished`): the program did not fail there, and the job's replacements are
        kept for a program that does."""
        assert self.ctl is not None
        records = self.ctl.failures[self.failures_seen :]
        self.failures_seen += len(records)
        for record in records:
            for w in record["dead"]:
                if self.ctl.procs[w].vanished:
                    self.lost_with_node += 1
                elif w in self.device_of:
                    self._failed_on(self.device_of[w]["id"])

    def _failed_on(self, device_id: str) -> None:
        self.device_failures[device_id] = self.device_failures.get(device_id, 0) + 1
        self.failed_at[device_id] = time.monotonic()

    def _failed_workers(self) -> list[str]:
        """Every worker of the job that failed, not those lost with their node."""
        assert self.ctl is not None
        procs = self.ctl.procs
        return [w for w, p in procs.items() if p.returncode not in (None, 0) and not p.vanished]

    def _gang_failures(self) -> list[str]:
        """The workers of the newest start that failed, once those still running have had
        `FAILURE_GRACE_S` to fail as well: a program's error is usually every worker's, and
        the reason names them all."""
        assert self.ctl is not None
        procs = self.ctl.procs
        deadline = time.monotonic() + FAILURE_GRACE_S
        while any(procs[w].returncode is None for w in self.gang) and time.monotonic() < deadline:
            time.sleep(TICK_S / 2)
        return [w for w in self.gang if procs[w].returncode not in (None, 0)]

    def _why(self, workers: Iterable[str]) -> str:
        """The job's reason for these failed workers: the exceptions they reported, else the end
        of their logs (`failures`)."""
        assert self.ctl is not None
        root = str(self.dir.code)
        errors = []
        for w in workers:
            error = read_error(self.dir.logs, w, self.ctl.run)
            if error is None:
                tail = self._log_tail(w, 8000)
                error = error_from_log(tail, w, self.ctl.procs[w].returncode, root)
            errors.append(error)
        return failure_reason(errors)

    def _suspend(self) -> int:
        """Checkpoint at the next step boundary, then stop every worker. A rigid job cannot
        checkpoint: it stops at once (``"checkpointed": false``) and starts over later."""
        assert self.ctl is not None
        self.status["state"] = "suspending"
        self._report()
        if not self.elastic and self.kind in ("restart", "rigid"):
            # SIGTERM: a program with an integration checkpoints and exits 0 within the grace
            self.ctl.terminate(self.gang, self.grace_s)
            clean = all(self.ctl.procs[w].returncode == 0 for w in self.gang)
            self.ctl.close()
            self.status.update(state="suspended", checkpointed=clean)
            return self._exit(0, None)
        if not self.elastic:
            self.ctl.close()
            self.status.update(state="suspended", checkpointed=False)
            return self._exit(0, None)
        before = self._checkpoints()
        self.ctl.request_checkpoint()
        deadline = time.monotonic() + SUSPEND_TIMEOUT_S
        while self._checkpoints() == before and time.monotonic() < deadline:
            if all(p.returncode is not None for p in self.ctl.procs.values()):
                break
            time.sleep(TICK_S)
        checkpointed = self._checkpoints() != before
        self.ctl.close()
        self.status.update(state="suspended", checkpointed=checkpointed)
        return self._exit(0, None)

    # reports ------------------------------------------------------------------------------

    def _finished(self) -> int:
        assert self.ctl is not None
        # a job restarted ends with its newest start; the workers stopped before are past
        ended = self.ctl.procs if self.elastic else self.gang
        codes = {w: self.ctl.procs[w].returncode for w in ended}
        last = self.ctl.members if self.elastic else self.gang
        if last and all(codes[w] == 0 for w in last):
            self.status["state"] = "exited"
            return self._exit(0, None)
        failed = {w: c for w, c in codes.items() if c != 0}
        if failed and all(self.ctl.procs[w].vanished for w in failed):
            return self._lost(sorted(failed))
        return self._exit(1, self._why(w for w in failed if not self.ctl.procs[w].vanished))

    def _lost(self, workers: list[str]) -> int:
        """Every worker the job had left was lost with its node: the program did not fail,
        the place it ran did. Reported as ``lost`` (exit 1, no ``error``), so the service
        takes the job back as it does a job whose driver died: it resumes from its newest
        checkpoint on the GPUs it is given next."""
        nodes = sorted({str(self.device_of[w].get("node") or "")[:8] for w in workers})
        self.status["state"] = "lost"
        self.status["lost"] = f"its workers were lost with their node(s) {', '.join(nodes)}"
        return self._exit(1, None)

    def _checkpoints(self) -> list[str]:
        return [p.name for p in checkpoints(self.dir.checkpoints)]

    def _log_tail(self, worker: str, limit: int = 1500) -> str:
        try:
            data = merged_log_path(self.dir.logs, worker).read_bytes()[-limit:]
        except FileNotFoundError:
            return ""
        return data.decode(errors="replace").strip()

    def _abandoned(self) -> int:
        """The job was deleted (its directory removed): stop every worker and leave without a
        report, which would only recreate the directory (``close`` stops the workers)."""
        print("the job directory was removed: stopping the job's workers", file=sys.stderr)
        return 1

    def _exit(self, code: int, error: str | None) -> int:
        if self.status["state"] not in ("suspended", "exited", "lost"):
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
            self.status["device_failures"] = dict(self.device_failures)
            self.status["replacements"] = self.replacements
            self.status["lost_with_node"] = self.lost_with_node
        self.dir.write_status(self.status)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m jupyter_edt.runtime.driver <job dir>", file=sys.stderr)
        return 2
    driver = Driver(Path(args[0]))

    def stop(signum: int, _frame: object) -> None:
        # cancel: leave through `run`'s `finally`, which stops the workers (a start cut short
        # stops those it started itself: `Launcher.start_all_sync`)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    return driver.run()


if __name__ == "__main__":
    sys.exit(main())
