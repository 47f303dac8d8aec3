"""A job's metric records from its workers' event files: each step and epoch once, whichever
worker's copy arrives, none lost with a worker and none twice across a server restart or a
resumed driver (whose files still hold the earlier runs' lines), its plugins' files alike."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from jupyter_edt.compat.formats import emetrics_line
from jupyter_edt.compat.plugin import WMLAPlugin
from jupyter_edt.jobs.metrics import METRIC_EVENTS, JobMetricsTail, MetricRecords, ReadFrom
from jupyter_edt.jobs.models import JobSpec
from jupyter_edt.jobs.store import JobStore
from jupyter_edt.runtime.events import EventLog


def train(log: EventLog, rank: int, steps: range, *, epoch: int = 0) -> None:
    """What a worker of rank `rank` writes for these steps (the values every worker shares)."""
    for s in steps:
        log.emit("step", generation=1, rank=rank, epoch=epoch, global_step=s, loss=1.0 / (s + 1))


def steps_of(records: list[dict]) -> list[int]:
    return [r["global_step"] for r in records if r["type"] == "step"]


def test_each_step_is_taken_once_from_whichever_worker_wrote_it(tmp_path):
    w0, w1 = EventLog(tmp_path, "w0", run="r1"), EventLog(tmp_path, "w1", run="r1")
    for log, rank in ((w0, 0), (w1, 1)):
        log.emit("train_begin", generation=1, rank=rank, epoch=0, global_step=0)
    train(w0, 0, range(3))  # rank 0 is lost after step 2 (its node died with the rest)
    train(w1, 1, range(5))
    w1.emit("epoch", generation=1, rank=1, epoch=0, val_loss=0.5)
    tail = JobMetricsTail(tmp_path, tmp_path)
    records = tail.read_new()
    assert steps_of(records) == [0, 1, 2, 3, 4]
    assert [r["epoch"] for r in records if r["type"] == "epoch"] == [0]
    assert [r["type"] for r in records].count("train_begin") == 1  # rank 0's own start
    # who reported it is not part of the job's record; which run is
    assert all({"seq", "pid", "worker", "rank"}.isdisjoint(r) and r["run"] == "r1" for r in records)
    assert [r["loss"] for r in records if r["type"] == "step"] == [1.0, 0.5, 1 / 3, 0.25, 0.2]

    # a copy that comes late (a remote worker's file, copied back later) is not taken again
    train(w0, 0, range(3, 6))
    train(w1, 1, range(5, 6))
    assert steps_of(tail.read_new()) == [5]
    assert tail.read_new() == []


def test_a_resumed_job_is_a_new_run_and_reports_its_steps_again(tmp_path):
    train(EventLog(tmp_path, "w0", run="first"), 0, range(4))
    tail = JobMetricsTail(tmp_path, tmp_path)
    assert steps_of(tail.read_new()) == [0, 1, 2, 3]
    train(EventLog(tmp_path, "w0", run="second"), 0, range(2, 4))  # from its checkpoint
    again = tail.read_new()
    assert steps_of(again) == [2, 3] and {r["run"] for r in again} == {"second"}


def test_events_of_a_runtime_without_runs_count_from_rank_0(tmp_path):
    train(EventLog(tmp_path, "w0"), 0, range(2))
    train(EventLog(tmp_path, "w1"), 1, range(2))
    records = MetricRecords().pick(
        [{"type": "step", "rank": r, "global_step": s} for s in range(2) for r in (0, 1)]
    )
    assert records == [{"type": "step", "global_step": 0}, {"type": "step", "global_step": 1}]
    assert steps_of(JobMetricsTail(tmp_path, tmp_path).read_new()) == [0, 1]


def store_read(store: JobStore, job_id: str, tail: JobMetricsTail) -> None:
    """What the service does each collection: the records and how far they were read."""
    store.add_metrics_many({job_id: tail.read_new()}, positions={job_id: tail.positions()})


def read_from(store: JobStore, job_id: str) -> ReadFrom:
    """What the service tells a runner that follows the job again (`JobService.read_from`)."""
    return ReadFrom(store.read_positions(job_id), store.latest_metrics(job_id, METRIC_EVENTS))


def test_a_restarted_server_reads_on_and_stores_nothing_twice(tmp_path):
    store = JobStore(f"sqlite:///{tmp_path / 'edt.sqlite'}")
    job = store.create_job("ana", JobSpec.from_dict({"code": "print(1)", "max_gpus": 2}))
    logs = tmp_path / "logs"
    w0, w1 = EventLog(logs, "w0", run="r"), EventLog(logs, "w1", run="r")
    for log, rank in ((w0, 0), (w1, 1)):
        log.emit("train_begin", generation=1, rank=rank, epoch=0, global_step=0)
        train(log, rank, range(4))
        log.emit("epoch", generation=1, rank=rank, epoch=0, val_loss=0.5)
    train(w0, 0, range(4, 6), epoch=1)  # w1's copies of steps 4 and 5 are not written yet
    store_read(store, job.id, JobMetricsTail(tmp_path, logs))
    # the server restarts; the workers go on
    train(w1, 1, range(4, 6), epoch=1)
    for log, rank in ((w0, 0), (w1, 1)):
        train(log, rank, range(6, 8), epoch=1)
        log.emit("epoch", generation=1, rank=rank, epoch=1, val_loss=0.25)
    start = read_from(store, job.id)
    assert {r["type"] for r in start.taken} == set(METRIC_EVENTS)
    assert set(start.positions) == {"logs/events-w0.jsonl", "logs/events-w1.jsonl"}
    store_read(store, job.id, JobMetricsTail(tmp_path, logs, start=start))
    kept = store.metrics(job.id)
    assert steps_of(kept) == list(range(8))
    assert [r["epoch"] for r in kept if r["type"] == "epoch"] == [0, 1]
    assert [r["type"] for r in kept].count("train_begin") == 1
    store.close()


def test_a_resumed_driver_reads_on_where_the_first_stopped(tmp_path):
    """Its workers append to the same files; the first run's lines are not its records."""
    store = JobStore(f"sqlite:///{tmp_path / 'edt.sqlite'}")
    job = store.create_job("ana", JobSpec.from_dict({"code": "print(1)", "max_gpus": 2}))
    logs = tmp_path / "logs"
    train(EventLog(logs, "w0", run="first"), 0, range(5))
    store_read(store, job.id, JobMetricsTail(tmp_path, logs))
    train(EventLog(logs, "w0", run="second"), 0, range(3, 6))  # from its checkpoint at 3
    store_read(store, job.id, JobMetricsTail(tmp_path, logs, start=read_from(store, job.id)))
    kept = store.metrics(job.id)
    assert [(r["run"], r["global_step"]) for r in kept] == [
        *(("first", s) for s in range(5)),
        *(("second", s) for s in range(3, 6)),
    ]
    store.close()


