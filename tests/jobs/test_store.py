"""The job store through SQLAlchemy, on a real SQLite file and on a real PostgreSQL
(`database_url`); what only an SQLite file can get wrong, on SQLite alone. Concurrent writers
and a lost connection are in test_store_concurrency."""

from __future__ import annotations

import dataclasses
import sqlite3

import pytest
from sqlalchemy import create_engine, text

from jupyter_edt.jobs.models import InvalidTransition, JobSpec, JobState, SpecError
from jupyter_edt.jobs.store import SCHEMA_VERSION, JobStore, StoreError, UnknownJob


@pytest.fixture
def db_url(tmp_path):
    """An SQLite file, for what only a file can get wrong."""
    return f"sqlite:///{tmp_path / 'edt.sqlite'}"


@pytest.fixture
def store(database_url):
    s = JobStore(database_url, metrics_cap=40)
    yield s
    s.close()


def spec(**kw):
    return JobSpec.from_dict({"code": "print(1)", "max_gpus": 2, **kw})


def test_jobs_survive_a_restart_with_their_history(database_url):
    first = JobStore(database_url)
    submitted = 1_796_474_350.2703478  # a time.time(): both databases keep every bit of it
    job = first.create_job("ana", spec(name="mnist"), now=submitted)
    first.set_state(job.id, JobState.STARTING, "devices free", now=2.0)
    first.set_devices(job.id, ["vgpu0", "vgpu1"], "admitted", now=2.5)
    first.set_state(job.id, JobState.RUNNING, "workers up", now=3.0)
    first.close()

    second = JobStore(database_url)
    again = second.get_job(job.id)
    assert again.state == "RUNNING" and again.created == submitted
    assert again.devices == ("vgpu0", "vgpu1")
    assert again.spec.code == "print(1)"
    kinds = [(e["kind"], e.get("state"), e.get("devices")) for e in second.events()]
    assert kinds == [
        ("state", "QUEUED", None),
        ("state", "STARTING", None),
        ("allocation", None, ["vgpu0", "vgpu1"]),
        ("state", "RUNNING", None),
    ]
    second.close()


def test_finishing_releases_devices_and_is_final(store):
    job = store.create_job("ana", spec())
    store.set_state(job.id, JobState.STARTING, "go")
    store.set_devices(job.id, ["g0"], "admitted")
    store.set_state(job.id, JobState.RUNNING, "workers up")
    done = store.set_state(job.id, JobState.SUCCEEDED, "exit 0")
    assert done.devices == () and done.finished is not None
    assert store.events(job_id=job.id)[-2]["devices"] == []
    with pytest.raises(InvalidTransition, match="SUCCEEDED cannot become RUNNING"):
        store.set_state(job.id, JobState.RUNNING, "again")
    with pytest.raises(InvalidTransition, match="has finished"):
        store.update_limits(job.id, priority=3)


def test_events_resume_from_a_cursor_and_filter_by_user(store):
    a = store.create_job("ana", spec())
    cursor = store.events()[-1]["id"]
    b = store.create_job("bo", spec())
    store.update_limits(a.id, priority=4, max_gpus=3)
    newer = store.events(after=cursor)
    assert [e["job_id"] for e in newer] == [b.id, a.id]
    assert newer[1] == {**newer[1], "kind": "limits", "priority": 4, "max_gpus": 3}
    assert {e["job_id"] for e in store.events(user="bo")} == {b.id}


def test_list_filters_by_user_and_state(store):
    a = store.create_job("ana", spec(), now=1.0)
    b = store.create_job("ana", spec(), now=2.0)
    store.create_job("bo", spec(), now=3.0)
    store.set_state(a.id, JobState.CANCELLED, "by user")
    assert [j.id for j in store.list_jobs(user="ana")] == [b.id, a.id]
    assert [j.id for j in store.list_jobs(user="ana", states=[JobState.QUEUED])] == [b.id]


def test_metrics_are_thinned_past_the_cap_keeping_the_newest(store):
    job = store.create_job("ana", spec())
    for step in range(100):
        store.add_metrics(job.id, [{"step": step, "loss": 1.0 / (step + 1)}])
    kept = store.metrics(job.id)
    steps = [m["step"] for m in kept]
    assert len(kept) <= 40
    assert steps == sorted(steps)
    assert steps[-10:] == list(range(90, 100))  # the newest stay at full resolution
    assert steps[0] == 0  # the start of the curve survives
    after = store.metrics(job.id, after=kept[-3]["id"])
    assert [m["step"] for m in after] == [98, 99]


