"""A client written as WMLA's tutorial notebooks write theirs (``requests``, the args pasted into
the URL unencoded, the log read into pandas, the result downloaded with the size from
Content-Disposition), against a real Jupyter server at WMLA's own paths, with a CPD-era program
that imports ``callbacks`` and ``fabric_model`` with no ``sys.path`` change of its own.

The client is tests/wmlaclient.py's (the Hub's test drives it through a user's server). Its
credentials are one parameter (``auth``, anything ``requests`` takes): here the token header
that names a user of this multi-user server; WMLA's Basic ``(user, password)`` drops in."""

from __future__ import annotations

import io
import json
import zipfile

import pandas as pd
import pytest
import requests
import torch
from waiting import eventually
from wmla_program import FILES, model_dir_tar
from wmlaclient import (
    CPD_MAIN,
    DL,
    ELOG_COLUMNS,
    TokenAuth,
    TutorialClient,
    call,
    log_frame,
    wait_state,
)

from jupyter_edt.compat.formats import parse_elog_line
from jupyter_edt.compat.wmla import instance_group_id

pytestmark = pytest.mark.multi_user

EPOCHS, STEPS_PER_EPOCH = 2, 4  # 32 samples, a global batch of 4 x 2 workers


@pytest.fixture
def edt_config(tmp_path):
    return {
        "devices": "virtual",
        "virtual_gpus": 2,
        "min_rescale_interval": 0.0,
        "warm_workers": False,
        "data_root": str(tmp_path / "dli-data"),
    }


