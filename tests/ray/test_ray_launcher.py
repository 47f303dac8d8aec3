"""RayLauncher on a real local Ray cluster: each process kept by an actor pinned to its node,
holding Ray's GPUs there; logs, exit codes, stopping a whole process tree, adoption by a
restarted service, and a node that dies taking its processes with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import ray
from waiting import eventually_sync

from jupyter_edt.launch.base import ProcessSpec
from jupyter_edt.launch.local import log_paths
from jupyter_edt.launch.ray import LOST, RayLauncher
from jupyter_edt.runtime.jobdir import process_start_time


def spec(tmp_path, code: str, **kw) -> ProcessSpec:
    return ProcessSpec(
        job_id=kw.pop("job_id", "j1"),
        name=kw.pop("name", "w0"),
        argv=[sys.executable, "-c", textwrap.dedent(code)],
        cwd=kw.pop("cwd", tmp_path),
        log_dir=kw.pop("log_dir", tmp_path / "logs"),
        **kw,
    )


def keeper_exists(name: str) -> bool:
    try:
        ray.get_actor(name, namespace="edt-tests")
    except ValueError:
        return False
    return True


def test_a_process_runs_on_its_node_with_its_gpu_and_logs(cluster, launcher, tmp_path):
    node = cluster.nodes[1].node_id
    code = """
        import os, sys
        print("cvd=" + os.environ["CUDA_VISIBLE_DEVICES"], "job=" + os.environ["EDT_JOB_ID"])
        print("oops", file=sys.stderr)
        sys.exit(3)
    """
    handle = launcher.start_sync(
        spec(tmp_path, code, env={"EDT_JOB_ID": "j1"}, devices=["1"], node=node)
    )
    assert handle.node == node
    assert handle.wait_sync(60) == 3
    out, err = log_paths(tmp_path / "logs", "w0")
    assert out.read_text() == "cvd=1 job=j1\n" and err.read_text() == "oops\n"
    # its end seen, the keeper goes, and its GPU with it
    eventually_sync(lambda: not keeper_exists("j1/w0"), "the keeper ended")
    eventually_sync(lambda: ray.available_resources().get("GPU") == 4.0, "the GPU given back")


def test_keepers_hold_rays_gpus_on_their_node(cluster, launcher, tmp_path):
    node = cluster.nodes[0].node_id
    sleeper = "import time; time.sleep(600)"
    handles = [
        launcher.start_sync(spec(tmp_path, sleeper, name=f"w{i}", devices=[str(i)], node=node))
        for i in range(2)
    ]
    try:
        assert ray.available_resources().get("GPU", 0.0) == 2.0  # the other node's two
    finally:
        for h in handles:
            launcher.stop_sync(h, grace=0)
    eventually_sync(
        lambda: ray.available_resources().get("GPU", 0.0) == 4.0, "the GPUs were given back"
    )


def test_stop_kills_the_whole_tree_then_the_keeper(cluster, launcher, tmp_path):
    child_pid = tmp_path / "child.pid"
    code = f"""
        import os, signal, subprocess, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        open({str(child_pid)!r} + ".new", "w").write(str(child.pid))
        os.replace({str(child_pid)!r} + ".new", {str(child_pid)!r})  # whole, or not yet there
        time.sleep(600)
    """
    handle = launcher.start_sync(spec(tmp_path, code, job_id="j2", node=cluster.nodes[1].node_id))
    eventually_sync(child_pid.exists, "the process started its child")
    child = int(child_pid.read_text())
    assert launcher.stop_sync(handle, grace=1) == -signal.SIGKILL  # SIGTERM ignored
    eventually_sync(lambda: process_start_time(child) is None, "the grandchild is gone")
    assert process_start_time(handle.pid) is None
    eventually_sync(lambda: not keeper_exists("j2/w0"), "the keeper ended")


def test_a_restarted_service_adopts_the_very_process(cluster, launcher, tmp_path):
    s = spec(tmp_path, "import time; time.sleep(600)", job_id="j3", node=cluster.nodes[0].node_id)
    handle = launcher.start_sync(s)
    try:
        started = process_start_time(handle.pid)
        assert started is not None
        again = RayLauncher(cluster.address, namespace="edt-tests")  # the restarted service's
        adopted = again.adopt(s, handle.pid, started, lambda: None)
        assert adopted is not None and adopted.returncode is None
        assert adopted.node == cluster.nodes[0].node_id
        assert again.adopt(s, handle.pid, started + 1, lambda: None) is None  # another process
        other = spec(tmp_path, "", job_id="j3", name="w9")
        assert again.adopt(other, handle.pid, started, lambda: None) is None  # no such keeper
        adopted.send_signal(signal.SIGKILL)
        assert adopted.wait_sync(30) == -signal.SIGKILL
    finally:
        launcher.stop_sync(handle, grace=0)


def test_a_node_that_dies_takes_its_processes_with_it(cluster, launcher, restore, tmp_path):
    """The cluster loses a node (a crash, not a graceful removal)."""
    node = cluster.nodes[1]
    handle = launcher.start_sync(
        spec(tmp_path, "import time; time.sleep(600)", job_id="j4", node=node.node_id)
    )
    assert handle.returncode is None
    cluster.remove_node(node, allow_graceful=False)
    assert handle.wait_sync(60) == LOST
    assert handle.vanished  # lost with its node, not ended by its program
    eventually_sync(lambda: process_start_time(handle.pid) is None, "the process died")
    # nothing is tried on the dead node again: a start there vanishes at once, no keeper made
    assert not launcher.available(node.node_id)
    again = launcher.start_sync(
        spec(tmp_path, "pass", job_id="j4", name="w1", node=node.node_id, devices=["0"])
    )
    assert (again.pid, again.returncode, again.vanished) == (-1, LOST, True)
    assert not keeper_exists("j4/w1")


def test_an_abandoned_process_is_lost_at_once_and_killed(cluster, tmp_path):
    """A controller abandons a worker whose keeper stays silent after its group failed: the
    handle ends (LOST, vanished) without waiting for an answer, and the keeper is killed, so
    the process does not run on uncounted if its node was alive after all. Its node is taken
    for lost by that launcher (a driver's own: the tests' shared one keeps its nodes)."""
    node = cluster.nodes[0].node_id
    launcher = RayLauncher(cluster.address, namespace="edt-tests")
    handle = launcher.start_sync(
        spec(tmp_path, "import time; time.sleep(600)", job_id="j10", node=node)
    )
    assert handle.returncode is None and handle.silent_s < 5
    handle.abandon()
    assert (handle.returncode, handle.vanished, handle.silent_s) == (LOST, True, 0.0)
    eventually_sync(lambda: process_start_time(handle.pid) is None, "the process died")
    eventually_sync(lambda: not keeper_exists("j10/w0"), "its keeper ended")
    assert not launcher.available(node)


def test_a_process_on_another_node_runs_in_a_copy_and_its_writes_come_back(
    cluster, launcher, tmp_path
):
    """No shared file system: the process reads its code from a copy of its job directory on
    its node, and what it writes there (logs, results) arrives in the job directory."""
    job = tmp_path / "job"
    (job / "code").mkdir(parents=True)
    (job / "code" / "data.txt").write_text("from the job directory\n")
    code = """
        import os, pathlib, time
        print("cwd=" + os.getcwd(), flush=True)
        result = pathlib.Path(os.environ["RESULT_DIR"])
        result.mkdir(parents=True, exist_ok=True)
        (result / "out.txt").write_text(open("data.txt").read().upper())
        time.sleep(0.3)
        print("done", flush=True)
    """
    s = spec(
        tmp_path,
        code,
        job_id="j5",
        cwd=job / "code",
        log_dir=job / "logs",
        env={"RESULT_DIR": str(job / "result")},
        node=cluster.nodes[1].node_id,
        job_dir=job,
    )
    handle = launcher.start_sync(s)
    assert handle.wait_sync(60) == 0
    assert (job / "result" / "out.txt").read_text() == "FROM THE JOB DIRECTORY\n"
    out = (job / "logs" / "w0.stdout").read_text().splitlines()
    assert out[-1] == "done"
    copy = out[0].removeprefix("cwd=")
    assert copy.endswith("/code") and not copy.startswith(str(job))
    eventually_sync(lambda: not os.path.exists(copy), "the copy removed with its keeper")


def test_a_drivers_workers_keepers_end_with_the_driver(cluster, tmp_path):
    """A driver's launcher (`detached=False`) owns its workers' keepers: when the driver dies
    (here SIGKILLed just after placing a worker), Ray ends them, and their processes with them;
    none is left holding a GPU."""
    pid_file = tmp_path / "worker.pid"
    driver = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import sys, time
                from pathlib import Path
                from jupyter_edt.launch.base import ProcessSpec
                from jupyter_edt.launch.ray import RayLauncher
                launcher = RayLauncher({cluster.address!r}, namespace="edt-tests", detached=False)
                sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
                handle = launcher.start_sync(ProcessSpec(
                    job_id="j8", name="w0", argv=sleeper,
                    cwd=Path({str(tmp_path)!r}), log_dir=Path({str(tmp_path / "logs")!r}),
                    devices=["0"], node={cluster.nodes[0].node_id!r},
                ))
                Path({str(pid_file)!r}).write_text(str(handle.pid))
                time.sleep(600)
                """
            ),
        ]
    )
    try:
        eventually_sync(pid_file.exists, "the driver placed its worker")
        worker = int(pid_file.read_text())
        assert keeper_exists("j8/w0") and process_start_time(worker) is not None
    finally:
        driver.kill()
        driver.wait(30)
    eventually_sync(lambda: not keeper_exists("j8/w0"), "the keeper ended with its driver")
    eventually_sync(lambda: process_start_time(worker) is None, "the worker ended with it")
    eventually_sync(
        lambda: ray.available_resources().get("GPU", 0.0) == 4.0, "its GPU was given back"
    )