def test_deleting_a_job_removes_its_record_events_and_metrics_only(store):
    gone = store.create_job("ana", spec(), now=10.0)
    kept = store.create_job("ana", spec(), now=10.0)
    for job in (gone, kept):
        store.add_metrics(job.id, [{"step": 0, "loss": 1.0}])
    store.set_state(gone.id, JobState.STARTING, "given 2 GPU(s)", now=20.0)
    store.set_devices(gone.id, ["vgpu0", "vgpu1"], "given", now=20.0)
    store.set_state(gone.id, JobState.CANCELLED, "by ana", now=50.0)
    usage_before = store.usage_events(0.0, 100.0)
    assert store.delete_job(gone.id, now=60.0).state == "CANCELLED"
    with pytest.raises(UnknownJob):
        store.get_job(gone.id)
    with pytest.raises(UnknownJob):
        store.metrics(gone.id)
    assert {e["job_id"] for e in store.events()} == {kept.id}
    assert [j.id for j in store.list_jobs()] == [kept.id]
    assert [m["step"] for m in store.metrics(kept.id)] == [0]
    with pytest.raises(UnknownJob):
        store.delete_job(gone.id)
    with pytest.raises(UnknownJob):
        store.add_metrics(gone.id, [{"step": 1}])
    # the GPU-seconds it held stay in the usage report: ana cannot erase them by deleting it
    assert store.usage_events(0.0, 100.0) == usage_before
    assert {e["job_id"] for e in usage_before} == {gone.id, kept.id}


def test_what_one_database_refuses_is_stored_alike_on_every_one(store):
    """A loss that overflowed (NaN, inf: PostgreSQL's json refuses them) is stored as null, as
    the runtime writes it; a NUL (PostgreSQL's text refuses it, and its json cannot give a
    field of a value that holds one), as U+FFFD."""
    job = store.create_job("ana", spec(name="a\x00b"))
    record = {"step": 0, "loss": float("nan"), "norms": [float("inf"), 1.0]}
    store.add_metrics(job.id, [record, {"type": "step\x00", "note": "\\u0000 stays"}])
    store.set_state(job.id, JobState.FAILED, "its log ends: \x00oops")
    kept, named = store.metrics(job.id)
    assert (kept["loss"], kept["norms"]) == (None, [None, 1.0])
    assert (named["type"], named["note"]) == ("step\ufffd", "\\u0000 stays")
    (event,) = [e for e in store.events(job_id=job.id) if e["kind"] == "metrics"]
    assert event["records"][0] == {"step": 0, "loss": None, "norms": [None, 1.0]}
    again = store.get_job(job.id)
    assert (again.name, again.spec.name) == ("a\ufffdb", "a\ufffdb")
    assert again.reason == "its log ends: \ufffdoops"
    # the queries that read fields of JSON values still work, for this job and the others
    assert sum(store.count_jobs().values()) == 1
    assert store.latest_metrics(job.id, ["step\ufffd"]) == [named]


def test_unknown_job_is_a_clear_error(store):
    with pytest.raises(UnknownJob, match="No job with id 'nope'"):
        store.get_job("nope")
    with pytest.raises(UnknownJob):
        store.add_metrics("nope", [{"loss": 1.0}])


def test_lowering_max_below_min_is_refused_and_nothing_changes(store):
    job = store.create_job("ana", spec(min_gpus=2, max_gpus=4))
    with pytest.raises(ValueError, match="at least the job's min_gpus"):
        store.update_limits(job.id, max_gpus=1)
    assert store.get_job(job.id).max_gpus == 4


def test_a_file_that_is_not_sqlite_is_refused_and_left_alone(tmp_path):
    path = tmp_path / "edt.sqlite"
    path.write_bytes(b"these are somebody's notes, not a database\n" * 10)
    before = path.read_bytes()
    with pytest.raises(StoreError, match="is not an SQLite database"):
        JobStore(f"sqlite:///{path}")
    assert path.read_bytes() == before


def test_a_damaged_sqlite_file_is_refused_and_left_alone(tmp_path, db_url):
    store = JobStore(db_url)
    store.create_job("ana", spec())
    store.close()
    path = tmp_path / "edt.sqlite"
    data = bytearray(path.read_bytes())
    data[100:4096] = b"\xff" * (4096 - 100)  # destroy the schema page after the header
    path.write_bytes(bytes(data))
    for suffix in ("-wal", "-shm"):
        (tmp_path / f"edt.sqlite{suffix}").unlink(missing_ok=True)
    with pytest.raises(StoreError, match="cannot be read"):
        JobStore(db_url)
    assert path.read_bytes() == bytes(data)


