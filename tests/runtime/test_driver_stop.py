"""A driver's stop (SIGTERM) in the middle of starting workers: it waits until the started
workers have handles, so that the driver's `finally` stops them too. A start cut in half left
a worker nobody stopped, which wrote into the job directory its service was deleting."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator

import pytest

from jupyter_edt.runtime import LocalController
from jupyter_edt.runtime.jobdir import process_start_time
from jupyter_edt.runtime.stopping import Stop


@pytest.fixture
def stop() -> Iterator[Stop]:
    handler = Stop()
    previous = signal.signal(signal.SIGTERM, handler)
    yield handler
    signal.signal(signal.SIGTERM, previous)


def test_a_stop_ends_the_driver_at_once_outside_a_start(stop):
    with pytest.raises(SystemExit) as ended:
        os.kill(os.getpid(), signal.SIGTERM)
    assert ended.value.code == 128 + signal.SIGTERM


def test_a_stop_during_a_start_comes_once_the_started_workers_have_handles(stop, tmp_path):
    program = tmp_path / "sleeper.py"
    program.write_text("import time\ntime.sleep(300)\n")

    @contextlib.contextmanager
    def cancelled_as_it_starts() -> Iterator[None]:
        with stop.held():
            os.kill(os.getpid(), signal.SIGTERM)  # the service's cancel, as the start begins
            yield

    ctl = LocalController([str(program)], tmp_path / "result", launching=cancelled_as_it_starts)
    try:
        with pytest.raises(SystemExit) as ended:
            ctl.start(1)
        assert ended.value.code == 128 + signal.SIGTERM
        assert list(ctl.procs) == ["w0"]  # the worker started, and the controller holds it
        worker = ctl.procs["w0"]
        assert worker.returncode is None
    finally:
        ctl.close()  # what the driver's `finally` does
    assert worker.returncode is not None and process_start_time(worker.pid) is None


def test_only_the_main_thread_holds_a_stop(stop):
    """Handlers run in the main thread: a hold elsewhere would turn the main thread's stop
    into an exit raised in the other thread."""
    import threading

    held_there: list[bool] = []

    def elsewhere() -> None:
        with stop.held():
            held_there.append(stop._held > 0)

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join(10)
    assert held_there == [False]
