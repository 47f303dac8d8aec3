"""Durable job records: jobs, their event log, allocation history and metrics (SQLAlchemy).

The event table is the single change log: every state transition and allocation change is a
row with an increasing id, so a client that reconnects resumes from the last id it saw.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    delete,
    func,
    insert,
    or_,
    select,
    text,
)
from sqlalchemy.exc import DatabaseError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from .database import FreeText, StoreError, open_engine, said, shown, writer
from .models import (
    ChangeCause,
    InvalidTransition,
    Job,
    JobConflict,
    JobSpec,
    JobState,
    check_transition,
)
from .reconnect import DatabaseUnreachable, Reconnect, retried
from .triggers import Trigger
from .usage import ACCOUNTED_KINDS

SCHEMA_VERSION = 3
# How to bring a database of each older version one version up, in one transaction each; the
# rows already stored stay as they are. Each statement is one that SQLite and PostgreSQL both take.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        "ALTER TABLE edt_jobs ADD COLUMN elastic BOOLEAN NOT NULL DEFAULT FALSE",
        "ALTER TABLE edt_jobs ADD COLUMN restarts INTEGER NOT NULL DEFAULT 0",
    ),
    2: ("ALTER TABLE edt_jobs ADD COLUMN deleted FLOAT",),
}
#: Ids and offsets that may pass 2**31 (events of a long-lived service, a large events file):
#: PostgreSQL's BIGINT, and SQLite's INTEGER, which is 64 bits and, as a primary key, the row id.
BIG = BigInteger().with_variant(Integer(), "sqlite")


class UnknownJob(KeyError):
    def __str__(self) -> str:
        return f"No job with id {self.args[0]!r}."


class Base(DeclarativeBase):
    pass


class Meta(Base):
    __tablename__ = "edt_meta"
    key: Mapped[str] = mapped_column(String, primary_key=True)
    value: Mapped[str] = mapped_column(String)


class JobRow(Base):
    __tablename__ = "edt_jobs"
    id: Mapped[str] = mapped_column(String, primary_key=True)
    user: Mapped[str] = mapped_column(String, index=True)
    name: Mapped[str] = mapped_column(FreeText)
    state: Mapped[str] = mapped_column(String, index=True)
    reason: Mapped[str] = mapped_column(FreeText, default="")
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    min_gpus: Mapped[int] = mapped_column(Integer)
    max_gpus: Mapped[int] = mapped_column(Integer)
    priority: Mapped[int] = mapped_column(Integer)
    devices: Mapped[list[str]] = mapped_column(JSON, default=list)
    rescaled: Mapped[float | None] = mapped_column(Float, nullable=True)
    created: Mapped[float] = mapped_column(Float)
    updated: Mapped[float] = mapped_column(Float)
    finished: Mapped[float | None] = mapped_column(Float, nullable=True)
    #: Its program announced the elastic runtime: only then is it resized in place.
    elastic: Mapped[bool] = mapped_column(Boolean, default=False)
    #: Times it went back to the queue after its driver died.
    restarts: Mapped[int] = mapped_column(Integer, default=0)
    #: When it was deleted: only its accounting stays (`JobStore.delete_job`).
    deleted: Mapped[float | None] = mapped_column(Float, nullable=True, default=None)

    def to_job(self) -> Job:
        return Job(
            id=self.id,
            user=self.user,
            name=self.name,
            state=JobState(self.state),
            reason=self.reason,
            spec=JobSpec.from_stored(self.spec),
            min_gpus=self.min_gpus,
            max_gpus=self.max_gpus,
            priority=self.priority,
            devices=tuple(self.devices),
            rescaled=self.rescaled,
            created=self.created,
            updated=self.updated,
            finished=self.finished,
            elastic=bool(self.elastic),
            restarts=self.restarts,
        )


class UserRow(Base):
    """A user the service has seen: the groups and administrator flag its identity provider
    (JupyterHub, a token file) gave last. Group quotas and usage by group read them."""

    __tablename__ = "edt_users"
    name: Mapped[str] = mapped_column(String, primary_key=True)
    groups: Mapped[list[str]] = mapped_column(JSON, default=list)
    admin: Mapped[bool] = mapped_column(Boolean, default=False)
    #: When that last changed.
    seen: Mapped[float] = mapped_column(Float)


class ConfigChangeRow(Base):
    """A change of the live settings (``jobs/liverules.py``): who made it, how (the admin
    API, a reload of the config file) and each setting's old and new value. No job owns it,
    so it is not in the jobs' event log; administrators read it (GET /edt/api/v1/admin/config).
    A new table: an older database gets it when the service starts, with no migration."""

    __tablename__ = "edt_config_changes"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    time: Mapped[float] = mapped_column(Float)
    #: The administrator who asked; None for a reload (SIGHUP names no one).
    user: Mapped[str | None] = mapped_column(String, nullable=True)
    source: Mapped[str] = mapped_column(String)
    changes: Mapped[list[dict[str, Any]]] = mapped_column(JSON)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "time": self.time,
            "kind": "config",
            "user": self.user,
            "source": self.source,
            "changes": self.changes,
        }


class EventRow(Base):
    __tablename__ = "edt_events"
    # Accounting reads the state and allocation events of a time range (`usage_events`).
    __table_args__ = (Index("ix_edt_events_kind_time", "kind", "time"),)
    id: Mapped[int] = mapped_column(BIG, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("edt_jobs.id"), index=True)
    time: Mapped[float] = mapped_column(Float)
    kind: Mapped[str] = mapped_column(String)
    data: Mapped[dict[str, Any]] = mapped_column(JSON)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "job_id": self.job_id,
            "time": self.time,
            "kind": self.kind,
            **self.data,
        }


#: Jobs that every read finds: a deleted one keeps only its accounting (`JobStore.delete_job`).
NOT_DELETED = JobRow.deleted.is_(None)


class MetricRow(Base):
    __tablename__ = "edt_metrics"
    id: Mapped[int] = mapped_column(BIG, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("edt_jobs.id"), index=True)
    time: Mapped[float] = mapped_column(Float)
    values: Mapped[dict[str, Any]] = mapped_column(JSON)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "time": self.time, **self.values}


class ReadPositionRow(Base):
    """How far the service has read one of a job's metric files, committed with the records
    read up to there: a resumed job or a restarted server reads on from it."""

    __tablename__ = "edt_read_positions"
    job_id: Mapped[str] = mapped_column(ForeignKey("edt_jobs.id"), primary_key=True)
    #: relative to the job's directory
    path: Mapped[str] = mapped_column(String, primary_key=True)
    offset: Mapped[int] = mapped_column(BIG)


class JobStore:
    """All reads and writes of job records. Each method is one transaction; after each
    committed change the store calls its listeners (the live feed publishes then), so no
    caller can forget to announce a change. A transaction whose connection is lost runs again
    (`@retried`), so a database that restarts costs a pause, not a change (reconnect.py).
    SQLite and PostgreSQL take the same queries (database.py keeps what differs)."""

    def __init__(
        self,
        url: str,
        *,
        metrics_cap: int = 10_000,
        log: logging.Logger | None = None,
        reconnect_s: float = 30.0,
    ) -> None:
        """`log`: where a lost database connection is told (the service's log);
        `reconnect_s`: how long a transaction is tried again while the database cannot be
        reached (`Reconnect`), the service's event loop waiting meanwhile."""
        if metrics_cap < 4:
            raise ValueError(f"metrics_cap must be at least 4, got {metrics_cap}.")
        self.url = url
        self.metrics_cap = metrics_cap
        self.engine = open_engine(url)
        self.reconnect = Reconnect(
            shown(url), log or logging.getLogger(__name__), patience_s=reconnect_s
        )
        self._unchecked: dict[str, int] = {}  # metric records added since the last trim
        self._session = sessionmaker(self.engine, expire_on_commit=False)
        # Every write transaction takes the database's write lock first (database.py).
        self._write = sessionmaker(writer(self.engine), expire_on_commit=False)
        self._listeners: list[Callable[[], None]] = []
        self._prepare()

    def on_change(self, listener: Callable[[], None]) -> None:
        """Call `listener` after every committed change."""
        self._listeners.append(listener)

    @contextmanager
    def _change(self) -> Iterator[Session]:
        """A write transaction; once it has committed, the listeners hear of it."""
        with self._write.begin() as s:
            yield s
        for listener in self._listeners:
            listener()

    def _prepare(self) -> None:
        try:
            self.reconnect.call(self._prepare_schema)
        except DatabaseUnreachable as err:
            raise StoreError(str(err)) from err
        except DatabaseError as err:
            advice = (
                "move it aside to start with an empty one, or restore a backup"
                if self.engine.dialect.name == "sqlite"
                else "check that the URL names its database, and that its role may create "
                "tables there"
            )
            raise StoreError(
                f"The job database {self.reconnect.database} cannot be read ({said(err)}). It "
                f"is left untouched: {advice}."
            ) from err

    def _prepare_schema(self) -> None:
        """Create the tables, or bring an older version's up to this one, in one write
        transaction: two services starting at once on one database take turns."""
        with self._write.begin() as s:
            Base.metadata.create_all(s.connection())
            for index in EventRow.__table__.indexes:  # added to a table an older version made
                index.create(s.connection(), checkfirst=True)
            version = s.get(Meta, "schema_version")
            if version is None:
                s.add(Meta(key="schema_version", value=str(SCHEMA_VERSION)))
            elif int(version.value) in MIGRATIONS:
                for old in range(int(version.value), SCHEMA_VERSION):
                    for statement in MIGRATIONS[old]:
                        s.execute(text(statement))
                version.value = str(SCHEMA_VERSION)
            elif int(version.value) != SCHEMA_VERSION:
                raise StoreError(
                    f"The job database {self.reconnect.database} has schema version "
                    f"{version.value}; this jupyter-edt needs {SCHEMA_VERSION}."
                )

    def close(self) -> None:
        self.engine.dispose()

    # jobs ---------------------------------------------------------------------------------

    def create_job(self, user: str, spec: JobSpec, *, now: float | None = None) -> Job:
        """Record a submitted job, QUEUED. Its id is drawn before the first attempt: an
        attempt whose commit took although its answer was lost with the connection is found
        again by the next (`Reconnect`), not recorded twice."""
        now = time.time() if now is None else now
        return self._add_job(uuid.uuid4().hex[:12], user, spec, now)

    @retried
    def _add_job(self, job_id: str, user: str, spec: JobSpec, now: float) -> Job:
        job = JobRow(
            id=job_id,
            user=user,
            name=spec.name or "job",
            state=JobState.QUEUED.value,
            reason="submitted",
            spec=spec.to_dict(),
            min_gpus=spec.min_gpus,
            max_gpus=spec.max_gpus,
            priority=spec.priority,
            devices=[],
            created=now,
            updated=now,
            finished=None,
            rescaled=None,
            elastic=False,
            restarts=0,
        )
        with self._change() as s:
            stored = s.get(JobRow, job_id)
            if stored is not None:
                return stored.to_job()
            s.add(job)
            s.flush()
            s.add(_event(job.id, now, "state", {"state": job.state, "reason": "submitted"}))
        return job.to_job()

    @retried
    def get_job(self, job_id: str) -> Job:
        with self._session() as s:
            return self._row(s, job_id).to_job()

    @retried
    def list_jobs(
        self, *, user: str | None = None, states: Iterable[JobState] | None = None
    ) -> list[Job]:
        query = select(JobRow).where(NOT_DELETED).order_by(JobRow.created.desc(), JobRow.id)
        if user is not None:
            query = query.where(JobRow.user == user)
        if states is not None:
            query = query.where(JobRow.state.in_([s.value for s in states]))
        with self._session() as s:
            return [row.to_job() for row in s.scalars(query)]

    @retried
    def count_jobs(self) -> dict[tuple[JobState, str], int]:
        """How many jobs are in each state, by kind (`JobSpec.kind`), in one query however
        many jobs the store holds (the metrics ask at every scrape)."""
        kind = JobRow.spec["kind"].as_string()
        surface = JobRow.spec["surface"].as_string()  # absent: stored before jobs had kinds
        query = (
            select(JobRow.state, kind, surface, func.count())
            .where(NOT_DELETED)
            .group_by(JobRow.state, kind, surface)
        )
        out: dict[tuple[JobState, str], int] = {}
        with self._session() as s:
            for state, named, stored_surface, n in s.execute(query):
                key = (JobState(state), named if stored_surface is not None else "elastic")
                out[key] = out.get(key, 0) + n
        return out

    @retried
    def delete_job(self, job_id: str, *, now: float | None = None) -> Job:
        """Remove the job, in one transaction; returns the record as it was. The caller stops
        the job first (``JobService.delete``).

        What it ran (its spec, its code), its metric records and its events go, and no read
        finds it again. Its owner, name and state and allocation events stay, for accounting:
        the GPU-seconds it held were taken from everyone else, and deleting a job must not
        erase them from the usage report."""
        now = time.time() if now is None else now
        with self._change() as s:
            row = self._row(s, job_id)
            job = row.to_job()
            row.deleted, row.spec = now, {}
            s.execute(delete(MetricRow).where(MetricRow.job_id == job_id))
            s.execute(delete(ReadPositionRow).where(ReadPositionRow.job_id == job_id))
            s.execute(
                delete(EventRow).where(
                    EventRow.job_id == job_id, EventRow.kind.not_in(ACCOUNTED_KINDS)
                )
            )
        self._unchecked.pop(job_id, None)
        return job

    @retried
    def set_state(
        self,
        job_id: str,
        state: JobState,
        reason: str,
        *,
        now: float | None = None,
        restart: bool = False,
        cause: ChangeCause | None = None,
    ) -> Job:
        """Move a job to `state`, checked against the lifecycle, and record why (`reason` for
        people, `cause` for machines: the metrics count lost drivers by it). `restart`
        counts the move as one of the job's restarts after its driver died.

        A job that starts is rigid until its new processes announce the elastic runtime."""
        now = time.time() if now is None else now
        with self._change() as s:
            job = self._row(s, job_id)
            check_transition(JobState(job.state), state)
            job.state = state.value
            job.reason = reason
            job.updated = now
            data: dict[str, Any] = {"state": state.value, "reason": reason}
            if cause is not None:
                data["cause"] = cause.value
            if state == JobState.STARTING:
                job.elastic = False
                data["elastic"] = False
            if restart:
                job.restarts += 1
                data["restarts"] = job.restarts
            if state.terminal:
                job.finished = now
                if job.devices:
                    ended = {"devices": [], "reason": reason, "cause": ChangeCause.END.value}
                    s.add(_event(job_id, now, "allocation", ended))
                job.devices = []
            s.add(_event(job_id, now, "state", data))
            return job.to_job()

    @retried
    def set_waiting_reason(self, job_id: str, reason: str, *, now: float | None = None) -> Job:
        """Say why a queued job still waits (a quota, say): recorded as a state event of the
        same state when the reason changes, so the feed and the sidebar show it."""
        now = time.time() if now is None else now
        with self._change() as s:
            job = self._row(s, job_id)
            if job.state != JobState.QUEUED.value:
                raise InvalidTransition(f"Job {job_id} is {job.state}, not waiting.")
            if job.reason != reason:
                job.reason = reason
                job.updated = now
                s.add(_event(job_id, now, "state", {"state": job.state, "reason": reason}))
            return job.to_job()

    @retried
    def set_elastic(self, job_id: str, reason: str, *, now: float | None = None) -> Job:
        """The job's program announced the elastic runtime: from now on it can be resized."""
        now = time.time() if now is None else now
        with self._change() as s:
            job = self._row(s, job_id)
            if not job.elastic:
                job.elastic = True
                job.updated = now
                s.add(_event(job_id, now, "elastic", {"elastic": True, "reason": reason}))
            return job.to_job()

    @retried
    def record_restart(
        self, job_id: str, restart: Mapping[str, Any], message: str, *, now: float | None = None
    ) -> dict[str, Any]:
        """The job's driver started every worker again (`restart`: as the driver reported it,
        `message`: what it did and what the job lost, as a user reads it): a `restart` event at
        the time the driver restarted them, once (a restarted service reads its status anew)."""
        now = time.time() if now is None else now
        data = {
            "count": int(restart.get("count", 0)),
            "cause": str(restart.get("reason", "")),
            "world_size": restart.get("world_size"),
            "killed": list(restart.get("killed", [])),
            "reason": message,
        }
        with self._change() as s:
            self._row(s, job_id)
            previous = _same_report(s, job_id, "restart", now, "count", data["count"])
            if previous is not None:
                return previous
            s.add(_event(job_id, now, "restart", data))
        return data

    @retried
    def record_formed(
        self,
        job_id: str,
        generation: int,
        world_size: int,
        pause_s: float,
        *,
        now: float | None = None,
    ) -> dict[str, Any]:
        """The job's workers formed a group on `world_size` devices: a `formed` event with
        the survivors' measured pause and how long the newest allocation waited for it
        (`waited_s`: the devices it gave, held but idle; None when no allocation came since the
        last group formed: a worker died, say).

        The same report again (a restarted service reads the driver's last status anew: the
        same generation at the same time) is recorded once."""
        now = time.time() if now is None else now
        with self._change() as s:
            self._row(s, job_id)
            previous = _same_report(s, job_id, "formed", now, "generation", generation)
            if previous is not None:
                return previous

            def last(kind: str) -> float | None:
                return s.scalars(
                    select(EventRow.time)
                    .where(EventRow.job_id == job_id, EventRow.kind == kind)
                    .order_by(EventRow.id.desc())
                    .limit(1)
                ).first()

            allocated, formed = last("allocation"), last("formed")
            answered = allocated is None or (formed is not None and formed >= allocated)
            data = {
                "generation": generation,
                "world_size": world_size,
                "pause_s": round(pause_s, 4),
                "waited_s": None if answered else round(max(0.0, now - allocated), 4),
            }
            s.add(_event(job_id, now, "formed", data))
            return data

    @retried
    def set_devices(
        self,
        job_id: str,
        devices: Sequence[str],
        reason: str,
        *,
        now: float | None = None,
        cause: ChangeCause | None = None,
        trigger: Trigger | None = None,
    ) -> Job:
        """Give the job `devices`: an `allocation` event when they differ from what it holds,
        saying why (`reason` for people, `cause` for machines: the metrics count rescales by
        it; `trigger`: what in the cluster prompted it, which the allocation timeline shows)."""
        now = time.time() if now is None else now
        with self._change() as s:
            job = self._row(s, job_id)
            if list(devices) != list(job.devices):
                job.devices = list(devices)
                job.updated = job.rescaled = now
                data: dict[str, Any] = {"devices": list(devices), "reason": reason}
                if cause is not None:
                    data["cause"] = cause.value
                if trigger is not None:
                    data["trigger"] = trigger.value
                s.add(_event(job_id, now, "allocation", data))
            return job.to_job()

    @retried
    def update_limits(
        self,
        job_id: str,
        *,
        priority: int | None = None,
        max_gpus: int | None = None,
        now: float | None = None,
    ) -> Job:
        now = time.time() if now is None else now
        with self._change() as s:
            job = self._row(s, job_id)
            if JobState(job.state).terminal:
                raise InvalidTransition(
                    f"Job {job_id} has finished ({job.state}); it cannot change."
                )
            changes: dict[str, int] = {}
            if max_gpus is not None:
                if max_gpus < job.min_gpus:
                    raise JobConflict(
                        f"max_gpus must be at least the job's min_gpus ({job.min_gpus}).",
                        "max_gpus",
                    )
                job.max_gpus = changes["max_gpus"] = max_gpus
            if priority is not None:
                job.priority = changes["priority"] = priority
            if changes:
                job.updated = now
                s.add(_event(job_id, now, "limits", changes))
            return job.to_job()

    # users --------------------------------------------------------------------------------

    @retried
    def note_user(
        self, name: str, groups: Sequence[str], admin: bool, *, now: float | None = None
    ) -> bool:
        """Record what the identity provider says of `name`; True when that changed."""
        now = time.time() if now is None else now
        groups = list(dict.fromkeys(groups))
        with self._write.begin() as s:  # not a job change: the feed need not hear of it
            row = s.get(UserRow, name)
            if row is None:
                s.add(UserRow(name=name, groups=groups, admin=admin, seen=now))
                return True
            if list(row.groups) == groups and bool(row.admin) == admin:
                return False
            row.groups, row.admin, row.seen = groups, admin, now
            return True

    @retried
    def users(self) -> dict[str, tuple[list[str], bool]]:
        """Every user seen: their groups and whether they were an administrator."""
        with self._session() as s:
            return {r.name: (list(r.groups), bool(r.admin)) for r in s.scalars(select(UserRow))}

    # live settings ------------------------------------------------------------------------

    @retried
    def record_config_change(
        self,
        user: str | None,
        source: str,
        changes: list[dict[str, Any]],
        *,
        now: float | None = None,
    ) -> dict[str, Any]:
        """Record a change of the live settings (`ConfigChangeRow`); the record as stored."""
        now = time.time() if now is None else now
        with self._write.begin() as s:  # no job's event: the feed need not hear of it
            row = ConfigChangeRow(time=now, user=user, source=source, changes=changes)
            s.add(row)
            s.flush()
            return row.to_dict()

    @retried
    def config_changes(self, *, limit: int = 50) -> list[dict[str, Any]]:
        """The latest changes of the live settings, newest first."""
        query = select(ConfigChangeRow).order_by(ConfigChangeRow.id.desc()).limit(limit)
        with self._session() as s:
            return [row.to_dict() for row in s.scalars(query)]

    # events and metrics -------------------------------------------------------------------

    @retried
    def events(
        self,
        *,
        after: int = 0,
        user: str | None = None,
        job_id: str | None = None,
        limit: int = 1000,
    ) -> list[dict[str, Any]]:
        """Events with id > `after`, oldest first: the resumable change feed. Each names the
        job's owner as `user`."""
        query = (
            select(EventRow, JobRow.user)
            .join(JobRow, JobRow.id == EventRow.job_id)
            .where(EventRow.id > after, NOT_DELETED)
            .order_by(EventRow.id)
            .limit(limit)
        )
        if job_id is not None:
            query = query.where(EventRow.job_id == job_id)
        if user is not None:
            query = query.where(JobRow.user == user)
        with self._session() as s:
            return [{**row.to_dict(), "user": owner} for row, owner in s.execute(query)]

    @retried
    def last_event_id(self) -> int:
        with self._session() as s:
            return s.scalar(select(func.max(EventRow.id))) or 0

    def add_metrics(
        self, job_id: str, records: Sequence[Mapping[str, Any]], *, now: float | None = None
    ) -> None:
        self.add_metrics_many({job_id: records}, now=now)

    @retried
    def add_metrics_many(
        self,
        batches: Mapping[str, Sequence[Mapping[str, Any]]],
        *,
        now: float | None = None,
        positions: Mapping[str, Mapping[str, int]] | None = None,
    ) -> None:
        """Append metric records of several jobs in one transaction, and announce each job's
        as one `metrics` event in the feed. `positions`: per job, how far each of its files
        was read to find these records (`read_positions`), kept in the same transaction.

        Past the cap (checked every tenth of it), older records are thinned to every other one,
        and the oldest `metrics` events leave the feed (a client that was away that long reads
        the thinned history).
        """
        now = time.time() if now is None else now
        if not batches:
            return
        with self._change() as s:
            # Core inserts, many rows per statement: the ORM's unit of work cost ~50 ms per
            # 200 records, on the event loop every collection interval.
            known = set(
                s.scalars(select(JobRow.id).where(JobRow.id.in_(list(batches)), NOT_DELETED))
            )
            for job_id in batches:
                if job_id not in known:
                    raise UnknownJob(job_id)
            metrics = [
                {"job_id": j, "time": now, "values": dict(r)}
                for j, rs in batches.items()
                for r in rs
            ]
            if metrics:
                s.execute(insert(MetricRow.__table__), metrics)
            events = [
                {
                    "job_id": j,
                    "time": now,
                    "kind": "metrics",
                    "data": {"records": [dict(r) for r in rs]},
                }
                for j, rs in batches.items()
            ]
            s.execute(insert(EventRow.__table__), events)
            if positions:
                self._keep_positions(s, positions)
            for job_id, records in batches.items():
                # Counting rows scans the job's rows: do it once per tenth of the cap.
                added = self._unchecked.get(job_id, 0) + len(records)
                if added < max(1, self.metrics_cap // 10):
                    self._unchecked[job_id] = added
                else:
                    self._unchecked[job_id] = 0
                    self._trim(s, job_id)

    def _keep_positions(self, s: Session, positions: Mapping[str, Mapping[str, int]]) -> None:
        s.execute(delete(ReadPositionRow).where(ReadPositionRow.job_id.in_(list(positions))))
        rows = [
            {"job_id": j, "path": path, "offset": offset}
            for j, files in positions.items()
            for path, offset in files.items()
        ]
        if rows:
            s.execute(insert(ReadPositionRow.__table__), rows)

    @retried
    def read_positions(self, job_id: str) -> dict[str, int]:
        """How far each of the job's metric files has been read, as of its stored records."""
        with self._session() as s:
            self._row(s, job_id)
            rows = s.scalars(select(ReadPositionRow).where(ReadPositionRow.job_id == job_id))
            return {row.path: row.offset for row in rows}

    def _trim(self, s: Session, job_id: str) -> None:
        feed = select(EventRow.id).where(EventRow.job_id == job_id, EventRow.kind == "metrics")
        n_feed = s.scalar(select(func.count()).select_from(feed.subquery())) or 0
        if n_feed > self.metrics_cap:
            oldest = s.scalars(feed.order_by(EventRow.id).limit(n_feed - self.metrics_cap))
            s.execute(delete(EventRow).where(EventRow.id.in_(list(oldest))))
        count = s.scalar(select(func.count()).where(MetricRow.job_id == job_id)) or 0
        if count > self.metrics_cap:
            ids = s.scalars(
                select(MetricRow.id).where(MetricRow.job_id == job_id).order_by(MetricRow.id)
            ).all()
            # Keep the newest quarter at full resolution; halve the resolution before it.
            older = ids[: len(ids) - self.metrics_cap // 4]
            s.execute(delete(MetricRow).where(MetricRow.id.in_(older[1::2])))

    @retried
    def metrics(self, job_id: str, *, after: int = 0, limit: int = 10_000) -> list[dict[str, Any]]:
        query = (
            select(MetricRow)
            .where(MetricRow.job_id == job_id, MetricRow.id > after)
            .order_by(MetricRow.id)
            .limit(limit)
        )
        with self._session() as s:
            self._row(s, job_id)
            return [row.to_dict() for row in s.scalars(query)]

    @retried
    def latest_metrics(self, job_id: str, types: Iterable[str]) -> list[dict[str, Any]]:
        """The newest record of each of these types (``values["type"]``) the job has: what a
        later reading of the job's event files must not take again."""
        with self._session() as s:
            self._row(s, job_id)
            out = []
            for kind in types:
                query = (
                    select(MetricRow)
                    .where(MetricRow.job_id == job_id, MetricRow.values["type"].as_string() == kind)
                    .order_by(MetricRow.id.desc())
                    .limit(1)
                )
                out += [row.to_dict() for row in s.scalars(query)]
            return out

    # accounting ---------------------------------------------------------------------------

    @retried
    def usage_events(
        self, since: float, until: float, *, user: str | None = None
    ) -> list[dict[str, Any]]:
        """What accounting over [since, until] reads (``jobs/usage.py``), in the order it was
        recorded: the state and allocation events within the range, and, of each job alive at
        `since`, its last state and last allocation event at or before `since` (what it held
        then, and in which state). Each names the job's owner as `user` and its `name`.
        `user`: that user's jobs only."""
        kinds = ACCOUNTED_KINDS
        alive = select(JobRow.id).where(
            JobRow.created <= since, or_(JobRow.finished.is_(None), JobRow.finished > since)
        )
        last_before = (
            select(func.max(EventRow.id))
            .where(EventRow.job_id.in_(alive), EventRow.kind.in_(kinds), EventRow.time <= since)
            .group_by(EventRow.job_id, EventRow.kind)
        )
        within = EventRow.kind.in_(kinds) & (EventRow.time > since) & (EventRow.time <= until)
        columns = (EventRow.id, EventRow.job_id, EventRow.time, EventRow.kind, EventRow.data)
        query = (
            select(*columns, JobRow.user, JobRow.name)
            .join(JobRow, JobRow.id == EventRow.job_id)
            .where(or_(EventRow.id.in_(last_before), within))
            .order_by(EventRow.id)
        )
        if user is not None:
            query = query.where(JobRow.user == user)
        with self._session() as s:  # plain rows: thousands of them, no ORM objects needed
            return [
                {"id": id_, "job_id": job_id, "time": t, "kind": kind, **data, "user": u, "name": n}
                for id_, job_id, t, kind, data, u, n in s.execute(query)
            ]

    @retried
    def allocation_events(self, since: float, until: float) -> list[dict[str, Any]]:
        """What the allocation timeline of [since, until] reads (``jobs/allocations.py``), in
        the order it was recorded: the allocation events within the range, and every earlier
        one of each job alive at `since` (what it held then, and since when). Each names the
        job's owner as `user` and its `name`; a deleted job's count too (it held the devices)."""
        alive = select(JobRow.id).where(
            JobRow.created <= since, or_(JobRow.finished.is_(None), JobRow.finished > since)
        )
        wanted = (
            (EventRow.kind == "allocation")
            & (EventRow.time <= until)
            & or_(EventRow.time > since, EventRow.job_id.in_(alive))
        )
        columns = (EventRow.id, EventRow.job_id, EventRow.time, EventRow.data)
        query = (
            select(*columns, JobRow.user, JobRow.name)
            .join(JobRow, JobRow.id == EventRow.job_id)
            .where(wanted)
            .order_by(EventRow.id)
        )
        with self._session() as s:
            return [
                {"id": id_, "job_id": job_id, "time": t, **data, "user": u, "name": n}
                for id_, job_id, t, data, u, n in s.execute(query)
            ]

    @staticmethod
    def _row(s: Session, job_id: str) -> JobRow:
        job = s.get(JobRow, job_id)
        if job is None or job.deleted is not None:
            raise UnknownJob(job_id)
        return job


def _same_report(
    s: Session, job_id: str, kind: str, now: float, key: str, value: object
) -> dict[str, Any] | None:
    """The job's newest event of `kind` when it is the same report again (at the same time,
    with the same `key`): a restarted service reads a driver's last status anew."""
    previous = s.scalars(
        select(EventRow)
        .where(EventRow.job_id == job_id, EventRow.kind == kind)
        .order_by(EventRow.id.desc())
        .limit(1)
    ).first()
    if previous is not None and previous.time == now and previous.data.get(key) == value:
        return dict(previous.data)
    return None


def _event(job_id: str, now: float, kind: str, data: dict[str, Any]) -> EventRow:
    return EventRow(job_id=job_id, time=now, kind=kind, data=data)