async def test_a_tutorial_client_submits_monitors_reads_logs_and_downloads(
    server_url, edt_app, tmp_path
):
    data = tmp_path / "dli-data" / "mnist-data"
    data.mkdir(parents=True)
    tar = tmp_path / "mnist.modelDir.tar"
    tar.write_bytes(model_dir_tar(files={**FILES, "main.py": CPD_MAIN}))
    client = TutorialClient(server_url + DL, TokenAuth("alice"))

    conf = await call(client.get, "/conf")
    assert conf.ok and conf.json()["dataRoot"] is True
    frameworks = (await call(client.get, "/execs/frameworks")).json()
    assert [f["name"] for f in frameworks] == ["edtPyTorch"]
    assert frameworks[0]["frameworkVersion"] == torch.__version__
    assert isinstance(frameworks[0]["desc"], list) and frameworks[0]["description"]

    # spaces, '=' and ',' raw in the URL, as the tutorials paste them
    args = (
        "--exec-start edtPyTorch --cs-datastore-meta type=fs,data_path=mnist-data "
        f"--model-dir mnist --edt-options maxWorkers=2 --model-main main.py --epochs {EPOCHS}"
    )
    r = await call(client.submit, args, tar, "any-instance-group")
    assert r.status_code == 201, r.text
    submitted = r.json()
    exec_id = submitted["id"]
    assert submitted["args"] == args
    assert submitted["sigId"] == instance_group_id(edt_app.jobs_dir)
    assert submitted["submissionId"] == exec_id == submitted["appId"]
    assert submitted["creator"] == "alice" and submitted["createTime"].endswith("Z")
    assert submitted["nameSpace"] == "jupyter-edt"
    assert submitted["schedulerUrl"] == server_url + DL  # this server, as the client called it
    assert (submitted["elastic"], submitted["framework"], submitted["numWorker"]) == (
        True,
        "edtPyTorch",
        2,
    )
    pd.DataFrame(submitted, index=[0])  # as the CPD notebook shows it

    running = await wait_state(client, exec_id, lambda e: e["state"] == "RUNNING", "RUNNING")
    assert running["workDir"] == submitted["workDir"]
    # an executor's output while it runs (held: its output stays as it is)
    stdout = f"/scheduler/applications/{exec_id}/executor/1/logs/stdout"
    await eventually(
        lambda: call(client.get, stdout, headers={"Accept": "text/plain"}),
        "printed its environment",
        until=lambda r: r.ok and "environment:" in r.text,
    )
    last = await call(
        client.get, stdout, params={"lastlines": "2"}, headers={"Accept": "text/plain"}
    )
    assert last.headers["Content-Type"].startswith("text/plain")
    assert len(last.text.splitlines()) == 2
    (data / "go").touch()
    done = await wait_state(
        client, exec_id, lambda e: e["state"] not in ("SUBMITTED", "RUNNING"), "done"
    )
    assert done["state"] == "FINISHED", done

    # the training log: ELog lines only, which the tutorial's pandas parse reads as numbers
    r = await call(client.get, "/execs/" + exec_id + "/log")
    log = r.json()
    lines = log.splitlines()
    assert lines and all(parse_elog_line(line) for line in lines), log
    train = [parse_elog_line(line) for line in lines if "] Train," in line]
    assert [f["global_steps"] for f in train] == list(range(1, EPOCHS * STEPS_PER_EPOCH + 1))
    assert len(lines) - len(train) == EPOCHS  # a Test line an epoch
    frame = log_frame(log)
    assert len(frame) == len(lines)
    assert all(pd.api.types.is_numeric_dtype(frame[c]) for c in ELOG_COLUMNS), frame.dtypes
    raw = await call(client.get, "/execs/" + exec_id + "/log", headers={"Accept": "text/plain"})
    assert raw.text == log and raw.headers["Content-Type"].startswith("text/plain")

    # the program's own output, stdout and stderr
    outlog = (await call(client.get, f"/execs/{exec_id}/log", params={"logType": "outlog"})).json()
    argv = [json.loads(line[5:]) for line in outlog.splitlines() if line.startswith("argv:")]
    assert len(argv) == 2  # both workers
    assert argv[0][-4:] == ["--epochs", str(EPOCHS), "--numWorker", "2"]  # as WMLA passes it
    assert "a line for stderr" in outlog and "a warning as torch would print one" in outlog
    assert "epoch ended: 1" in outlog  # the user callback, a `callbacks.Callback`
    env = [json.loads(line[12:]) for line in outlog.splitlines() if line.startswith("environment:")]
    assert env[0]["DATA_DIR"] == str(data)
    errlog = await call(client.get, f"/execs/{exec_id}/log", params={"logType": "errlog"})
    assert errlog.ok and isinstance(errlog.json(), str)
    whole = await call(client.get, stdout, headers={"Accept": "text/plain"})
    assert last.text in whole.text

    # the result, with the size Content-Disposition announced
    out_zip = tmp_path / "model.zip"
    total, got = await call(client.download, exec_id, out_zip)
    assert total == got == out_zip.stat().st_size
    names = set(zipfile.ZipFile(out_zip).namelist())
    for name in (
        "model/train/model_epoch_final.pth",
        "model/train/model_epoch_final_optimizer_state.pth",
        f"model/train/model_epoch_{EPOCHS}.pth",
        f"model/train/model_epoch_{EPOCHS}_optimizer_state.pth",
        "model/model_epoch_final.pth",
    ):
        assert name in names, sorted(names)
    final = torch.load(
        io.BytesIO(zipfile.ZipFile(out_zip).read("model/train/model_epoch_final.pth")),
        weights_only=True,
    )
    assert set(final) == {"conv1.weight", "conv1.bias", "fc1.weight", "fc1.bias"}

    # bad requests say what is wrong; another user finds nothing
    r = await call(
        client.get,
        f"/scheduler/applications/{exec_id}/executor/1/logs/stderr",
        params={"lastlines": "0"},
    )
    assert r.status_code == 400 and r.json()["field"] == "lastlines"
    r = await call(client.get, f"/scheduler/applications/{exec_id}/executor/9/logs/stdout")
    assert r.status_code == 404
    bob = TutorialClient(server_url + DL, TokenAuth("bob"))
    for path in (
        f"/execs/{exec_id}",
        f"/execs/{exec_id}/log",
        f"/execs/{exec_id}/result",
        f"/scheduler/applications/{exec_id}/executor/1/logs/stdout",
    ):
        assert (await call(bob.get, path)).status_code == 404, path

    # the first prefix is an alias of WMLA's
    old = TutorialClient(server_url + "edt/api/wmla/v1", TokenAuth("alice"))
    assert (await call(old.get, "/execs/" + exec_id)).json()["id"] == exec_id
    assert (await call(old.get, "/execs/" + exec_id + "/log")).json() == log


async def test_a_data_path_that_leaves_the_data_root_is_refused(server_url, tmp_path):
    root = tmp_path / "dli-data"
    root.mkdir()
    (root / "link-out").symlink_to(tmp_path)
    tar = tmp_path / "mnist.modelDir.tar"
    tar.write_bytes(model_dir_tar())
    client = TutorialClient(server_url + DL, TokenAuth("alice"))
    for data_path in ("../outside", "/etc", "inside/../../outside", "link-out"):
        args = (
            f"--exec-start edtPyTorch --cs-datastore-meta type=fs,data_path={data_path} "
            "--model-dir mnist --model-main main.py"
        )
        r = await call(client.submit, args, tar)
        assert r.status_code == 400 and r.json()["field"] == "args", r.text
        assert f"data_path: {data_path!r}" in r.json()["message"]
    assert (await call(client.get, "/execs")).json() == {"execs": []}
    native = await call(requests.get, server_url + "edt/api/v1/jobs", auth=TokenAuth("alice"))
    assert native.json()["jobs"] == []  # nothing stored
