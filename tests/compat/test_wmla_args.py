"""How an exec's request is read, without a server: the query string as WMLA's clients send it,
both argument styles, and where DATA_DIR may point."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
import requests

from jupyter_edt.compat.execargs import exec_query, parse_exec_args
from jupyter_edt.compat.execs import data_dir, lastlines
from jupyter_edt.compat.wmla import executor_number, executor_worker, instance_group_id
from jupyter_edt.jobs.models import SpecError

ARGS = (
    "--exec-start edtPyTorch --cs-datastore-meta type=fs,data_path=mnist "
    "--model-dir mnist --edt-options maxWorkers=4 --model-main main.py --epochs 10"
)


def sent_query(url: str, **kw) -> str:
    """The query string `requests` puts on the wire for `url`."""
    return urlsplit(requests.Request("POST", url, **kw).prepare().url).query


@pytest.mark.parametrize(
    "args",
    [
        ARGS,
        ARGS + " --note a&b --lr 1e+3 --tag 50%",  # '&' not before a name=, '+', '%'
    ],
)
def test_args_pasted_into_the_url_arrive_intact(args):
    query = sent_query("http://h/execs?sigName=ig&args=" + args)
    assert "%20" in query and "type=fs,data_path=mnist" in query  # what requests sends
    assert exec_query(query) == {"sigName": "ig", "args": args}


def test_args_form_encoded_arrive_intact():
    args = ARGS + " --lr 1e+3"
    query = sent_query("http://h/execs", params={"args": args})
    assert "+" in query and "%2B" in query  # spaces as '+', a plus quoted
    assert exec_query(query) == {"args": args}
    assert exec_query("args=--exec-start+edtPyTorch&sigName=x&args=second") == {
        "args": "--exec-start edtPyTorch",
        "sigName": "x",
    }


def test_both_styles_give_the_program_numWorker():
    max_workers = parse_exec_args(ARGS)
    assert max_workers.max_workers == 4
    assert max_workers.program_args == ("--epochs", "10", "--numWorker", "4")
    num_worker = parse_exec_args(
        "--exec-start edtPyTorch --cs-datastore-meta type=fs --numWorker 2 "
        "--model-main elastic-main.py --model-dir resnet-wmla --epochs 3"
    )
    assert num_worker.max_workers == 2 and num_worker.datastore and num_worker.data_path is None
    assert num_worker.program_args == ("--numWorker", "2", "--epochs", "3")
    plain = parse_exec_args("--exec-start edtPyTorch --model-main m.py")
    assert plain.program_args == () and not plain.datastore


def test_data_dir_stays_inside_the_data_root(tmp_path):
    root = tmp_path / "data"
    (root / "alice" / "mnist").mkdir(parents=True)
    (root / "alice" / "out").symlink_to(tmp_path)
    (root / "alice" / "in").symlink_to(root / "alice" / "mnist")
    template = str(root / "{username}")
    assert data_dir(template, "alice", "mnist", True) == str(root / "alice" / "mnist")
    assert data_dir(template, "alice", "./mnist/", True) == str(root / "alice" / "mnist")
    assert data_dir(template, "alice", "in", True) == str(root / "alice" / "in")
    assert data_dir(template, "alice", "not-yet", True) == str(root / "alice" / "not-yet")
    assert data_dir(template, "alice", None, True) == str(root / "alice")
    assert data_dir(template, "alice", "mnist", False) is None
    for bad in ("../bob", "/etc", "mnist/../../bob", "out", "out/x"):
        with pytest.raises(SpecError, match="data_path") as info:
            data_dir(template, "alice", bad, True)
        assert info.value.field == "args" and repr(bad) in info.value.message
    with pytest.raises(SpecError, match="user name"):
        data_dir(template, "..", "mnist", True)
    # no data root: a folder on this machine, named whole, as before data roots
    assert data_dir("", "alice", str(tmp_path), True) == str(tmp_path)
    assert data_dir("", "alice", None, True) is None
    with pytest.raises(SpecError, match="no data root"):
        data_dir("", "alice", "mnist", True)


def test_executors_instance_group_and_lastlines():
    assert [executor_worker(n) for n in (1, 2, 11)] == ["w0", "w1", "w10"]
    assert [executor_number(w) for w in ("w0", "w10", "driver")] == [1, 11, None]
    with pytest.raises(ValueError):
        executor_worker(0)
    assert instance_group_id("/srv/jobs") == instance_group_id("/srv/jobs/")
    assert instance_group_id("/srv/jobs") != instance_group_id("/srv/other")
    assert lastlines(None) is None and lastlines("1000") == 1000
    for bad in ("0", "-1", "x", "100001", ""):
        with pytest.raises(SpecError) as info:
            lastlines(bad)
        assert info.value.field == "lastlines"
