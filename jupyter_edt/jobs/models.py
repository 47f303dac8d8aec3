"""Job specifications and states, validated before anything is stored or started."""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from ..runtime.submission import EFFECTIVE_BATCH_ENV


class JobState(str, enum.Enum):
    QUEUED = "QUEUED"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


# The state groups, named once: every other module asks these, never lists states itself.
#: Finished for good.
TERMINAL = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})
#: The policy deals devices to these: they hold devices or wait for them.
SCHEDULED = frozenset({JobState.QUEUED, JobState.STARTING, JobState.RUNNING})
#: Their processes run (or are starting): the runner follows them.
LIVE = frozenset({JobState.STARTING, JobState.RUNNING})
#: They may hold devices; a SUSPENDED job keeps its own until its checkpoint is written.
HOLDING = LIVE | {JobState.SUSPENDED}

# Which state may follow which. SUSPENDED is the priority policy's "checkpoint, then release
# every device"; a suspended job goes back to QUEUED to wait for devices again.
TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.QUEUED: frozenset({JobState.STARTING, JobState.CANCELLED, JobState.FAILED}),
    JobState.STARTING: frozenset(
        {JobState.RUNNING, JobState.FAILED, JobState.CANCELLED, JobState.SUSPENDED}
    ),
    JobState.RUNNING: frozenset(
        {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.SUSPENDED}
    ),
    JobState.SUSPENDED: frozenset({JobState.QUEUED, JobState.CANCELLED, JobState.FAILED}),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
}


class ChangeCause(str, enum.Enum):
    """What changed a job's allocation (its `allocation` event's `cause`), or made it lose its
    processes (a `state` event's): the event's `reason` says it to people, this to machines
    (the Prometheus metrics count by it)."""

    START = "start"  # admitted: its first devices
    GROW = "grow"  # the policy gave it more
    SHRINK = "shrink"  # the policy took some back (another job needs them)
    MOVE = "move"  # as many devices, others
    DEVICE_LOST = "device_lost"  # a device it held vanished
    NODE_DRAIN = "node_drain"  # a device it held is on a draining node
    SUSPEND = "suspend"  # suspended (preempted), it released them
    LOST = "lost"  # its driver died, or was gone after a restart of the service
    END = "end"  # it finished


#: The allocation changes that resize a job which keeps running: rescales.
RESCALES = frozenset(
    {
        ChangeCause.GROW,
        ChangeCause.SHRINK,
        ChangeCause.MOVE,
        ChangeCause.DEVICE_LOST,
        ChangeCause.NODE_DRAIN,
    }
)


class JobConflict(ValueError):
    """A well-formed change that the job, as it is now, refuses (HTTP 409): its state, or a
    field fixed at submission, rules it out, where another job would take it. `field` names
    what was asked, when one field was."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class InvalidTransition(JobConflict):
    """A state change the lifecycle does not allow (e.g. cancelling a finished job)."""


def check_transition(current: JobState, new: JobState) -> None:
    if new not in TRANSITIONS[current]:
        raise InvalidTransition(f"A job in state {current.value} cannot become {new.value}.")


class SpecError(ValueError):
    """A bad field in a job submission; `field` names it so the API can say which."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


MAX_NAME = 200
MAX_GPUS_LIMIT = 1024
# Higher is served first; the API, the CLI, the magics and the UI all take this range.
PRIORITY_MIN, PRIORITY_MAX = -1000, 1000
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Variables the launcher owns: a job may not redirect its own result or log directories.
RESERVED_ENV = frozenset(
    {"EDT_JOB_ID", "DATA_DIR", "RESULT_DIR", "LOG_DIR", "CUDA_VISIBLE_DEVICES", "EDT_JOB_TOKEN"}
)


# Set by the surface that submits a job (`JobSpec.surface`), never by the user's spec.
SUBMITTER_FIELDS = frozenset({"surface", "annotations"})

#: What a job's processes do when its allocation changes (docs: README, "Your own training
#: code"): ``elastic`` resizes in place (the runtime's Trainer; a program that never announces
#: the runtime runs at its first size), ``restart`` restarts every worker at the new size
#: (torchrun's contract, resized between min and max), ``rigid`` runs at one size.
JOB_KINDS = ("elastic", "restart", "rigid")