def test_a_postgresql_role_that_may_not_create_the_tables_is_told_so(postgresql):
    url = postgresql.database()
    role = f"reader_{url.rsplit('_', 1)[-1]}"  # roles are the server's, not the database's
    engine = create_engine(url)
    with engine.begin() as db:
        db.execute(text(f"CREATE ROLE {role} LOGIN"))  # PostgreSQL 15: no CREATE in public
    engine.dispose()
    with pytest.raises(StoreError, match=r"permission denied .* may create tables there"):
        JobStore(url.replace("://edt@", f"://{role}@"))


def test_a_missing_database_is_created_with_its_directory(tmp_path):
    path = tmp_path / "deep" / "er" / "edt.sqlite"
    store = JobStore(f"sqlite:///{path}")
    store.close()
    version = sqlite3.connect(path).execute("select value from edt_meta").fetchone()
    assert version == (str(SCHEMA_VERSION),)


#: How to undo each migration (`MIGRATIONS`): a database of an older version, as it was left.
UNDO = {
    2: ("ALTER TABLE edt_jobs DROP COLUMN deleted",),
    1: (
        "ALTER TABLE edt_jobs DROP COLUMN elastic",
        "ALTER TABLE edt_jobs DROP COLUMN restarts",
    ),
}


def make_older(url: str, version: int) -> None:
    """Turn the database at `url` into one of schema `version`."""
    engine = create_engine(url)
    with engine.begin() as db:
        for undone in range(SCHEMA_VERSION - 1, version - 1, -1):
            for statement in UNDO[undone]:
                db.execute(text(statement))
        db.execute(text("DROP INDEX ix_edt_events_kind_time"))  # made wherever it is missing
        db.execute(text("UPDATE edt_meta SET value = :v"), {"v": str(version)})
    engine.dispose()


def schema_version(url: str) -> str:
    engine = create_engine(url)
    with engine.connect() as db:
        version = db.execute(text("SELECT value FROM edt_meta")).scalar_one()
    engine.dispose()
    return version


@pytest.mark.parametrize("version", [1, 2])
def test_an_older_database_is_upgraded_in_place_keeping_its_jobs(database_url, version):
    """Version 1 had no `elastic` and `restarts` columns, version 2 no `deleted`: opening
    one adds them (rigid, never restarted, not deleted), with statements that SQLite and
    PostgreSQL both take, and every stored job and event stays as it was."""
    store = JobStore(database_url)
    job = store.create_job("alice", JobSpec(max_gpus=2, code="print(1)"), now=5.0)
    store.set_state(job.id, JobState.STARTING, "given 2 GPU(s)", now=6.0)
    events = store.events()
    store.close()
    make_older(database_url, version)

    store = JobStore(database_url)
    again = store.get_job(job.id)
    assert again.elastic is False and again.restarts == 0
    assert again == dataclasses.replace(
        job, state=JobState.STARTING, reason="given 2 GPU(s)", updated=6.0
    )
    assert store.events() == events
    # the added columns work as this version's own
    store.set_state(job.id, JobState.RUNNING, "processes started", now=7.0)
    assert store.set_elastic(job.id, "the elastic runtime started", now=8.0).elastic
    assert store.delete_job(job.id, now=9.0).elastic
    assert store.list_jobs() == []
    store.close()
    assert schema_version(database_url) == str(SCHEMA_VERSION)


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ([], "body", "JSON object"),
        ({"code": "x"}, "max_gpus", "required"),
        ({"code": "x", "max_gpus": 0}, "max_gpus", "between 1 and"),
        ({"code": "x", "max_gpus": "2"}, "max_gpus", "integer"),
        ({"code": "x", "max_gpus": True}, "max_gpus", "integer"),
        ({"code": "x", "max_gpus": 2, "min_gpus": 3}, "min_gpus", "must not exceed"),
        ({"max_gpus": 2}, "code", "exactly one"),
        ({"code": "x", "script": "a.py", "max_gpus": 2}, "code", "exactly one"),
        ({"code": "x", "max_gpus": 2, "gpus": 2}, "gpus", "not a job field"),
        ({"code": "x", "max_gpus": 2, "entrypoint": "../x.py"}, "entrypoint", "plain .py"),
        ({"code": "x", "max_gpus": 2, "args": "--lr 1"}, "args", "list of strings"),
        ({"code": "x", "max_gpus": 2, "env": {"RESULT_DIR": "/"}}, "env", "set by jupyter-edt"),
        ({"code": "x", "max_gpus": 2, "env": {"1X": "a"}}, "env", "not a valid"),
        ({"code": "x", "max_gpus": 2, "env": {"X": 1}}, "env", "must be a string"),
        ({"code": "x", "max_gpus": 2, "priority": 10**6}, "priority", "between"),
        ({"code": "x", "max_gpus": 2, "name": None}, "name", "must be a string"),
        ({"code": "x", "max_gpus": 2, "entrypoint": None}, "entrypoint", "must be a string"),
    ],
)
def test_bad_specs_name_the_field(body, field, message):
    with pytest.raises(SpecError, match=message) as caught:
        JobSpec.from_dict(body)
    assert caught.value.field == field


