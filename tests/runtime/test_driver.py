"""The job driver on its own: orders in the job directory move a job to new devices without
losing its training state."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

from jobprograms import DEADLINE_S, program
from waiting import eventually_sync

from jupyter_edt.jobs.runner import _devices
from jupyter_edt.runtime.driver import device_env
from jupyter_edt.runtime.jobdir import JobDir, write_json_atomic
from jupyter_edt.scheduling.inventory import Device


def device(i: int) -> dict:
    return {"id": f"vgpu{i}", "index": i, "virtual": True}


def wait_status(d: JobDir, condition, what: str) -> dict:
    return eventually_sync(
        d.read_status,
        f"the driver {what}",
        until=lambda status: status is not None and condition(status),
        interval=0.1,
    )


def test_a_job_moved_to_all_new_devices_keeps_its_training_state(tmp_path):
    d = JobDir(tmp_path / "job")
    d.create()
    # slow enough to outlast a joiner's start (importing torch) on a busy machine
    (d.code / "main.py").write_text(program(epochs=6, delay=0.04))
    write_json_atomic(d.job, {"id": "j1", "program": [str(d.code / "main.py")], "max_gpus": 1})
    d.write_orders({"seq": 1, "action": "run", "devices": [device(0)]})
    driver = subprocess.Popen(
        [sys.executable, "-m", "jupyter_edt.runtime.driver", str(d.root)],
        stdout=(tmp_path / "driver.out").open("wb"),
        stderr=subprocess.STDOUT,
    )
    try:
        first = wait_status(d, lambda s: s["elastic"], "ran elastically")
        (old,) = first["workers"]
        d.write_orders({"seq": 2, "action": "run", "devices": [device(1)]})
        moved = wait_status(d, lambda s: list(s["workers"].values()) == ["vgpu1"], "moved")
        (new,) = moved["workers"]
        assert new != old
        assert driver.wait(timeout=DEADLINE_S) == 0, (tmp_path / "driver.out").read_text()
    finally:
        driver.kill()
    final = d.read_status()
    assert final["state"] == "exited" and final["exit_code"] == 0
    steps, kinds = {}, {}
    for worker in (old, new):
        events = [json.loads(line) for line in (d.logs / f"events-{worker}.jsonl").open()]
        steps[worker] = [e["global_step"] for e in events if e["type"] == "step"]
        kinds[worker] = {e["type"] for e in events}
    assert "resumed" not in kinds[new]  # the state came from the old worker, not from disk
    # the newcomer joined mid-training with the state (the two shared the steps between the
    # grow and the shrink) and carried on: no restart from step 0 or from a checkpoint
    assert 0 < steps[new][0] <= steps[old][-1]
    assert set(steps[old]) | set(steps[new]) == set(range(36))  # 6 epochs x 6 steps
    assert len(steps[old]) == len(set(steps[old])) and len(steps[new]) == len(set(steps[new]))


def test_a_worker_sees_its_gpu_by_uuid_and_a_virtual_device_as_no_gpu(tmp_path):
    """The orders the job runner writes, through a real driver, to the environment its worker
    processes get. NVML indices shift when a GPU disappears; the UUID names the same GPU."""
    node = "n0"
    gpu = Device("gpu1", 0, node, "GPU-5e0c2a1b-77d4-4c52-9a63-0f1f2e3d4c5b", "H200", False)
    bare = Device("gpu2", 1, node, "", "GPU without a UUID", False)
    cpu = Device("vgpu0", 0, node, "virtual-n0-0", "Virtual GPU 0", True)
    d = JobDir(tmp_path / "job")
    d.create()
    (d.code / "main.py").write_text(
        "import json, os\n"
        "name = os.environ['EDT_DEVICE_ID'] + '.json'\n"
        "json.dump(os.environ['CUDA_VISIBLE_DEVICES'], open(name, 'w'))\n"
    )
    write_json_atomic(d.job, {"id": "j1", "program": [str(d.code / "main.py")], "max_gpus": 3})
    d.write_orders({"seq": 1, "action": "run", "devices": _devices([gpu, bare, cpu])})
    driver = subprocess.run(
        [sys.executable, "-m", "jupyter_edt.runtime.driver", str(d.root)],
        capture_output=True,
        timeout=DEADLINE_S,
    )
    assert driver.returncode == 0, driver.stdout + driver.stderr
    seen = {p.stem: json.loads(p.read_text()) for p in d.code.glob("*.json")}
    # a GPU worker sees the job's GPUs on its node in local-rank order (torchrun's view, so
    # cuda:LOCAL_RANK is its own); a worker on a virtual device sees none
    assert seen == {"gpu1": f"{gpu.uuid},1", "gpu2": f"{gpu.uuid},1", "vgpu0": ""}
    # orders from before devices carried a UUID, and a bare NVML UUID, still name the GPU
    assert device_env({"id": "gpu3", "index": 3, "virtual": False})["CUDA_VISIBLE_DEVICES"] == "3"
    bare_uuid = {"id": "gpu4", "index": 0, "uuid": "5e0c2a1b", "virtual": False}
    assert device_env(bare_uuid)["CUDA_VISIBLE_DEVICES"] == "GPU-5e0c2a1b"


def test_a_driver_whose_job_directory_is_removed_stops_its_workers(tmp_path):
    """A deleted job (its directory removed) must not leave a driver and workers training
    into the void: the driver's status writes would otherwise recreate the directory."""
    d = JobDir(tmp_path / "job")
    d.create()
    (d.code / "main.py").write_text(program(epochs=1000, delay=0.05))
    write_json_atomic(d.job, {"id": "j1", "program": [str(d.code / "main.py")], "max_gpus": 2})
    d.write_orders({"seq": 1, "action": "run", "devices": [device(0), device(1)]})
    driver = subprocess.Popen(
        [sys.executable, "-m", "jupyter_edt.runtime.driver", str(d.root)],
        stdout=(tmp_path / "driver.out").open("wb"),
        stderr=subprocess.STDOUT,
    )
    try:
        running = wait_status(d, lambda s: s["state"] == "running" and len(s["pids"]) == 2, "ran")
        shutil.rmtree(d.root)
        assert driver.wait(timeout=DEADLINE_S) == 1, (tmp_path / "driver.out").read_text()
    finally:
        driver.kill()
    for pid in running["pids"].values():
        assert not _alive(pid), f"worker {pid} outlived its driver"
    assert not d.root.exists()


def _alive(pid: int) -> bool:
    """Whether a process (not a zombie) with this PID exists."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False
