"""A WMLA EDT program, unchanged, through the execs API of a real Jupyter server on 4 virtual
GPUs: it starts on the 2 GPUs left free, grows to 4 when they free up (Conductor's application
list follows: its GPU slots and executors go from 2 to 4), finishes FINISHED, and its emetrics,
elog lines and result layout come back through the native and the execs API."""

from __future__ import annotations

import asyncio
import io
import json
import re
import textwrap
import zipfile
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from apidoc import check
from jobprograms import DEADLINE_S, program
from multiuser import api, as_user, wait_for
from tornado.httpclient import HTTPClientError
from waiting import eventually
from wmla_program import FILES, MAIN, model_dir_tar, multipart_file

from jupyter_edt.compat.fabric_model import FabricModel
from jupyter_edt.compat.formats import parse_elog_line

ARGS = (
    "--exec-start edtPyTorch --model-dir mnist --model-main main.py "
    "--cs-datastore-meta type=fs,data_path={data} --edt-options maxWorkers=4 "
    "--numWorker 4 --gpuPerWorker 1 --debug-level debug "
    "--epochs {epochs} --batchsize 4 --delay {delay}"
)
# 64 samples, a global batch of 4 per device x 4 devices: 4 steps an epoch. Long enough that
# the 2 joiners start (import torch, build the model) before training ends.
EPOCHS = 25
STEPS = EPOCHS * 4


pytestmark = pytest.mark.multi_user


@pytest.fixture
def edt_config():
    return {
        "devices": "virtual",
        "virtual_gpus": 4,
        "min_rescale_interval": 0.0,
        "warm_workers": False,  # the session's fork server instead (tests/conftest.py)
    }


async def wmla(jp_fetch, user, *path, method="GET", raw=False, **kw):
    headers = {**as_user(user), **kw.pop("headers", {})}
    response = await jp_fetch(
        "edt", "api", "wmla", "v1", *path, method=method, headers=headers, **kw
    )
    return response.body if raw else json.loads(response.body)


async def wmla_error(jp_fetch, user, *path, **kw) -> tuple[int, dict]:
    with pytest.raises(HTTPClientError) as info:
        await wmla(jp_fetch, user, *path, **kw)
    return info.value.code, json.loads(info.value.response.body)


async def applications(jp_fetch, user: str, sig_id: str) -> list[dict]:
    """`user`'s running applications, from Conductor's API as WMLA's notebooks list them."""
    response = await jp_fetch(
        "platform", "rest", "conductor", "v1", "instances", sig_id, "applications",
        params={"state": "RUNNING"}, headers=as_user(user),
    )  # fmt: skip
    return json.loads(response.body)


def slots_and_executors(apps: list[dict]) -> list[tuple[int, list[str]]]:
    """Each application's GPU slots and executor ids."""
    return [(a["gpuslots"], sorted(e["id"] for e in a["executors"])) for a in apps]


async def wait_exec(jp_fetch, user, exec_id, condition, what: str) -> dict:
    """The exec as `user` reads it, once `condition(view)` holds."""
    return await eventually(
        lambda: wmla(jp_fetch, user, "execs", exec_id),
        f"became {what} (exec {exec_id})",
        until=condition,
        interval=0.2,
    )


