"""The fork server: warm processes that behave as cold ones, die with whom they must, leave
nothing behind, and never pass from one account to another."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from waiting import eventually_sync

from jupyter_edt.launch.base import ProcessSpec
from jupyter_edt.launch.forkserver import ForkServer
from jupyter_edt.launch.local import ForkedProcess, LocalLauncher, LocalProcess
from jupyter_edt.runtime import LocalController
from jupyter_edt.runtime.jobdir import process_start_time

# What a process says of itself: argv, a variable of its environment, its directory, and
# whether a process before it left a mark in torch (a process passed on would carry it).
PROBE = textwrap.dedent(
    """
    import json, os, sys, torch
    seen = getattr(torch, "_edt_marked_by", None)
    torch._edt_marked_by = os.environ.get("WHO")
    print(json.dumps({"argv": sys.argv[1:], "who": os.environ.get("WHO"), "cwd": os.getcwd(),
                      "seen": seen, "uid": os.getuid(), "environ": open("/proc/self/environ",
                      "rb").read().decode(errors="replace")}))
    print("to stderr", file=sys.stderr)
    sys.exit(int(os.environ.get("CODE", "0")))
    """
)
SLEEPER = "import time\ntime.sleep(300)\n"


@pytest.fixture(scope="module")
def forkserver():
    server = ForkServer()
    server.start({**os.environ, "EDT_TEST_SECRET": "not for jobs"})
    assert server.wait_ready(120), "the fork server preloaded"
    yield server
    server.stop()


def spec(tmp_path: Path, name: str, program: str, **env: str) -> ProcessSpec:
    path = tmp_path / f"{name}.py"
    path.write_text(program)
    return ProcessSpec(
        job_id="j",
        name=name,
        argv=[sys.executable, "-m", "jupyter_edt.runtime.worker", str(path), "--flag"],
        cwd=tmp_path,
        log_dir=tmp_path / "logs",
        env=env,
        one_log=False,
    )


def said(tmp_path: Path, name: str) -> dict:
    return json.loads((tmp_path / "logs" / f"{name}.stdout").read_text())


def children_of(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def test_a_warm_process_runs_as_a_cold_one_would(forkserver, tmp_path):
    warm = LocalLauncher(forkserver=forkserver.name).start_sync(
        spec(tmp_path, "warm", PROBE, WHO="warm", CODE="3")
    )
    cold = LocalLauncher().start_sync(spec(tmp_path, "cold", PROBE, WHO="cold", CODE="3"))
    assert isinstance(warm, ForkedProcess) and isinstance(cold, LocalProcess)
    assert warm.wait_sync(60) == 3 and cold.wait_sync(120) == 3
    ours, theirs = said(tmp_path, "warm"), said(tmp_path, "cold")
    assert ours["argv"] == theirs["argv"] == ["--flag"]
    assert (ours["who"], ours["cwd"]) == ("warm", str(tmp_path))
    assert ours["seen"] is None  # a fresh process, never another's
    assert (tmp_path / "logs" / "warm.stderr").read_text() == "to stderr\n"
    # the server started with the service's environment's safe part only: its memory, which
    # every child shares, holds no secret of the service
    assert "EDT_TEST_SECRET" not in ours["environ"]


def test_processes_are_never_passed_on_from_one_job_to_the_next(forkserver, tmp_path):
    launcher = LocalLauncher(forkserver=forkserver.name)
    pids = set()
    for who in ("alice", "bob", "alice"):
        handle = launcher.start_sync(spec(tmp_path, f"{who}{len(pids)}", PROBE, WHO=who))
        assert handle.wait_sync(60) == 0
        assert said(tmp_path, f"{who}{len(pids)}")["seen"] is None
        pids.add(handle.pid)
    assert len(pids) == 3


def test_a_drivers_workers_die_with_it_and_its_stop_kills_them(forkserver, tmp_path):
    # a "driver": a process of its own with a launcher like a driver's, which starts a worker
    # and a process that leads its own session (as the service's drivers do), then is killed
    driver = tmp_path / "driver.py"
    driver.write_text(
        textwrap.dedent(
            f"""
            import sys, time
            from pathlib import Path
            from jupyter_edt.launch.base import ProcessSpec
            from jupyter_edt.launch.local import LocalLauncher
            def spec(name):
                path = Path({str(tmp_path)!r}) / "sleeper.py"
                path.write_text({SLEEPER!r})
                return ProcessSpec(job_id="j", name=name, cwd=path.parent,
                    argv=[sys.executable, "-m", "jupyter_edt.runtime.worker", str(path)],
                    log_dir=path.parent / "logs")
            worker = LocalLauncher(own_session=False, forkserver={forkserver.name!r})
            kept = LocalLauncher(own_session=True, forkserver={forkserver.name!r})
            print(worker.start_sync(spec("w0")).pid, kept.start_sync(spec("kept")).pid,
                  flush=True)
            time.sleep(300)
            """
        )
    )
    proc = subprocess.Popen([sys.executable, str(driver)], stdout=subprocess.PIPE, text=True)
    worker, kept = (int(p) for p in proc.stdout.readline().split())
    assert {worker, kept} <= set(children_of(forkserver.process.pid))
    proc.kill()
    proc.wait(timeout=30)
    eventually_sync(lambda: process_start_time(worker) is None, "the worker died with its driver")
    assert process_start_time(kept) is not None  # a job's driver outlives whoever started it
    os.killpg(kept, signal.SIGKILL)

    # a stop reaches the process (and its group), and its exit code comes back
    launcher = LocalLauncher(own_session=False, forkserver=forkserver.name)
    sleeper = launcher.start_sync(spec(tmp_path, "stopped", SLEEPER))
    assert isinstance(sleeper, ForkedProcess)
    assert launcher.stop_sync(sleeper, grace=5) == -signal.SIGTERM


def test_a_forked_drivers_end_is_seen_once_its_workers_are_gone(forkserver, tmp_path):
    """The service deletes a job's files, or gives its GPUs to another job, once it sees the
    driver end: its workers must have ended by then. Here the driver's connection to the
    server outlives it (a process it forked holds it), so only its end says they must go."""
    program = textwrap.dedent(
        f"""
        import os, sys, time
        from pathlib import Path
        from jupyter_edt.launch.base import ProcessSpec
        from jupyter_edt.launch.local import LocalLauncher
        path = Path({str(tmp_path)!r}) / "sleeper.py"
        path.write_text({SLEEPER!r})
        workers = LocalLauncher(own_session=False, forkserver={forkserver.name!r})
        worker = workers.start_sync(ProcessSpec(job_id="j", name="w0", cwd=path.parent,
            argv=[sys.executable, "-m", "jupyter_edt.runtime.worker", str(path)],
            log_dir=path.parent / "logs"))
        connection = workers._client._sock.fileno()
        holder = os.fork()
        if holder == 0:  # a process of its own, holding the driver's connection (only)
            os.setsid()
            os.closerange(3, connection)
            os.closerange(connection + 1, 1 << 16)
            time.sleep(300)
            os._exit(0)
        print(worker.pid, holder, flush=True)
        time.sleep(300)
        """
    )
    launcher = LocalLauncher(forkserver=forkserver.name)
    driver = launcher.start_sync(spec(tmp_path, "driver", program))
    assert isinstance(driver, ForkedProcess)
    out = tmp_path / "logs" / "driver.stdout"
    eventually_sync(lambda: out.exists() and out.read_text().endswith("\n"), "the driver started")
    worker, holder = (int(p) for p in out.read_text().split())
    try:
        driver.send_signal(signal.SIGKILL)
        assert driver.wait_sync(30) == -signal.SIGKILL
        assert process_start_time(worker) is None  # gone, not merely signalled
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(holder, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(worker, signal.SIGKILL)


def test_a_killed_fork_server_leaves_nothing_and_its_children_run_on(tmp_path):
    server = ForkServer()
    server.start()
    assert server.wait_ready(120)
    launcher = LocalLauncher(forkserver=server.name)
    running = launcher.start_sync(
        spec(tmp_path, "running", "import time\ntime.sleep(2)\nraise SystemExit(5)\n")
    )
    assert isinstance(running, ForkedProcess)
    server.process.send_signal(signal.SIGKILL)
    server.process.wait(timeout=30)
    assert children_of(server.process.pid) == []  # nothing idles in a fork server
    # the child goes on, and its own exit code still comes back
    assert running.wait_sync(60) == 5
    # with the server gone, a launcher starts processes cold
    cold = launcher.start_sync(spec(tmp_path, "cold", PROBE, WHO="cold"))
    assert isinstance(cold, LocalProcess) and cold.wait_sync(120) == 0


def test_a_job_started_warm_trains_to_the_same_parameters_as_a_cold_one(forkserver, tmp_path):
    program = str(Path(__file__).parents[1] / "runtime" / "programs" / "tiny.py")
    args = [program, "--epochs", "2", "--batch", "12", "--micro", "3"]
    env = {"CUDA_VISIBLE_DEVICES": "", "EDT_BUCKET_BYTES": "256"}
    models = {}
    for kind, launcher in (
        ("cold", LocalLauncher(own_session=False)),
        ("warm", LocalLauncher(own_session=False, forkserver=forkserver.name)),
    ):
        out = tmp_path / kind
        with LocalController(args, out, timeout_s=10, env=env, launcher=launcher) as ctl:
            ctl.start(2)
            assert all(isinstance(p, ForkedProcess) == (kind == "warm") for p in ctl.procs.values())
            assert ctl.wait(180) == {"w0": 0, "w1": 0}
        models[kind] = torch.load(out / "model" / "model_epoch_final.pth")
    assert models["warm"].keys() == models["cold"].keys()
    for name, value in models["cold"].items():
        assert value.dtype in (torch.float64, torch.int64)
        assert torch.equal(models["warm"][name], value), name


NICE_PROBE = textwrap.dedent(
    """
    import json, os, threading, time
    from jupyter_edt.runtime.priority import restore_start_priority
    start = os.getpriority(os.PRIO_PROCESS, 0)
    thread = threading.Thread(target=time.sleep, args=(1,))
    thread.start()  # started while it prepares: it inherits the lowered priority
    inherited = os.getpriority(os.PRIO_PROCESS, thread.native_id)
    restored = restore_start_priority()
    after = {os.getpriority(os.PRIO_PROCESS, int(t)) for t in os.listdir("/proc/self/task")}
    print(json.dumps({"start": start, "inherited": inherited, "restored": restored,
                      "after": sorted(after)}))
    """
)


def test_a_joiner_prepares_at_a_lower_priority_and_joins_at_the_jobs(forkserver, tmp_path):
    """As root, the fork server starts a process asked to be nicer that much nicer, and lets
    it (every thread) come back as it joins; elsewhere it leaves the priority alone, since the
    process could never come back."""
    joiner = dataclasses.replace(spec(tmp_path, "joiner", NICE_PROBE), nice=10)
    handle = LocalLauncher(forkserver=forkserver.name).start_sync(joiner)
    assert isinstance(handle, ForkedProcess) and handle.wait_sync(60) == 0
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    lowered = min(19, ours + 10) - ours if may_raise_priority(ours) else 0
    assert said(tmp_path, "joiner") == {
        "start": ours + lowered,
        "inherited": ours + lowered,
        "restored": lowered,
        "after": [ours],
    }


def may_raise_priority(current: int) -> bool:
    """Whether a process of ours could raise its priority back: CAP_SYS_NICE (root's, here),
    or an RLIMIT_NICE that reaches `current`."""
    import resource

    status = Path("/proc/self/status").read_text()
    caps = int(
        next(line for line in status.splitlines() if line.startswith("CapEff:")).split()[1], 16
    )
    return bool(caps >> 23 & 1) or resource.getrlimit(resource.RLIMIT_NICE)[0] >= 20 - current