ARCHIVE_HINT = (
    "upload the archive as the 'file' part of a multipart/form-data request, with this spec "
    "as its 'spec' part"
)


@dataclass(frozen=True)
class JobSpec:
    """What to run and on how many GPUs. Exactly one of `code`, `script` and `archive` is
    given; `archive` is the name of an uploaded archive whose unpacked tree is the code.

    `kind` is what a resize does to the job (`JOB_KINDS`). Its global batch, when the job
    keeps one at every size, is ``EDT_EFFECTIVE_BATCH_SIZE`` in `env` (`effective_batch_size`).

    `surface` says which surface submitted the job ("job": the native API; an add-on's facade
    names its own, with what it needs later in `annotations`). Users cannot set either."""

    max_gpus: int
    name: str = ""
    code: str | None = None
    script: str | None = None
    entrypoint: str = "main.py"
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    min_gpus: int = 1
    priority: int = 0
    archive: str | None = None
    kind: str = "elastic"
    surface: str = "job"
    annotations: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["args"] = list(self.args)
        data["env"] = dict(self.env)
        data["annotations"] = dict(self.annotations)
        return data

    @classmethod
    def from_stored(cls, data: Mapping[str, Any]) -> JobSpec:
        """A spec as the store kept it (`to_dict`), validated when it was submitted; fields
        an older version did not store take their defaults."""
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        if "surface" not in data:  # stored before jobs had kinds: `kind` named the surface
            known["surface"] = known.pop("kind", "job")
        known["args"] = tuple(known.get("args", ()))
        return cls(**known)

    @classmethod
    def from_dict(cls, data: Any, *, archive: str | None = None) -> JobSpec:
        """Validate untrusted input (a decoded JSON body) field by field.

        `archive`: the file name of an archive uploaded with the spec. It comes only from the
        upload itself, never from the JSON, so a spec cannot claim code it did not send.
        """
        if not isinstance(data, Mapping):
            raise SpecError("body", "must be a JSON object")
        known = set(cls.__dataclass_fields__) - SUBMITTER_FIELDS
        for key in data:
            if key == "archive":
                raise SpecError("archive", ARCHIVE_HINT)
            if key not in known:
                raise SpecError(str(key), "is not a job field")
        if "max_gpus" not in data:
            raise SpecError("max_gpus", "is required")
        max_gpus = _int(data, "max_gpus", 1, MAX_GPUS_LIMIT)
        min_gpus = _int(data, "min_gpus", 1, MAX_GPUS_LIMIT, default=1)
        if min_gpus > max_gpus:
            raise SpecError("min_gpus", f"must not exceed max_gpus ({max_gpus}), got {min_gpus}")
        priority = _int(data, "priority", PRIORITY_MIN, PRIORITY_MAX, default=0)
        kind = _str(data, "kind", default="elastic")
        if kind not in JOB_KINDS:
            raise SpecError("kind", f"must be one of {', '.join(JOB_KINDS)}, got {kind!r}")
        name = _str(data, "name", default="")
        if len(name) > MAX_NAME:
            raise SpecError("name", f"must be at most {MAX_NAME} characters")
        code = _str(data, "code", default=None, nullable=True)
        script = _str(data, "script", default=None, nullable=True)
        if archive is not None:
            for key in ("code", "script"):
                if data.get(key) is not None:
                    raise SpecError(key, "must not be given with an uploaded archive")
        elif (code is None) == (script is None):
            raise SpecError(
                "code", "give exactly one of 'code' and 'script' (or upload an archive)"
            )
        entrypoint = _str(data, "entrypoint", default="main.py")
        if not entrypoint.endswith(".py") or "/" in entrypoint or entrypoint.startswith("."):
            raise SpecError("entrypoint", "must be a plain .py file name, e.g. 'main.py'")
        args = data.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise SpecError("args", "must be a list of strings")
        env = data.get("env", {})
        if not isinstance(env, Mapping):
            raise SpecError("env", "must be an object of string values")
        for key, value in env.items():
            if not ENV_NAME.match(str(key)):
                raise SpecError("env", f"{key!r} is not a valid environment variable name")
            if key in RESERVED_ENV:
                raise SpecError("env", f"{key} is set by jupyter-edt and cannot be overridden")
            if not isinstance(value, str):
                raise SpecError("env", f"the value of {key} must be a string")
        if kind != "elastic":  # the runtime splits any global batch into micro-batches
            _check_effective_batch(env, min_gpus, max_gpus)
        return cls(
            max_gpus=max_gpus,
            name=name,
            code=code,
            script=script,
            entrypoint=entrypoint,
            args=tuple(args),
            env=dict(env),
            min_gpus=min_gpus,
            priority=priority,
            archive=archive,
            kind=kind,
        )