async def test_a_wmla_program_runs_grows_and_returns_its_metrics_logs_and_results(
    jp_fetch, tmp_path
):
    # bob's job holds 2 of the 4 GPUs while the exec starts
    blocker = await api(
        jp_fetch,
        "bob",
        "jobs",
        method="POST",
        body={"code": program(epochs=1000, delay=0.01), "max_gpus": 2},
    )
    assert len(blocker["devices"]) == 2
    args = ARGS.format(data=tmp_path, epochs=EPOCHS, delay=0.04)
    submitted = await wmla(
        jp_fetch,
        "alice",
        "execs",
        method="POST",
        params={"args": args},
        **multipart_file(model_dir_tar()),
    )
    assert submitted["elastic"] is True and submitted["framework"] == "edtPyTorch"
    assert submitted["appName"] == "mnist" and submitted["numWorker"] == 4
    assert submitted["state"] in ("SUBMITTED", "PENDING_CRD_SCHEDULER")
    exec_id = submitted["id"]
    check("/execs", "post", 201, submitted)
    assert submitted["submissionId"] == exec_id and submitted["createTime"].endswith("Z")

    running = await wait_exec(
        jp_fetch, "alice", exec_id, lambda e: e["state"] == "RUNNING", "RUNNING"
    )
    assert running["runningWorkers"] == 2
    # Conductor's view: one application on 2 GPU slots, an executor a worker (once the
    # driver has reported them)
    sig = submitted["sigId"]
    await eventually(
        lambda: applications(jp_fetch, "alice", sig),
        "one application with 2 executors",
        until=lambda a: slots_and_executors(a) == [(2, ["1", "2"])],
    )
    await api(jp_fetch, "bob", "jobs", blocker["id"], method="DELETE")
    await wait_exec(jp_fetch, "alice", exec_id, lambda e: e["runningWorkers"] == 4, "grown")
    (grown,) = await eventually(
        lambda: applications(jp_fetch, "alice", sig),
        "the application grown to 4 executors",
        until=lambda a: slots_and_executors(a) == [(4, ["1", "2", "3", "4"])],
    )
    assert grown["driver"] == {"id": exec_id, "state": "RUNNING"}
    done = await wait_exec(
        jp_fetch,
        "alice",
        exec_id,
        lambda e: e["state"] not in ("SUBMITTED", "PENDING_CRD_SCHEDULER", "RUNNING"),
        "done",
    )
    assert done["state"] == "FINISHED", done["message"]
    check("/execs/{exec_id}", "get", 200, done)
    listed = await wmla(jp_fetch, "alice", "execs")
    check("/execs", "get", 200, listed)
    assert [e["id"] for e in listed["execs"]] == [exec_id]

    # the runtime's steps and the program's emetrics, in the native metrics API
    metrics = (await api(jp_fetch, "alice", "jobs", exec_id, "metrics"))["metrics"]
    steps = [m for m in metrics if m["type"] == "step"]
    assert [m["global_step"] for m in steps] == list(range(STEPS))
    assert {2, 4} <= {m["world_size"] for m in steps}
    emetrics = [m for m in metrics if m["type"] == "emetrics"]
    train = [m for m in emetrics if m["group"] == "train"]
    test = [m for m in emetrics if m["group"] == "test"]
    assert [m["iteration"] for m in train] == list(range(1, STEPS + 1))
    assert [m["loss"] for m in train] == pytest.approx([m["loss"] for m in steps])
    assert len(test) == EPOCHS and all(0.0 <= m["accuracy"] <= 1.0 for m in test)
    assert test[-1]["loss"] < test[0]["loss"]

    # the log endpoint carries the elog lines and nothing else; outlog the program's output
    log = await wmla(jp_fetch, "alice", "execs", exec_id, "log")
    check("/execs/{exec_id}/log", "get", 200, log)
    elog = [parse_elog_line(line) for line in log.splitlines()]
    assert all(elog), log
    assert [f["global_steps"] for f in elog if f["title"] == "Train"] == list(range(1, STEPS + 1))
    assert sum(f["title"] == "Test" for f in elog) == EPOCHS
    outlog = await wmla(jp_fetch, "alice", "execs", exec_id, "log", params={"logType": "outlog"})
    check("/execs/{exec_id}/log", "get", 200, outlog)
    assert not any(map(parse_elog_line, outlog.splitlines()))
    assert "unknown arguments: []" in outlog  # platform options out, the program's in
    seen = [
        json.loads(line.split(":", 1)[1])
        for line in outlog.splitlines()
        if line.startswith("environment:")
    ]
    result = tmp_path / "jobs" / exec_id / "result"
    assert len(seen) == 4 and seen[0] == {
        "DATA_DIR": str(tmp_path),
        "LOG_DIR": str(result / "log" / "w0"),
        "SAVED_MODEL_DIR": str(result / "model"),
        "DLI_EXECID": exec_id,
        "DLI_IS_ELASTIC": "true",
        "DLI_WORK_DIR": str(tmp_path / "jobs" / exec_id / "code"),
        "RESUME_WEIGHT_PATH": str(result / "checkpoint"),
        "CUDA_VISIBLE_DEVICES": "",  # a virtual GPU
    }
    assert sorted(s["LOG_DIR"].rsplit("/", 1)[1] for s in seen) == ["w0", "w1", "w2", "w3"]
    assert isinstance(
        await wmla(jp_fetch, "alice", "execs", exec_id, "log", params={"logType": "errlog"}), str
    )

    # the result zip has the contract's layout
    data = await wmla(jp_fetch, "alice", "execs", exec_id, "result", raw=True)
    names = set(zipfile.ZipFile(io.BytesIO(data)).namelist())
    for name in (
        "model/model_epoch_final.pth",
        "model/train/model_epoch_final.pth",
        "model/train/model_epoch_final_optimizer_state.pth",
        "model/train/model_epoch_1.pth",
        "model/train/model_epoch_1_optimizer_state.pth",
        f"model/train/model_epoch_{EPOCHS}.pth",
        "_submitted_code/mnist/main.py",
        "_submitted_code/mnist/edtcallback.py",
        "val_dict_list.json",
    ):
        assert name in names, sorted(names)
    assert any(n.startswith("checkpoint/") for n in names)
    assert any(n.startswith("log/") and n.endswith("/stdout") for n in names)
    assert any(n.startswith("log/") and n.endswith("/evaluation-metrics.txt") for n in names)
    val = json.loads(zipfile.ZipFile(io.BytesIO(data)).read("val_dict_list.json"))
    assert [v["steps"] for v in val] == list(range(4, STEPS + 1, 4))

    # owner-scoped like the native API
    code, _ = await wmla_error(jp_fetch, "bob", "execs", exec_id)
    assert code == 404
    assert (await wmla(jp_fetch, "bob", "execs"))["execs"] == []
    code, _ = await wmla_error(jp_fetch, "bob", "execs", exec_id, "result")
    assert code == 404
    code, _ = await wmla_error(jp_fetch, "bob", "execs", blocker["id"])
    assert code == 404  # a native job is no exec


