"""Reading job logs: names, tail, follow by offset, and refusing unknown names."""

from __future__ import annotations

import os

import pytest

from jupyter_edt.jobs.logs import list_logs, read_log


@pytest.fixture
def log_dir(tmp_path):
    (tmp_path / "w1.out").write_text("worker one\n")
    (tmp_path / "driver.stderr").write_text("")
    (tmp_path / "driver.stdout").write_text("".join(f"line {i}\n" for i in range(10)))
    (tmp_path / "events-w1.jsonl").write_text("{}\n")  # not a log: events feed the metrics
    return tmp_path


def test_names_put_the_driver_first(log_dir):
    assert list_logs(log_dir) == ["driver.stderr", "driver.stdout", "w1.out"]
    assert list_logs(log_dir / "missing") == []


def test_tail_then_follow(log_dir):
    chunk = read_log(log_dir, "driver.stdout", tail=2)
    assert chunk.text == "line 8\nline 9\n"
    assert chunk.next_offset == chunk.size
    with (log_dir / "driver.stdout").open("a") as f:
        f.write("line 10\n")
    more = read_log(log_dir, "driver.stdout", offset=chunk.next_offset)
    assert more.text == "line 10\n" and more.offset == chunk.size
    assert read_log(log_dir, "driver.stdout", offset=more.next_offset).text == ""
    assert read_log(log_dir, "driver.stdout", offset=10**9).text == ""


def test_unknown_and_escaping_names_are_refused(log_dir):
    for name in ("nope.log", "../etc/passwd", "events-w1.jsonl"):
        with pytest.raises(ValueError, match="no log named"):
            read_log(log_dir, name, tail=5)


def test_a_log_is_read_only_as_a_regular_file_reached_without_links(tmp_path):
    """A job running as its user owns its log directory: a link it plants there to a file only
    the service may read, or a fifo, must not be read (or hang the reader)."""
    from jupyter_edt.jobs.metrics import EventTail

    secret = tmp_path / "secret"
    secret.write_text('{"loss": 1.0, "type": "step"}\nthe service\'s secret\n')
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "leak.log").symlink_to(secret)
    os.mkfifo(logs / "stall.log")
    (logs / "events-w0.jsonl").symlink_to(secret)
    for name in ("leak.log", "stall.log"):
        assert name in list_logs(logs)
        with pytest.raises(ValueError, match=f"no log named '{name}'"):
            read_log(logs, name, tail=10)
    assert EventTail(logs).read_new() == []
