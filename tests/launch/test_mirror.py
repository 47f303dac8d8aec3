"""A job directory's copy on a node without the service's file system (launch/mirror.py):
packed, unpacked, paths relocated, and what the process writes applied back, byte for byte."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jupyter_edt.launch.base import ProcessSpec
from jupyter_edt.launch.mirror import Chunk, Mirror, apply, pack


def tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.startswith(".")
    }


@pytest.fixture
def job(tmp_path) -> Path:
    d = tmp_path / "jobs" / "j1"
    (d / "code").mkdir(parents=True)
    (d / "code" / "train.py").write_text("print('hi')\n")
    (d / "result" / "checkpoint").mkdir(parents=True)
    (d / "result" / "checkpoint" / "ckpt-000000004.pt").write_bytes(b"old")
    (d / "result" / "checkpoint" / "ckpt-000000008.pt").write_bytes(b"new")
    (d / "logs").mkdir()
    (d / "logs" / "driver.stdout").write_text("the driver's own\n")
    return d


def test_a_copy_holds_the_code_and_newest_checkpoint_with_paths_moved(job, tmp_path):
    mirror = Mirror(tmp_path / "node" / "copy", job)
    mirror.unpack(pack(job))
    assert tree(mirror.root) == {
        "code/train.py": b"print('hi')\n",
        "result/checkpoint/ckpt-000000008.pt": b"new",
    }
    assert (mirror.root / "logs").is_dir()
    spec = ProcessSpec(
        job_id="j1",
        name="w0",
        argv=["python", "-m", "jupyter_edt.runtime.worker", str(job / "code" / "train.py")],
        cwd=job / "code",
        log_dir=job / "logs",
        env={"RESULT_DIR": str(job / "result"), "OTHER": f"{job}x", "HOME": "/home/a"},
    )
    moved = mirror.relocate(spec)
    assert moved.cwd == mirror.root / "code" and moved.log_dir == mirror.root / "logs"
    assert moved.argv[-1] == str(mirror.root / "code" / "train.py")
    assert moved.env == {
        "RESULT_DIR": str(mirror.root / "result"),
        "OTHER": f"{job}x",  # only paths below the job directory move
        "HOME": "/home/a",
    }
    assert mirror.collect() == []  # what came from the job directory is not sent back


def test_what_the_process_writes_reaches_the_job_directory(job, tmp_path):
    mirror = Mirror(tmp_path / "copy", job)
    mirror.unpack(pack(job))
    events = mirror.root / "logs" / "events-w0.jsonl"
    events.write_text('{"step": 0}\n')
    first = mirror.collect()
    assert first == [Chunk("logs/events-w0.jsonl", -1, b'{"step": 0}\n')]
    with events.open("a") as f:
        f.write('{"step": 1}\n')
    assert mirror.collect() == [Chunk("logs/events-w0.jsonl", 12, b'{"step": 1}\n')]
    # an atomic save: a new file renamed over the old one, sent whole
    model = mirror.root / "result" / "model" / "final.pth"
    model.parent.mkdir()
    model.write_bytes(b"v1")
    staged = model.with_name(".final.pth.tmp-1")
    staged.write_bytes(b"version 2")
    assert [c.path for c in mirror.collect()] == ["result/model/final.pth"]  # not the dot file
    os.replace(staged, model)
    # a rewrite in place that grew is not mistaken for an append
    notes = mirror.root / "result" / "notes.txt"
    notes.write_text("abc")
    second = mirror.collect()
    assert Chunk("result/model/final.pth", -1, b"version 2") in second
    notes.write_text("xyz and more")
    # an old checkpoint pruned
    (mirror.root / "result" / "checkpoint" / "ckpt-000000008.pt").unlink()
    (mirror.root / "result" / "checkpoint" / "ckpt-000000012.pt").write_bytes(b"newer")
    changes = mirror.collect()
    assert Chunk("result/notes.txt", -1, b"xyz and more") in changes
    assert Chunk("result/checkpoint/ckpt-000000008.pt", -1, None) in changes

    appended = [Chunk("logs/events-w0.jsonl", 12, b'{"step": 1}\n')]
    for chunks in (first, appended, second, changes):
        apply(job, chunks)
    mirrored = {k: v for k, v in tree(mirror.root).items() if not k.startswith("code/")}
    ours = {k: v for k, v in tree(job).items() if not k.startswith("code/")}
    assert ours == {
        **mirrored,
        "logs/driver.stdout": b"the driver's own\n",
        "result/checkpoint/ckpt-000000004.pt": b"old",
    }


@pytest.mark.parametrize("path", ["../escape", "/etc/passwd", "code/train.py", "logs/../../x"])
def test_chunks_stay_in_the_written_parts_of_the_job_directory(job, path):
    with pytest.raises(ValueError, match="mirrored path"):
        apply(job, [Chunk(path, -1, b"x")])
    assert (job / "code" / "train.py").read_text() == "print('hi')\n"