async def test_a_failing_wmla_program_fails_with_its_error_and_its_line(jp_fetch, tmp_path):
    """A WMLA program whose model does not fit its data: the exec's message is the program's
    exception at the line of the program it came from, once for both workers."""
    broken = MAIN.replace("nn.Linear(36, 4)", "nn.Linear(32, 4)")
    source = textwrap.dedent(broken).lstrip().splitlines()  # as model_dir_tar writes it
    line = next(i for i, text in enumerate(source, 1) if "return F.log_softmax" in text)
    args = (
        f"--exec-start edtPyTorch --model-dir mnist --model-main main.py "
        f"--cs-datastore-meta type=fs,data_path={tmp_path} --numWorker 2 --epochs 1"
    )
    archive = model_dir_tar(files={**FILES, "main.py": broken})
    submitted = await wmla(
        jp_fetch, "alice", "execs", method="POST", params={"args": args}, **multipart_file(archive)
    )
    done = await wait_exec(
        jp_fetch,
        "alice",
        submitted["id"],
        lambda e: e["state"] not in ("SUBMITTED", "PENDING_CRD_SCHEDULER", "RUNNING"),
        "done",
    )
    assert done["state"] == "FAILED", done
    assert re.fullmatch(
        r"RuntimeError: mat1 and mat2 shapes cannot be multiplied \(\d+x36 and 32x4\) "
        rf"\(main\.py:{line} in forward; workers w0, w1(, w\d+)*\)",
        done["message"],
    ), done["message"]
    assert done["events"] == f"Job {done['id']} task <1> failed: {done['message']}"