def test_a_plugins_metric_files_are_read_on_across_a_restart(tmp_path):
    """WMLA's emetrics lines have no step of the runtime's to tell a copy: where their
    reading stopped is kept with the records."""
    store = JobStore(f"sqlite:///{tmp_path / 'edt.sqlite'}")
    job = store.create_job("ana", JobSpec.from_dict({"code": "print(1)", "max_gpus": 2}))
    plugins = [WMLAPlugin(tmp_path / "fabric")]
    emetrics = tmp_path / "result" / "log" / "w0" / "evaluation-metrics.txt"
    emetrics.parent.mkdir(parents=True)
    (tmp_path / "logs").mkdir()

    def write(iterations: range) -> None:
        with emetrics.open("a") as f:
            for i in iterations:
                f.write(emetrics_line("j", "train", i, {"loss": 1 / (i + 1)}, rindex=i) + "\n")

    write(range(3))
    read = emetrics.stat().st_size
    store_read(store, job.id, JobMetricsTail(tmp_path, tmp_path / "logs", plugins))
    write(range(3, 5))  # while the server was down
    start = read_from(store, job.id)
    assert start.positions == {"result/log/w0/evaluation-metrics.txt": read}
    store_read(store, job.id, JobMetricsTail(tmp_path, tmp_path / "logs", plugins, start))
    assert [r["iteration"] for r in store.metrics(job.id)] == [0, 1, 2, 3, 4]
    store.delete_job(job.id)  # and its positions with it
    with store.engine.connect() as db:
        assert db.execute(text("SELECT count(*) FROM edt_read_positions")).scalar() == 0
    store.close()


@pytest.mark.parametrize("kind", ["step", "epoch"])
def test_a_record_without_its_index_counts_from_rank_0(kind):
    picked = MetricRecords().pick(
        [{"type": kind, "run": "r", "rank": 1}, {"type": kind, "run": "r", "rank": 0}]
    )
    assert picked == [{"type": kind, "run": "r"}]