def test_metrics_reach_the_event_feed_and_the_feed_stays_bounded(store):
    job = store.create_job("ana", spec())
    cursor = store.events()[-1]["id"]
    store.add_metrics(job.id, [{"step": 0, "loss": 2.0}, {"step": 1, "loss": 1.5}])
    (event,) = store.events(after=cursor)
    assert event["kind"] == "metrics"
    assert [r["loss"] for r in event["records"]] == [2.0, 1.5]
    for step in range(2, 100):
        store.add_metrics(job.id, [{"step": step, "loss": 1.0}])
    feed = [e for e in store.events(job_id=job.id) if e["kind"] == "metrics"]
    assert len(feed) == 40  # the cap
    assert feed[-1]["records"][0]["step"] == 99
    assert store.events(job_id=job.id)[0]["kind"] == "state"  # other events stay


def test_a_job_is_rigid_until_announced_again_at_each_start_and_counts_its_restarts(store):
    job = store.create_job("alice", JobSpec(max_gpus=1, code="x"), now=1.0)
    assert job.elastic is False and job.restarts == 0
    store.set_state(job.id, JobState.STARTING, "given 1 GPU(s)", now=2.0)
    store.set_state(job.id, JobState.RUNNING, "processes started", now=2.5)
    assert store.set_elastic(job.id, "the elastic runtime started", now=3.0).elastic
    store.set_elastic(job.id, "again", now=3.5)  # once is recorded once
    store.set_state(job.id, JobState.SUSPENDED, "driver killed by SIGKILL", now=4.0)
    queued = store.set_state(job.id, JobState.QUEUED, "resumes", now=4.0, restart=True)
    assert queued.restarts == 1 and queued.elastic is True
    started = store.set_state(job.id, JobState.STARTING, "given 1 GPU(s)", now=5.0)
    assert started.elastic is False and started.restarts == 1  # its new processes
    kinds = [(e["kind"], e.get("elastic"), e.get("restarts")) for e in store.events()]
    assert kinds.count(("elastic", True, None)) == 1
    assert ("state", None, 1) in kinds and ("state", False, None) in kinds


def test_a_formed_group_says_how_long_its_allocation_waited_once(store):
    job = store.create_job("ana", spec(), now=100.0)
    store.set_state(job.id, JobState.STARTING, "given", now=101.0)
    store.set_devices(job.id, ["gpu0", "gpu1"], "admitted", now=101.0)
    first = store.record_formed(job.id, 1, 2, 0.05, now=103.5)
    assert first == {"generation": 1, "world_size": 2, "pause_s": 0.05, "waited_s": 2.5}
    # a group re-formed without an allocation (a worker died): nobody waited for it
    assert store.record_formed(job.id, 2, 1, 0.01, now=110.0)["waited_s"] is None
    store.set_devices(job.id, ["gpu0", "gpu1", "gpu2"], "grown", now=120.0)
    assert store.record_formed(job.id, 3, 3, 0.1, now=120.25)["waited_s"] == 0.25
    formed = [e for e in store.events(job_id=job.id) if e["kind"] == "formed"]
    assert [(e["world_size"], e["time"]) for e in formed] == [(2, 103.5), (1, 110.0), (3, 120.25)]


def test_the_same_formed_report_again_is_recorded_once(store):
    """A restarted service reads the driver's last status anew: the group it reports formed is
    the one already recorded (same generation, same time), and no second event is added. A
    new driver's first generation (after a resume) is a new group, however numbered."""
    job = store.create_job("ana", spec(), now=100.0)
    store.set_state(job.id, JobState.STARTING, "given", now=101.0)
    first = store.record_formed(job.id, 2, 2, 0.05, now=103.5)
    assert store.record_formed(job.id, 2, 2, 0.05, now=103.5) == first
    store.record_formed(job.id, 1, 2, 0.0, now=130.0)  # a resumed job's new driver
    store.record_formed(job.id, 2, 2, 0.05, now=140.0)
    formed = [e for e in store.events(job_id=job.id) if e["kind"] == "formed"]
    assert [(e["generation"], e["time"]) for e in formed] == [(2, 103.5), (1, 130.0), (2, 140.0)]
