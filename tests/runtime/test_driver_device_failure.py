"""A GPU that fails under a running job, with a real driver and gloo workers on virtual devices:
its worker crashes, the replacement the driver starts on the same device crashes too, and the
job trains on with its other workers and follows the server's next orders. A program that
fails on every worker still fails the job, with its error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from jobprograms import DEADLINE_S
from test_driver import device
from waiting import eventually_sync

from jupyter_edt.runtime.jobdir import JobDir, write_json_atomic

EPOCHS = 30
STEPS = EPOCHS * 6  # 48 samples in batches of 8


def program(*, fail_at_step: int | None = None) -> str:
    """A tiny classifier whose worker on the device named by EDT_TEST_LOST_DEVICE crashes once
    the file EDT_TEST_LOST_MARKER exists (the GPU is lost): at its next step if it is running,
    at start if it is new. With `fail_at_step`, every worker raises at that step."""
    return textwrap.dedent(
        f"""
        import os, time
        import torch
        from torch import nn
        from torch.utils.data import TensorDataset
        from jupyter_edt.runtime import Trainer

        def lost():
            return os.environ["EDT_DEVICE_ID"] == os.environ.get("EDT_TEST_LOST_DEVICE") and (
                os.path.exists(os.environ.get("EDT_TEST_LOST_MARKER", "/nonexistent"))
            )

        if lost():
            os._exit(17)
        steps = 0

        def loss(out, y):
            global steps
            steps += 1
            if lost():
                os._exit(17)
            if {fail_at_step!r} is not None and steps >= {fail_at_step!r}:
                raise ValueError("the loss went to NaN")
            time.sleep(0.05)  # outlasts the failures and orders below on a busy machine
            return nn.functional.cross_entropy(out, y)

        g = torch.Generator().manual_seed(1)
        x = torch.randn(48, 4, generator=g)
        y = (x[:, 0] > 0).long()
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
        trainer = Trainer(
            model,
            lambda: (TensorDataset(x, y), TensorDataset(x[:8], y[:8])),
            loss,
            lambda params: torch.optim.SGD(params, lr=0.1),
        )
        trainer.fit({EPOCHS}, 8, 4, checkpoint_every=10, micro_batch_size=2)
        """
    )


def start_driver(tmp_path: Path, code: str, devices: list[dict], env: dict) -> tuple:
    d = JobDir(tmp_path / "job")
    d.create()
    (d.code / "main.py").write_text(code)
    write_json_atomic(d.job, {"id": "j1", "program": [str(d.code / "main.py")], "max_gpus": 4})
    d.write_orders({"seq": 1, "action": "run", "devices": devices})
    driver = subprocess.Popen(
        [sys.executable, "-m", "jupyter_edt.runtime.driver", str(d.root)],
        stdout=(tmp_path / "driver.out").open("wb"),
        stderr=subprocess.STDOUT,
        env={**os.environ, **env},
    )
    return d, driver


def wait_status(d: JobDir, driver: subprocess.Popen, condition, what: str) -> dict:
    """The driver's status once `condition` holds; fails at once if the driver has exited."""

    def probe() -> dict | None:
        status = d.read_status()
        out = (d.root.parent / "driver.out").read_text()
        assert driver.poll() is None, f"the driver exited before it {what}: {status}\n{out}"
        return status

    return eventually_sync(
        probe,
        f"the driver {what}",
        until=lambda status: status is not None and condition(status),
        interval=0.1,
    )


def steps_of(d: JobDir, worker: str) -> list[int]:
    events = [json.loads(line) for line in (d.logs / f"events-{worker}.jsonl").open()]
    return [e["global_step"] for e in events if e["type"] == "step"]


def test_a_failing_gpu_is_left_idle_and_the_job_trains_on_and_follows_its_orders(tmp_path):
    marker = tmp_path / "vgpu2-lost"
    d, driver = start_driver(
        tmp_path,
        program(),
        [device(0), device(1), device(2)],
        {"EDT_TEST_LOST_DEVICE": "vgpu2", "EDT_TEST_LOST_MARKER": str(marker)},
    )
    out = tmp_path / "driver.out"
    try:
        first = wait_status(
            d, driver, lambda s: s["elastic"] and len(s["workers"]) == 3, "ran on 3"
        )
        by_device = {dev: w for w, dev in first["workers"].items()}
        marker.touch()  # vgpu2 fails: its worker crashes, and so does a new one there
        failed = wait_status(
            d, driver, lambda s: s.get("device_failures") == {"vgpu2": 2}, "gave up on vgpu2"
        )
        assert sorted(failed["workers"].values()) == ["vgpu0", "vgpu1"]
        for dev in ("vgpu0", "vgpu1"):  # the same processes train on
            w = by_device[dev]
            assert failed["workers"][w] == dev and failed["pids"][w] == first["pids"][w]

        # the server's orders come: vgpu2 is taken away, then the job grows onto vgpu3
        d.write_orders({"seq": 2, "action": "run", "devices": [device(0), device(1)]})
        d.write_orders({"seq": 3, "action": "run", "devices": [device(i) for i in (0, 1, 3)]})
        grown = wait_status(
            d,
            driver,
            lambda s: sorted(s["workers"].values()) == ["vgpu0", "vgpu1", "vgpu3"],
            "grew onto vgpu3",
        )
        assert grown["device_failures"] == {}
        assert driver.wait(timeout=DEADLINE_S) == 0, out.read_text()
    finally:
        driver.kill()
    final = d.read_status()
    assert final["state"] == "exited" and final["exit_code"] == 0, final
    # the worker on vgpu0 trained from the first step to the last, never restarted
    assert steps_of(d, by_device["vgpu0"]) == list(range(STEPS))
    tried = [p for p in d.logs.glob("w*.out") if p.stem not in first["workers"]]
    assert len(tried) == 2  # one retry on vgpu2, one worker on vgpu3: no loop of retries


def test_a_program_that_fails_on_every_worker_fails_the_job_with_its_error(tmp_path):
    d, driver = start_driver(tmp_path, program(fail_at_step=4), [device(0), device(1)], {})
    try:
        assert driver.wait(timeout=DEADLINE_S) == 1, (tmp_path / "driver.out").read_text()
    finally:
        driver.kill()
    final = d.read_status()
    assert final["state"] == "failed" and final["exit_code"] == 1
    assert "ValueError: the loss went to NaN" in final["error"]
    assert len(list(d.logs.glob("w*.out"))) == 2  # nobody left to carry the state: no retry
