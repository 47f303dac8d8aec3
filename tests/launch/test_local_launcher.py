"""LocalLauncher with real processes: environment, logs, and stopping a whole process group;
its blocking side as a driver uses it for workers (the caller's group, one log each)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import textwrap
import time

import pytest

from jupyter_edt.launch.base import ProcessSpec
from jupyter_edt.launch.local import LocalLauncher, log_paths, merged_log_path


def spec(tmp_path, code: str, **kw) -> ProcessSpec:
    return ProcessSpec(
        job_id="j1",
        name=kw.pop("name", "worker-0"),
        argv=[sys.executable, "-c", textwrap.dedent(code)],
        cwd=tmp_path,
        log_dir=tmp_path / "logs",
        **kw,
    )


@pytest.mark.asyncio
async def test_environment_and_logs(tmp_path):
    code = """
        import os, sys
        print("cvd=" + repr(os.environ["CUDA_VISIBLE_DEVICES"]), "job=" + os.environ["EDT_JOB_ID"])
        print("cwd=" + os.getcwd())
        print("oops", file=sys.stderr)
        sys.exit(3)
    """
    launcher = LocalLauncher()
    gpu = await launcher.start(
        spec(tmp_path, code, env={"EDT_JOB_ID": "j1"}, devices=[1, "GPU-5e0c2a1b"])
    )
    assert await gpu.wait() == 3
    cpu = await launcher.start(
        spec(tmp_path, code, name="worker-1", env={"EDT_JOB_ID": "j1"}, virtual_devices=True)
    )
    assert await cpu.wait() == 3
    out, err = log_paths(tmp_path / "logs", "worker-0")
    assert "cvd='1,GPU-5e0c2a1b' job=j1" in out.read_text()
    assert f"cwd={tmp_path}" in out.read_text()
    assert err.read_text() == "oops\n"
    out1, _ = log_paths(tmp_path / "logs", "worker-1")
    assert "cvd='' job=j1" in out1.read_text()


@pytest.mark.asyncio
async def test_stop_kills_the_whole_group_even_when_sigterm_is_ignored(tmp_path):
    ready = tmp_path / "child.pid"
    code = f"""
        import signal, subprocess, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        open({str(ready)!r}, "w").write(str(child.pid))
        time.sleep(600)
    """
    launcher = LocalLauncher()
    handle = await launcher.start(spec(tmp_path, code))
    for _ in range(200):  # the child announces itself within seconds; bounded wait
        if ready.exists() and ready.read_text():
            break
        await asyncio.sleep(0.05)
    child = int(ready.read_text())
    assert os.getpgid(child) == handle.pid  # the grandchild is in the job's group
    code_ = await launcher.stop(handle, grace=0.5)
    assert code_ == -9  # SIGTERM was ignored, so SIGKILL ended it
    for _ in range(200):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        # the orphan is reaped by init asynchronously; poll its existence, bounded
        await asyncio.sleep(0.05)
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)


@pytest.mark.asyncio
async def test_stop_is_graceful_first(tmp_path):
    code = """
        import signal, sys, time
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
        print("up", flush=True)
        time.sleep(600)
    """
    launcher = LocalLauncher()
    handle = await launcher.start(spec(tmp_path, code))
    out, _ = log_paths(tmp_path / "logs", "worker-0")
    for _ in range(200):
        if out.exists() and "up" in out.read_text():
            break
        await asyncio.sleep(0.05)
    assert await launcher.stop(handle, grace=30) == 0


def test_a_drivers_workers_share_its_group_and_write_one_log(tmp_path):
    code = """
        import os, sys
        print("pgid=" + str(os.getpgid(0)), "cvd=" + os.environ["CUDA_VISIBLE_DEVICES"])
        print("oops", file=sys.stderr)
        sys.exit(3)
    """
    workers = LocalLauncher(own_session=False)
    env = {"CUDA_VISIBLE_DEVICES": "GPU-5e0c2a1b"}  # devices=None: the env places it
    handle = workers.start_sync(
        spec(tmp_path, code, name="w0", env=env, devices=None, one_log=True)
    )
    assert handle.wait_sync(60) == 3
    log = merged_log_path(tmp_path / "logs", "w0").read_text()
    assert f"pgid={os.getpgid(0)} cvd=GPU-5e0c2a1b" in log  # a stop of our group reaches it
    assert log.endswith("oops\n")
    assert not log_paths(tmp_path / "logs", "w0")[0].exists()


def test_stop_sync_is_graceful_first_and_kills_at_once_without_grace(tmp_path):
    code = """
        import signal, sys, time
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
        print("up", flush=True)
        time.sleep(600)
    """
    workers = LocalLauncher(own_session=False)
    graceful = workers.start_sync(spec(tmp_path, code, name="w0", one_log=True))
    out = merged_log_path(tmp_path / "logs", "w0")
    for _ in range(600):  # bounded: the interpreter starts within seconds
        if out.exists() and "up" in out.read_text():
            break
        time.sleep(0.05)
    assert workers.stop_sync(graceful, grace=30) == 0
    forced = workers.start_sync(spec(tmp_path, code, name="w1", one_log=True))
    with pytest.raises(TimeoutError):
        forced.wait_sync(0.1)
    assert workers.stop_sync(forced, grace=0) == -signal.SIGKILL  # no SIGTERM first
    assert forced.returncode == -signal.SIGKILL


def test_when_one_of_several_starts_fails_those_started_are_stopped(tmp_path):
    """`start_all_sync` returns no handle when a start raises: the processes it had started are
    stopped, since the caller cannot."""

    class FailsSecond(LocalLauncher):
        started: list = []

        def start_sync(self, spec):
            if self.started:
                raise OSError("no second process today")
            handle = super().start_sync(spec)
            self.started.append(handle)
            return handle

    launcher = FailsSecond()
    sleeper = "import time; time.sleep(600)"
    with pytest.raises(OSError, match="no second process"):
        launcher.start_all_sync([spec(tmp_path, sleeper), spec(tmp_path, sleeper, name="w1")])
    (first,) = launcher.started
    assert first.returncode == -signal.SIGKILL