async def test_stop_and_delete_map_to_stopped_and_killed(jp_fetch, tmp_path):
    args = ARGS.format(data=tmp_path, epochs=1000, delay=0.01)
    views = []
    for _ in range(2):
        views.append(
            await wmla(
                jp_fetch,
                "alice",
                "execs",
                method="POST",
                params={"args": args},
                **multipart_file(model_dir_tar()),
            )
        )
    ids = [v["id"] for v in views]
    await wait_exec(jp_fetch, "alice", ids[0], lambda e: e["state"] == "RUNNING", "RUNNING")
    # RUNNING is its processes up; training reports metrics
    await eventually(
        lambda: api(jp_fetch, "alice", "jobs", ids[0], "metrics"),
        f"reported a metric (exec {ids[0]})",
        until=lambda answer: answer["metrics"],
        interval=0.2,
    )
    stopped = await wmla(jp_fetch, "alice", "execs", ids[0], "stop", method="POST", body=b"")
    assert stopped["state"] == "STOPPED"
    check("/execs/{exec_id}/stop", "post", 200, stopped)
    code, body = await wmla_error(
        jp_fetch, "alice", "execs", ids[0], "stop", method="POST", body=b""
    )
    assert code == 403 and "already finished" in body["message"]

    # a user deletes only their own execs: bob's attempt finds nothing and changes nothing
    job_dirs = [Path(v["workDir"]).parent for v in views]
    code, _ = await wmla_error(jp_fetch, "bob", "execs", ids[1], method="DELETE")
    assert code == 404 and job_dirs[1].is_dir()
    assert (await wmla(jp_fetch, "alice", "execs", ids[1]))["state"] != "KILLED"

    # deleting an exec that has not ended kills it, then removes it everywhere
    killed = await wmla(jp_fetch, "alice", "execs", ids[1], method="DELETE")
    assert killed["state"] == "KILLED" and killed["id"] == ids[1]
    check("/execs/{exec_id}", "delete", 200, killed)
    await assert_gone(jp_fetch, ids[1], job_dirs[1])

    # an ended one goes as it is; a second delete finds nothing
    job = await wait_for(jp_fetch, "alice", ids[0], lambda j: j["devices"] == [], "released")
    assert job["state"] == "CANCELLED"
    assert (await api(jp_fetch, "alice", "jobs", ids[0], "metrics"))["metrics"]
    deleted = await wmla(jp_fetch, "alice", "execs", ids[0], method="DELETE")
    assert deleted["state"] == "STOPPED"
    await assert_gone(jp_fetch, ids[0], job_dirs[0])
    code, _ = await wmla_error(jp_fetch, "alice", "execs", ids[0], method="DELETE")
    assert code == 404


async def assert_gone(jp_fetch, exec_id: str, job_dir: Path) -> None:
    """No record, metrics or files of the exec remain, through either API."""
    for path in [(exec_id,), (exec_id, "log"), (exec_id, "result")]:
        code, _ = await wmla_error(jp_fetch, "alice", "execs", *path)
        assert code == 404, path
    for path in [(exec_id,), (exec_id, "metrics")]:
        with pytest.raises(HTTPClientError) as info:
            await api(jp_fetch, "alice", "jobs", *path)
        assert info.value.code == 404, path
    listed = await wmla(jp_fetch, "alice", "execs")
    assert exec_id not in {e["id"] for e in listed["execs"]}
    # what is left, if anything, names whoever wrote there after the delete
    assert not job_dir.exists(), sorted(str(p.relative_to(job_dir)) for p in job_dir.rglob("*"))


@pytest.mark.parametrize(
    ("args", "files", "filename", "field", "words"),
    [
        (None, None, None, "args", "required"),
        ("--model-main main.py", None, None, "args", "--exec-start is required"),
        ("--exec-start tensorflow --model-main main.py", None, None, "args", "not supported"),
        ("--exec-start edtPyTorch", None, None, "args", "--model-main is required"),
        (
            "--exec-start edtPyTorch --model-main main.py --model-dir ../x",
            None,
            None,
            "args",
            "--model-dir",
        ),
        (
            "--exec-start edtPyTorch --model-main m.py --edt-options maxWorkers=0",
            None,
            None,
            "args",
            "maxWorkers",
        ),
        (
            "--exec-start edtPyTorch --model-main m.py --edt-options speed=9",
            None,
            None,
            "args",
            "speed",
        ),
        (
            "--exec-start edtPyTorch --model-main m.py --gpuPerWorker 2",
            None,
            None,
            "args",
            "--gpuPerWorker",
        ),
        (
            "--exec-start edtPyTorch --model-main main.py --model-dir nope",
            None,
            None,
            "file",
            "no folder nope",
        ),
        (
            "--exec-start edtPyTorch --model-main other.py --model-dir mnist",
            None,
            None,
            "args",
            "other.py",
        ),
        ("--exec-start edtPyTorch --model-main main.py", b"not an archive", None, "file", ""),
        ("--exec-start 'edtPyTorch", None, None, "args", "cannot be split"),
    ],
)
async def test_bad_submissions_are_400_naming_the_problem(
    jp_fetch, args, files, filename, field, words
):
    params = {"args": args} if args is not None else {}
    archive = files if files is not None else model_dir_tar()
    code, body = await wmla_error(
        jp_fetch,
        "alice",
        "execs",
        method="POST",
        params=params,
        **multipart_file(archive, filename or "mnist.modelDir.tar"),
    )
    assert code == 400 and body["field"] == field, body
    check("/execs", "post", 400, body)
    assert words in body["message"]
    assert (await wmla(jp_fetch, "alice", "execs"))["execs"] == []