@dataclass(frozen=True)
class Job:
    """A job's record as the store keeps it. Frozen: a change goes through the store, which
    returns the new record; only the API and the feed turn it into JSON (`to_dict`)."""

    id: str
    user: str
    name: str
    state: JobState
    reason: str
    spec: JobSpec
    min_gpus: int
    max_gpus: int
    priority: int
    #: The devices it holds now, in the allocator's order.
    devices: tuple[str, ...]
    #: When its devices last changed (None: never); the policy keeps a job's devices for
    #: `min_rescale_interval` after that.
    rescaled: float | None
    created: float
    updated: float
    finished: float | None
    #: Its program announced the elastic runtime: only then is it resized in place.
    elastic: bool
    #: Times it went back to the queue after its driver died.
    restarts: int

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON: the REST API's and the feed's form."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["state"] = self.state.value
        data["spec"] = self.spec.to_dict()
        data["devices"] = list(self.devices)
        return data


def parse_limits(data: Any) -> dict[str, int]:
    """Validate a change of a running job's limits: `priority` and/or `max_gpus`."""
    if not isinstance(data, Mapping) or not data:
        raise SpecError("body", "must be a JSON object with priority and/or max_gpus")
    for key in data:
        if key not in ("priority", "max_gpus"):
            raise SpecError(str(key), "only priority and max_gpus can change")
    limits = {}
    if "priority" in data:
        limits["priority"] = _int(data, "priority", PRIORITY_MIN, PRIORITY_MAX)
    if "max_gpus" in data:
        limits["max_gpus"] = _int(data, "max_gpus", 1, MAX_GPUS_LIMIT)
    return limits


def _check_effective_batch(env: Mapping[str, Any], min_gpus: int, max_gpus: int) -> None:
    """A torchrun program's global batch must split evenly over its workers at its smallest
    and its largest size (the scheduler then gives it only counts that divide it)."""
    if EFFECTIVE_BATCH_ENV not in env:
        return
    raw = env[EFFECTIVE_BATCH_ENV]
    if not raw.isdigit() or int(raw) < 1:
        raise SpecError("env", f"{EFFECTIVE_BATCH_ENV} must be a positive integer, got {raw!r}")
    batch = int(raw)
    uneven = [n for n in dict.fromkeys((min_gpus, max_gpus)) if batch % n]
    if uneven:
        raise SpecError(
            "env",
            f"{EFFECTIVE_BATCH_ENV}={batch} does not split evenly over {uneven[0]} GPUs "
            f"(min_gpus {min_gpus}, max_gpus {max_gpus}): choose a multiple of "
            f"{math.lcm(min_gpus, max_gpus)}",
        )


def effective_batch(spec: JobSpec) -> int | None:
    """The global batch the job keeps at every size, if it set one."""
    raw = spec.env.get(EFFECTIVE_BATCH_ENV)
    return int(raw) if raw is not None and raw.isdigit() else None


def _int(data: Mapping[str, Any], key: str, low: int, high: int, default: int | None = None) -> int:
    value = data.get(key, default)
    # bool is an int in Python, but `true` GPUs is a mistake, not a count
    if not isinstance(value, int) or isinstance(value, bool):
        raise SpecError(key, "must be an integer")
    if not low <= value <= high:
        raise SpecError(key, f"must be between {low} and {high}, got {value}")
    return value


def _str(data: Mapping[str, Any], key: str, default: str | None, nullable: bool = False) -> Any:
    """The string at `key`; null only where it means "not given" (`nullable`)."""
    value = data.get(key, default)
    if (value is None and not nullable) or (value is not None and not isinstance(value, str)):
        raise SpecError(key, "must be a string")
    return value
