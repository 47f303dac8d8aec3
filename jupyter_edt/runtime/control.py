"""The control interface between a job's controller (the driver) and its workers.

Everything goes through one ``torch.distributed.TCPStore`` that the controller hosts; workers
connect to it as clients (``EDT_STORE=host:port``). Keys:

Orders (written by the controller)
  ``ctl``               JSON ``{"gen": g, "hold": step, "ckpt": n}``: the newest generation, a
                        global step before which workers pause (-1: none), and a counter of
                        checkpoint requests. Workers read it once per global step.
  ``members/<g>``       JSON list of worker ids in rank order: the target worker set of
                        generation ``g``. Written before ``ctl.gen`` is raised to ``g``.
  ``release/<step>``    lets workers paused at ``hold`` continue.

Reports (written by workers)
  ``ready/<worker>``    a launched worker has imported and built its model and waits to join.
  ``formed/<g>``        JSON from rank 0 once generation ``g`` has formed and synced its state
                        (``pause_s``, ``world_size``, ``resumed_step``).
  ``failed/<g>``        counter: a collective of generation ``g`` failed (dead or stuck peer).
  ``held/<step>/<worker>`` a worker has paused at ``hold``.
  ``hb/<worker>``       counter a CUDA worker bumps every 0.25 s (NCCL never fails on a dead
                        peer by itself, so survivors watch heartbeats; see ``group.py``).
  Events (loss, metrics, samples/s, world size, generation) go to per-worker JSON-lines files in
  the job's log directory (see ``events.py``).

Rules: an order takes effect at the first global-step boundary after the step during which every
worker has seen it (workers agree through the step's reduction). Survivors keep their process,
joiners receive the state from a peer, workers left out of ``members/<g>`` exit with status 0.
A worker that dies is dropped by the controller publishing a generation without it.

``LocalController`` implements the controller side: it hosts the store here and starts, watches
and stops the workers through a ``Launcher`` (``launch/``), by default as this machine's child
processes; the driver uses it for a job, tests and the benchmark on their own.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from ..launch.base import Launcher, ProcessHandle, ProcessSpec
from ..launch.local import LocalLauncher
from .environment import Rendezvous, rank_order, torchrun_environment, worker_environment
from .store_keys import (
    CTL,
    failed_key,
    formed_key,
    held_key,
    members_key,
    ready_key,
    release_key,
)

__all__ = ["LocalController", "Placement", "WorkerCrashed"]

#: How much lower a joiner's CPU priority is while it prepares (it restores its own as it
#: joins): the job's training processes go first on cores they share with it.
JOINER_NICE = 10
#: How long after a worker reports a failed collective the controller waits for a death that
#: caused it to be seen, before it takes the group for stuck and forms it again.
STUCK_GRACE_S = 0.25
#: How long a member's launcher may leave a question unanswered, once the member's group has
#: failed, before the member counts as lost (its node crashed: nobody will ever answer).
LOST_SILENCE_S = 1.0


class WorkerCrashed(RuntimeError):
    """Workers the controller was waiting for exited with an error (``codes``: id -> status).

    ``joiners`` names the workers a failed :meth:`LocalController.resize` started (all of them
    are gone by then), so the caller can tell which of its devices failed.
    """

    def __init__(
        self, codes: Mapping[str, int], log_dir: Path, joiners: Sequence[str] = ()
    ) -> None:
        super().__init__(f"workers crashed: {dict(codes)}; see {log_dir}")
        self.codes = dict(codes)
        self.joiners = tuple(joiners)


@dataclass(frozen=True)
class Placement:
    """Where a worker runs, for a launcher that places processes (Ray): its node (None: the
    launcher's own) and how many GPUs it holds in the cluster's accounting."""

    node: str | None = None
    gpus: int = 0


class LocalController:
    """Launches a job's workers and drives their membership.

    ``program`` is the worker's command after ``python -m jupyter_edt.runtime.worker``: a script
    path and its arguments. The script builds a ``Trainer`` and calls ``fit``. ``launcher``
    starts, watches and stops the workers (default: child processes in this process's group,
    so that whoever stops this process's group stops them too); each worker's stdout and
    stderr go to ``<log_dir>/<worker>.out``. ``env`` is the job's environment, which every
    worker gets (the rule: ``environment.py``).
    """

    def __init__(
        self,
        program: Sequence[str],
        result_dir: str | os.PathLike[str],
        *,
        timeout_s: float = 10.0,
        env: dict[str, str] | None = None,
        python: str = sys.executable,
        log_dir: str | os.PathLike[str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        launcher: Launcher | None = None,
        job_id: str = "",
        store_host: str = "127.0.0.1",
        job_dir: str | os.PathLike[str] | None = None,
        max_restarts: int = 0,
    ) -> None:

        self.program = list(program)
        self.result_dir = Path(result_dir)
        self.log_dir = Path(log_dir) if log_dir is not None else self.result_dir / "logs"
        self.cwd = Path(cwd) if cwd is not None else Path.cwd()
        self.launcher = launcher if launcher is not None else LocalLauncher(own_session=False)
        self.job_id = job_id
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.timeout_s = timeout_s
        self.python = python
        # the job's environment (runtime/environment.py): given to every worker explicitly,
        # as a worker on another node inherits nothing from this process
        self.job_env = dict(env or {})
        # The store listens on every address; workers reach it at `store_host` (this node's
        # address, for workers on other nodes).
        self.store_host = store_host
        self.job_dir = Path(job_dir) if job_dir is not None else None
        # names this run of the job's workers in their events (jobs/metrics.py); a restart of
        # every worker is a new run, whose steps are reported anew
        self._run = secrets.token_hex(6)
        self.run = self._run
        self.store = self._new_store()
        self.port = self.store.port
        # torchrun's contract (environment.py): its store is a fresh one at each restart
        self.max_restarts = max_restarts
        self.restarts = 0
        self.rendezvous_store = self._new_store()
        self._gpu: dict[str, str] = {}  # worker -> its GPU's CUDA_VISIBLE_DEVICES entry
        self.ctl: dict[str, int] = {"gen": 0, "hold": -1, "ckpt": 0}
        self.store.set(CTL, json.dumps(self.ctl))
        self.procs: dict[str, ProcessHandle] = {}
        self._ended: set[str] = set()  # workers not in the group whose end has been seen
        self.members: tuple[str, ...] = ()
        self.membership: list[dict[str, Any]] = []
        self.failures: list[dict[str, Any]] = []
        self._next = 0
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._monitor = threading.Thread(target=self._watch, daemon=True)
        self._monitor.start()

    # -- orders ------------------------------------------------------------------------------
    def start(
        self,
        n: int,
        envs: Sequence[Mapping[str, str]] | None = None,
        placements: Sequence[Placement] | None = None,
    ) -> tuple[str, ...]:
        """Launch ``n`` workers as generation 1; ``envs[i]`` adds to worker i's environment
        (its device, for one), ``placements[i]`` says where it runs. Ranks go node by node
        (``environment.rank_order``); the ids come back in the order of ``envs``."""
        envs = envs if envs is not None else [{}] * n
        if len(envs) != n:
            raise ValueError(f"envs must have one entry per worker ({n}), got {len(envs)}.")
        places = _placements(placements, n)
        with self._lock:
            ids = tuple(self._new_id() for _ in range(n))
            self._start_group(ids, envs, places)
            return ids

    def restart(
        self,
        envs: Sequence[Mapping[str, str]],
        placements: Sequence[Placement] | None = None,
        *,
        grace_s: float = 30.0,
    ) -> tuple[tuple[str, ...], dict[str, list[str]]]:
        """Start every worker again, ``len(envs)`` of them, as torchrun's agent does on a
        change of membership: each worker gets SIGTERM (a program with an integration
        checkpoints and exits), whoever is left after ``grace_s`` SIGKILL, then the new
        workers start with ``TORCHELASTIC_RESTART_COUNT`` one higher, at a fresh store, as a
        new run. Returns the new ids (in the order of ``envs``) and who of the old workers
        ``exited`` within the grace (with their status) and who was ``killed``."""
        places = _placements(placements, len(envs))
        with self._lock:
            old = [w for w, p in self.procs.items() if p.returncode is None]
            self.members = ()  # the watcher leaves the group alone while it stops
            killed = self.terminate(old, grace_s)
            self._ended.update(self.procs)
            self.restarts += 1
            self.run = f"{self._run}.{self.restarts}"
            self.rendezvous_store = self._new_store()
            ids = tuple(self._new_id() for _ in envs)
            self._start_group(ids, envs, places)
        return ids, {"exited": [w for w in old if w not in killed], "killed": killed}

    def terminate(self, workers: Sequence[str], grace_s: float) -> list[str]:
        """SIGTERM to these workers, then SIGKILL to whoever is left after ``grace_s`` (as
        torchrun stops its workers); returns those killed."""
        for w in workers:
            self.procs[w].send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while any(self.procs[w].returncode is None for w in workers):
            if time.monotonic() >= deadline:
                break
            self._stop.wait(0.02)
        killed = [w for w in workers if self.procs[w].returncode is None]
        self._stop_workers(killed)
        return killed

    def _start_group(
        self,
        ids: Sequence[str],
        envs: Sequence[Mapping[str, str]],
        places: Sequence[Placement],
    ) -> None:
        """Publish ``ids`` as the next generation, in rank order, and launch them."""
        order = rank_order([p.node for p in places])
        self._publish(tuple(ids[i] for i in order))
        for w, env in zip(ids, envs, strict=True):
            self._gpu[w] = env.get("CUDA_VISIBLE_DEVICES", "")
        contract = self._torchrun(list(ids), list(places))
        self._launch(
            [
                self._spec(w, {**env, **contract[w]}, place)
                for w, env, place in zip(ids, envs, places, strict=True)
            ]
        )

    def _torchrun(self, workers: list[str], places: list[Placement]) -> dict[str, dict[str, str]]:
        """torchrun's variables for ``workers`` forming one group, placed at ``places``."""
        rendezvous = Rendezvous(
            master_addr=self.store_host,
            master_port=self.rendezvous_store.port,
            run_id=self.job_id or self._run,
            restart_count=self.restarts,
            max_restarts=self.max_restarts,
        )
        envs = torchrun_environment(
            [p.node for p in places], [self._gpu[w] for w in workers], rendezvous, self.job_env
        )
        return dict(zip(workers, envs, strict=True))

    def scale(self, n: int, *, wait: bool = True) -> int:
        """Grow or shrink to ``n`` workers; returns the new generation.

        Shrinking drops the most recent joiners; see :meth:`resize` for choosing who stays.
        """
        current = self.members
        gen, _ = self.resize(current[:n], [{}] * max(0, n - len(current)), wait=wait)
        return gen

    def resize(
        self,
        keep: Sequence[str],
        joiners: Sequence[Mapping[str, str]],
        *,
        wait: bool = True,
        placements: Sequence[Placement] | None = None,
    ) -> tuple[int, tuple[str, ...]]:
        """Keep the members in ``keep``, add one joiner per environment in ``joiners`` (placed
        by ``placements``, one each).

        Joiners are started first and the generation is published only once they are ready, so
        the running workers pause for the re-form and state transfer alone. Returns the new
        generation and the joiners' ids.

        A worker of ``keep`` that left the members meanwhile (it died, and the watcher dropped
        it after the caller read the members) is not kept: the caller sees it gone next time.
        """
        with self._lock:
            unknown = set(keep) - set(self.procs)
            if unknown:
                raise ValueError(f"keep names workers never started: {sorted(unknown)}")
            keep = [w for w in keep if w in self.members]
            places = _placements(placements, len(joiners))
            new = tuple(self._new_id() for _ in joiners)
            for w, env in zip(new, joiners, strict=True):
                self._gpu[w] = env.get("CUDA_VISIBLE_DEVICES", "")
            # a joiner sees torchrun's variables of the group it joins (only the runtime's
            # programs are resized in place, and they ignore them)
            group = [w for w in self.members if w in keep] + list(new)
            at = [Placement(node=self.procs[w].spec.node) for w in group[: len(group) - len(new)]]
            contract = self._torchrun(group, at + list(places))
            self._launch(
                [
                    self._spec(w, {**env, **contract[w]}, place, nice=JOINER_NICE)
                    for w, env, place in zip(new, joiners, places, strict=True)
                ]
            )
            if new:
                try:
                    self._wait_keys(
                        [ready_key(w) for w in new],
                        max(120.0, self.timeout_s),
                        among=new,
                        killed_too=True,
                    )
                except WorkerCrashed as err:
                    # one joiner failed: stop the others too, the running members never saw
                    # any of them, and the caller decides what to try next
                    self._stop_workers(new)
                    raise WorkerCrashed(err.codes, self.log_dir, new) from None
            target = tuple(w for w in self.members if w in keep) + new
            gen = self._publish(target)
        if wait:
            self.wait_formed(gen)
        return gen, new

    def hold(self, step: int) -> None:
        """Ask workers to pause before global step ``step`` (set it before they reach it)."""
        with self._lock:
            self.ctl["hold"] = step
            self.store.set(CTL, json.dumps(self.ctl))

    def wait_held(self, step: int, timeout_s: float = 120.0) -> None:
        """Block until every current member has paused at ``step``."""
        members = self.members
        self._wait_keys([held_key(step, w) for w in members], timeout_s, among=members)

    def release(self, step: int) -> None:
        self.store.set(release_key(step), "1")

    def request_checkpoint(self) -> None:
        """Workers write a checkpoint at the next agreed step boundary."""
        with self._lock:
            self.ctl["ckpt"] += 1
            self.store.set(CTL, json.dumps(self.ctl))

    def kill(self, worker: str, sig: int = signal.SIGKILL) -> None:
        """Signal one worker (a fault injected by a test or the benchmark)."""
        self.procs[worker].send_signal(sig)

    # -- reports -----------------------------------------------------------------------------
    def wait_formed(self, gen: int, timeout_s: float = 120.0) -> dict[str, Any]:
        """Block until generation ``gen`` has formed; returns rank 0's report."""
        of_gen = [m["members"] for m in self.membership if m["gen"] == gen]
        self._wait_keys([formed_key(gen)], timeout_s, among=of_gen[0] if of_gen else None)
        return json.loads(self.store.get(formed_key(gen)))

    def wait(self, timeout_s: float = 300.0) -> dict[str, int]:
        """Block until every launched worker has exited; returns their exit codes."""
        deadline = time.monotonic() + timeout_s
        codes = {}
        for w, p in list(self.procs.items()):
            codes[w] = p.wait_sync(max(0.1, deadline - time.monotonic()))
        return codes

    def pids(self) -> dict[str, int]:
        return {w: p.pid for w, p in self.procs.items()}

    def events(self) -> list[dict[str, Any]]:
        """Every worker event so far, in time order (see ``events.read_events``)."""
        from .events import read_events

        return read_events(self.log_dir)

    def close(self) -> None:
        """Stop watching and kill any worker still running."""
        self._stop.set()
        self._monitor.join(timeout=5)
        self._stop_workers(list(self.procs))

    def __enter__(self) -> LocalController:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ---------------------------------------------------------------------------
    def _new_store(self) -> Any:
        import torch.distributed as dist

        return dist.TCPStore(
            self.store_host,
            0,
            is_master=True,
            wait_for_workers=False,
            timeout=timedelta(seconds=60),
        )

    def _new_id(self) -> str:
        self._next += 1
        return f"w{self._next - 1}"

    def _wait_keys(
        self,
        keys: list[str],
        timeout_s: float,
        among: Sequence[str] | None = None,
        *,
        killed_too: bool = False,
    ) -> None:
        """Wait for store keys; fail early if one of the workers ``among`` (default: all)
        crashed. A SIGKILLed worker counts only with ``killed_too``: a member killed on purpose
        is dropped and replaced, but a joiner killed before it is ready will never be."""
        watched = list(self.procs) if among is None else list(among)
        deadline = time.monotonic() + timeout_s
        while not self.store.check(keys):
            crashed = {w: rc for w in watched if (rc := self.procs[w].returncode) not in (None, 0)}
            if not killed_too:
                crashed = {w: rc for w, rc in crashed.items() if rc != -signal.SIGKILL}
            if crashed:
                raise WorkerCrashed(crashed, self.log_dir)
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out waiting for {keys}")
            self._stop.wait(0.01)

    def _stop_workers(self, workers: Sequence[str]) -> None:
        """Kill these workers, one after the other (no grace: nobody waits for their end)."""
        for w in workers:
            p = self.procs[w]
            if p.returncode is None:
                self.launcher.stop_sync(p, grace=0)

    def _publish(self, members: tuple[str, ...]) -> int:
        gen = self.ctl["gen"] + 1
        self.store.set(members_key(gen), json.dumps(list(members)))
        self.ctl["gen"] = gen
        self.store.set(CTL, json.dumps(self.ctl))
        self.members = members
        self.membership.append({"gen": gen, "members": list(members), "time": time.time()})
        return gen

    def _launch(self, specs: Sequence[ProcessSpec]) -> None:
        """Start these workers together (`Launcher.start_all_sync`: side by side where a
        start waits on something remote)."""
        for spec, handle in zip(specs, self.launcher.start_all_sync(specs), strict=True):
            self.procs[spec.name] = handle

    def _spec(
        self,
        worker: str,
        worker_env: Mapping[str, str],
        place: Placement = Placement(),
        nice: int = 0,
    ) -> ProcessSpec:
        wiring = {
            "EDT_STORE": f"{self.store_host}:{self.port}",
            "EDT_WORKER_ID": worker,
            "EDT_RUN": self.run,
            "RESULT_DIR": str(self.result_dir),  # the job contract's name (jobs/runner.py)
            "EDT_LOG_DIR": str(self.log_dir),
            "EDT_TIMEOUT_S": str(self.timeout_s),
            # one machine: loopback; across nodes gloo finds the interface (or the deployment
            # sets GLOO_SOCKET_IFNAME)
            **_gloo_interface(self.store_host, self.job_env),
        }
        env = worker_environment(self.job_env, wiring, worker_env)
        return ProcessSpec(
            job_id=self.job_id,
            name=worker,
            argv=[self.python, "-m", "jupyter_edt.runtime.worker", *self.program],
            cwd=self.cwd,
            log_dir=self.log_dir,
            env=env,
            devices=None,  # the caller names a worker's device in its env (``device_env``)
            one_log=True,
            node=place.node,
            gpus=place.gpus,
            job_dir=self.job_dir,
            nice=nice,
        )

    def _watch(self) -> None:
        """Drop dead workers: publish a generation of the members still alive.

        A worker reporting a failed collective while every process is alive (a stuck peer, a
        timeout) also gets a new generation, after a grace period that lets a death that caused
        the report be seen first; a member whose launcher stays silent meanwhile (a node that
        crashed) is taken for lost then, rather than at the launcher's own, longer bound.
        """
        stuck_since: float | None = None
        while not self._stop.wait(0.02):
            with self._lock:
                self._reap_leavers()
                gen = self.ctl["gen"]
                if gen == 0 or not self.members:
                    continue
                if any(self.procs[w].returncode == 0 for w in self.members):
                    self._stop_late_joiners()
                    continue  # the job is ending: no new generation
                dead = [w for w in self.members if self.procs[w].returncode not in (None, 0)]
                if not dead:
                    if int(self.store.add(failed_key(gen), 0)) == 0:
                        stuck_since = None
                        continue
                    now = time.monotonic()
                    if stuck_since is None:  # not `or`: a monotonic time may be 0.0
                        stuck_since = now
                    if now - stuck_since < STUCK_GRACE_S:
                        continue
                settled = self._settle(dead)
                if settled is None:
                    continue  # a member's launcher has not answered yet: lost, or slow?
                dead = settled
                stuck_since = None
                alive = tuple(w for w in self.members if self.procs[w].returncode is None)
                self.failures.append({"gen": gen, "dead": dead, "time": time.time()})
                if alive:
                    self._publish(alive)
                else:
                    self.members = ()

    def _settle(self, dead: list[str]) -> list[str] | None:
        """Who of the members is gone, before a generation without them is published: the
        `dead` ones, and those their launcher takes too long to answer for (a node that
        crashed answers nothing), abandoned as lost: silent past `LOST_SILENCE_S`, and every
        member on a node whose processes vanished (a node dies with all its processes, not
        all of them at the same instant). None while another is silent for less than that (it
        may yet answer): a generation that still counted a dead member would fail to form only
        at the group's timeout. On one machine nobody is ever silent or vanishes."""
        gone = {self.procs[w].spec.node for w in dead if self.procs[w].vanished}
        silence = {w: self.procs[w].silent_s for w in self.members if w not in dead}
        lost: list[str] = []
        while True:
            more = [
                w
                for w, quiet in silence.items()
                if w not in lost and (quiet > LOST_SILENCE_S or self.procs[w].spec.node in gone)
            ]
            if not more:
                break
            lost += more
            gone |= {self.procs[w].spec.node for w in more}
        for w in lost:
            self.procs[w].abandon()
        if any(quiet > STUCK_GRACE_S for w, quiet in silence.items() if w not in lost):
            return None
        return dead + lost

    def _stop_late_joiners(self) -> None:
        """A member finished training, so the job is over; joiners of a generation that has
        not formed (ordered just before the end) would wait for members that never come, then
        form a group of their own with nobody holding the state and start the job over. They
        are stopped, and the members that trained are the job's last."""
        formed = next(
            (m for m in reversed(self.membership) if self.store.check([formed_key(m["gen"])])),
            None,
        )
        if formed is None:
            return  # no generation ever formed: not the elastic runtime's workers
        trained = set(formed["members"])
        late = [w for w in self.members if w not in trained]
        if late:  # no longer members before they are seen to end
            self.members = tuple(w for w in self.members if w in trained)
            self._stop_workers(late)

    def _reap_leavers(self) -> None:
        """See the end of workers that left the group: a cluster launcher then frees what
        they held (their GPUs) and copies back what they wrote last, not at the job's end."""
        for w in [w for w in self.procs if w not in self.members and w not in self._ended]:
            if self.procs[w].returncode is not None:
                self._ended.add(w)


def _placements(placements: Sequence[Placement] | None, n: int) -> Sequence[Placement]:
    if placements is None:
        return [Placement()] * n
    if len(placements) != n:
        raise ValueError(f"placements must have one entry per worker ({n}), got {len(placements)}.")
    return placements


def _gloo_interface(store_host: str, job_env: Mapping[str, str]) -> dict[str, str]:
    """The interface gloo binds: the job's or this process's choice, else loopback when every
    worker reaches the store there (one machine)."""
    chosen = job_env.get("GLOO_SOCKET_IFNAME") or os.environ.get("GLOO_SOCKET_IFNAME")
    if chosen:
        return {"GLOO_SOCKET_IFNAME": chosen}
    return {"GLOO_SOCKET_IFNAME": "lo"} if store_host.startswith("127.") else {}