async def test_other_bad_requests(jp_fetch):
    code, body = await wmla_error(
        jp_fetch,
        "alice",
        "execs",
        method="POST",
        params={"args": "--exec-start edtPyTorch"},
        body=b"{}",
    )
    assert code == 400 and body["field"] == "file"
    code, body = await wmla_error(jp_fetch, "alice", "execs", "missing")
    assert code == 404
    check("/execs/{exec_id}", "get", 404, body)
    view = await wmla(
        jp_fetch,
        "alice",
        "execs",
        method="POST",
        params={
            "args": "--exec-start edtPyTorch --model-dir mnist --model-main main.py "
            "--edt-options maxWorkers=9"
        },  # more than the 4 GPUs: it starts on what there is
        **multipart_file(model_dir_tar()),
    )
    code, body = await wmla_error(
        jp_fetch, "alice", "execs", view["id"], "log", params={"logType": "tail"}
    )
    assert code == 400 and body["field"] == "logType"
    code, _ = await wmla_error(jp_fetch, "nobody", "execs")
    assert code == 403
    await wmla(jp_fetch, "alice", "execs", view["id"], method="DELETE")  # no job outlives it


NOTEBOOK_CELLS = [
    "%matplotlib inline\nimport torch\nimport torch.nn.functional as F\nfrom torch import nn",
    textwrap.dedent(
        """
        from torch.utils.data import TensorDataset
        from jupyter_edt.compat.fabric_model import FabricModel

        def getDatasets():
            g = torch.Generator().manual_seed(0)
            x = torch.randn(32, 4, generator=g)
            y = (x[:, 0] > 0).long()
            return TensorDataset(x, y), TensorDataset(x[:8], y[:8])
        """
    ),
    textwrap.dedent(
        """
        model = nn.Sequential(nn.Linear(4, 2))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        edt_m = FabricModel(model, getDatasets, F.cross_entropy, optimizer)
        edt_m.train(2, 4, 2)
        """
    ),
]


async def test_a_notebook_train_submits_its_cells_follows_the_job_and_downloads(alice, tmp_path):
    from jupyter_edt.compat.notebook import submit_and_wait

    model = torch.nn.Sequential(torch.nn.Linear(4, 2))
    fm = FabricModel(model, lambda: None, F.cross_entropy, torch.optim.SGD(model.parameters()))
    out = io.StringIO()
    fm.job = await asyncio.to_thread(
        submit_and_wait,
        fm,
        2,
        4,
        2,
        client=alice,
        cells=NOTEBOOK_CELLS,
        stream=out,
        timeout=DEADLINE_S,
    )
    text = out.getvalue()
    assert text.rstrip().endswith(f"Job {fm.job.id} finishes with state FINISHED."), text
    assert "epoch" in text  # the live progress line
    steps = await asyncio.to_thread(fm.job.metrics, "step", as_frame=False)
    assert len(steps) == 2 * 4 and {s["world_size"] for s in steps} == {2}
    path = await asyncio.to_thread(fm.download, tmp_path / "out")
    assert path == tmp_path / "out" / f"{fm.job.id}.zip"
    assert "model/model_epoch_final.pth" in zipfile.ZipFile(path).namelist()


async def test_a_failed_notebook_job_says_why_under_its_final_line(alice):
    from jupyter_edt.compat.notebook import submit_and_wait

    model = torch.nn.Linear(4, 2)
    fm = FabricModel(model, lambda: None, F.cross_entropy, torch.optim.SGD(model.parameters()))
    out = io.StringIO()
    cells = ["import sys", "raise RuntimeError('the broken cell')"]
    job = await asyncio.to_thread(
        submit_and_wait, fm, 1, 4, 1, client=alice, cells=cells, stream=out, timeout=DEADLINE_S
    )
    text = out.getvalue()
    assert f"Job {job.id} finishes with state FAILED.\n" in text, text
    assert "RuntimeError: the broken cell" in text.split("finishes with state FAILED.")[1]