def test_processes_started_together_come_back_in_order_and_one_unplaceable_fails_alone(
    cluster, launcher, tmp_path
):
    """`start_all_sync` asks for every keeper before it waits for any (their actors are made
    side by side; the benchmark measures what that saves): the handles come back in the order
    asked, each on its node, and one whose node does not exist is a process that died at once
    (LOST) while the others run."""
    nowhere = "ab" * 28  # a node id no cluster has
    code = "import os, time; print(os.environ['CUDA_VISIBLE_DEVICES'], flush=True); time.sleep(600)"
    nodes = [cluster.nodes[0].node_id, nowhere, cluster.nodes[1].node_id]
    specs = [
        spec(tmp_path, code, job_id="j9", name=f"w{i}", devices=[str(i)], node=node)
        for i, node in enumerate(nodes)
    ]
    handles = launcher.start_all_sync(specs)
    try:
        assert [h.spec.name for h in handles] == ["w0", "w1", "w2"]
        assert handles[1].pid == -1 and handles[1].returncode == LOST
        for i in (0, 2):
            assert handles[i].node == nodes[i] and handles[i].returncode is None
            out = tmp_path / "logs" / f"w{i}.stdout"
            eventually_sync(lambda out=out: out.exists() and out.read_text(), f"w{i} printed")
            assert (tmp_path / "logs" / f"w{i}.stdout").read_text() == f"{i}\n"
    finally:
        for h in handles:
            launcher.stop_sync(h, grace=0)
    eventually_sync(
        lambda: ray.available_resources().get("GPU", 0.0) == 4.0, "the GPUs were given back"
    )
