"""A job directory's copy on a node without the service's file system (launch/mirror.py):
packed, unpacked, paths relocated, and what the process writes applied back, byte for byte."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jupyter_edt.launch.base import ProcessSpec
from jupyter_edt.launch.mirror import APPEND, Chunk, Mirror, apply, pack


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
    assert first == [Chunk("logs/events-w0.jsonl", APPEND, b'{"step": 0}\n')]  # a log
    with events.open("a") as f:
        f.write('{"step": 1}\n')
    assert mirror.collect() == [Chunk("logs/events-w0.jsonl", APPEND, b'{"step": 1}\n')]
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

    appended = [Chunk("logs/events-w0.jsonl", APPEND, b'{"step": 1}\n')]
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


def test_a_checkpoint_collected_brings_the_records_written_before_it(job, tmp_path):
    """The process records an epoch, then checkpoints it, while a collection walks the copy
    (here: right after the walk's first file). Whatever the interleaving, a collection that
    sends the checkpoint sends the record too: a node lost right after it loses neither."""
    mirror = Mirror(tmp_path / "node" / "copy", job)
    mirror.unpack(pack(job))
    events = mirror.root / "logs" / "events-w0.jsonl"
    events.write_text('{"type": "step"}\n')
    mirror.collect()
    checkpoint = mirror.root / "result" / "checkpoint" / "ckpt-000000012.pt"
    record = '{"type": "epoch"}\n'
    walked = mirror._files

    def walk_while_the_process_writes():
        for i, path in enumerate(walked()):
            yield path
            if i == 0:  # the process goes on meanwhile: the record, then the checkpoint
                with events.open("a") as f:
                    f.write(record)
                checkpoint.write_bytes(b"epoch 2")

    mirror._files = walk_while_the_process_writes  # type: ignore[method-assign]
    record_sent = False
    for _ in range(2):  # the checkpoint is sent by the first collection or the next
        chunks = {c.path: c for c in mirror.collect()}
        sent = chunks.get("logs/events-w0.jsonl")
        record_sent |= sent is not None and record.encode() in (sent.data or b"")
        if "result/checkpoint/ckpt-000000012.pt" in chunks:
            assert record_sent, chunks
            break
        mirror._files = walked  # type: ignore[method-assign]
    else:
        raise AssertionError("the checkpoint never came back")


def test_a_resumed_jobs_copy_adds_its_logs_after_the_earlier_runs(job, tmp_path):
    """A job resumed on a node (its first run's node died): the new copy starts without the
    logs, and what its processes write goes after the earlier run's lines, as on one machine
    where they append to the same files. Results are replaced as before."""
    earlier = '{"type": "epoch", "epoch": 0}\n'
    (job / "logs" / "events-w0.jsonl").write_text(earlier)
    (job / "result" / "log" / "w0").mkdir(parents=True)
    (job / "result" / "log" / "w0" / "stdout").write_text("run 1\n")
    mirror = Mirror(tmp_path / "resumed", job)
    mirror.unpack(pack(job))
    later = '{"type": "epoch", "epoch": 1}\n'
    (mirror.root / "logs" / "events-w0.jsonl").write_text(later)
    (mirror.root / "result" / "log" / "w0").mkdir(parents=True)
    (mirror.root / "result" / "log" / "w0" / "stdout").write_text("run 2\n")
    (mirror.root / "result" / "checkpoint" / "ckpt-000000008.pt").write_bytes(b"newest")
    apply(job, mirror.collect())
    assert (job / "logs" / "events-w0.jsonl").read_text() == earlier + later
    assert (job / "result" / "log" / "w0" / "stdout").read_text() == "run 1\nrun 2\n"
    assert (job / "result" / "checkpoint" / "ckpt-000000008.pt").read_bytes() == b"newest"
