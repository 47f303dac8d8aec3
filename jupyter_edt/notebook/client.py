"""A Python client of the jupyter-edt REST API: ``EDTClient`` and ``Job`` handles.

    from jupyter_edt.notebook import EDTClient
    client = EDTClient()                      # zero configuration inside a Jupyter kernel
    job = client.submit(code=source, name="mnist", max_gpus=4, epochs=10)
    job.wait()                                # a progress line; returns the finished job
    job.metrics()                             # records, or a DataFrame when pandas is installed

It speaks HTTP with the standard library (``urllib``), not ``requests``: jupyter-edt does not
depend on ``requests`` (it only comes with JupyterLab), and a kernel pays nothing extra to
import the client. Calls are synchronous; each maps the server's answers to the errors in
:mod:`.errors`, which say what to do (the URL to check, the field to fix, the job that does not
exist).

A ``Job`` is a snapshot of the server's job plus the calls that act on it; its attributes are
as of the last call that returned the job (``refresh()`` fetches it again). Its text and HTML
representations show state and GPUs, which is what the ``%%edt_submit`` magic displays until a
live widget takes its place.
"""

from __future__ import annotations

import builtins
import html
import io
import json
import os
import re
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from ..jobs.models import ENV_NAME, RESERVED_ENV
from ..runtime.submission import FIT_OPTION_ENV
from ..runtime.tracebacks import fold_logs
from .discovery import ENV_TOKEN, ENV_URL, HOW_TO_CONFIGURE, find_server, normalize_url
from .errors import (
    BadRequest,
    Conflict,
    EDTError,
    Forbidden,
    JobFailed,
    NoSuchArtifact,
    NoSuchJob,
    ServerUnreachable,
    WaitTimeout,
)
from .progress import MetricsTracker, Progress, format_line
from .transfer import (
    code_archive,
    copy_response,
    extract_zip,
    multipart,
    safe_target,
    size_of,
)

API = "edt/api/v1/"
TERMINAL_STATES = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})
#: Lines read from the end of each log for a failure's report: a whole traceback, with torch's
#: frames and their ``[rank0]: `` prefixes.
LOG_LINES = 200
# Where the runtime's Trainer saves the final state dict, inside the job's result directory.
MODEL_PATH = "model/model_epoch_final.pth"

# Options that reach the training program as environment variables (see ``training_env``).
PROGRAM_ENV = {
    **{name: var for name, (var, _) in FIT_OPTION_ENV.items()},
    # DATA_DIR itself is the launcher's (reserved in a job's env); it takes it from EDT_DATA_DIR
    "data_dir": "EDT_DATA_DIR",
}


def training_env(
    *,
    epochs: int | None = None,
    effective_batch_size: int | None = None,
    checkpoint_every: int | None = None,
    data_dir: str | os.PathLike[str] | None = None,
) -> dict[str, str]:
    """The environment variables that carry training options to the program.

    The runtime's ``Trainer.fit`` reads them and they win over the values passed in the code
    (an option given at submission is the later, more specific choice); unset ones change
    nothing. Checked here so a bad value fails before anything is submitted.
    """
    env: dict[str, str] = {}
    for name, value, low in (
        ("epochs", epochs, 1),
        ("effective_batch_size", effective_batch_size, 1),
        ("checkpoint_every", checkpoint_every, 0),
    ):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise BadRequest(f"must be an integer >= {low}, got {value!r}", name)
        env[PROGRAM_ENV[name]] = str(value)
    if data_dir is not None:
        if not str(data_dir):
            raise BadRequest("must not be empty", "data_dir")
        env[PROGRAM_ENV["data_dir"]] = os.fspath(data_dir)
    return env


def parse_env_pairs(pairs: Iterable[str | Iterable[str]] | None) -> dict[str, str]:
    """``K=V`` strings (or groups of them, as argparse's ``append`` + ``nargs`` gives) as a
    dict; checked here so that a typo fails before anything is submitted."""
    env: dict[str, str] = {}
    for item in pairs or []:
        for pair in [item] if isinstance(item, str) else item:
            key, sep, value = pair.partition("=")
            if not sep or not ENV_NAME.match(key):
                raise BadRequest(
                    f"expected NAME=VALUE with a valid variable name, got {pair!r}", "env"
                )
            if key in RESERVED_ENV:
                raise BadRequest(f"{key} is set by jupyter-edt and cannot be given", "env")
            env[key] = value
    return env


def failure_report(job: Job, tail: int = LOG_LINES, output_lines: int = 10) -> str:
    """Why a job failed, and what of its logs a user needs to fix the program: the reason's
    first line heads it; then each distinct traceback once, with the workers that raised it,
    their own frames shown and the framework's folded (``runtime.tracebacks.fold_logs``); then
    the last `output_lines` lines each log printed besides. `tail`: the lines read per log."""
    first, _, rest = (job.reason or "no reason given").partition("\n")
    lines = [f"Job {job.id} ({job.name or 'unnamed'}) {job.state}: {first}"]
    try:
        logs = {name: job._log(name, tail=tail)["text"] for name in job.log_names()}
    except EDTError as err:
        logs, rest = {}, f"{rest}\n(its logs could not be read: {err})".strip()
    folded = fold_logs(logs, output_lines=output_lines)
    if folded:
        lines += ["", "The end of its logs:", folded]
    elif rest:
        lines.append(rest)
    return "\n".join(lines)


class EDTClient:
    """Talks to one Jupyter server that runs the jupyter-edt extension.

    `url` is the server's base URL (``http://localhost:8888/``, with any base path such as
    ``/user/alice/``); `token` a Jupyter API token. Without `url`, the server is found as
    described in :mod:`.discovery` (``EDT_URL``/``EDT_TOKEN``, then the server that started
    this kernel, then the only running server).
    """

    def __init__(self, url: str | None = None, token: str | None = None, *, timeout: float = 30):
        if url is None:
            found = find_server()
            url, self.source = found.url, found.source
            token = found.token if token is None else token
        else:
            self.source = "the url given to EDTClient"
        self.url = normalize_url(url)
        self.token = token or ""
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"EDTClient({self.url!r}, found from {self.source})"

    # -- HTTP -------------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | Sequence[tuple[str, Any]] | None = None,
        body: Any = None,
        data: bytes | BinaryIO | None = None,
        headers: Mapping[str, str] | None = None,
        job_id: str | None = None,
    ) -> Any:
        """One API call; `path` is relative to ``/edt/api/v1/``. Returns the decoded JSON body.
        `job_id` names the job a 404 is about."""
        with self._open(
            method, path, params=params, body=body, data=data, headers=headers, job_id=job_id
        ) as response:
            payload = response.read()
        if not payload:
            return None
        try:
            return json.loads(payload)
        except ValueError:
            raise ServerUnreachable(
                self.url,
                f"{self.url} answered {method} {path} with something that is not JSON: is it a "
                "Jupyter server running the jupyter-edt extension?",
            ) from None

    def _open(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | Sequence[tuple[str, Any]] | None = None,
        body: Any = None,
        data: bytes | BinaryIO | None = None,
        headers: Mapping[str, str] | None = None,
        job_id: str | None = None,
    ) -> Any:
        """The open HTTP response (a context manager), for bodies read in chunks."""
        url = self.url + API + path
        if params:
            items = params.items() if isinstance(params, Mapping) else params
            query = [(k, str(v)) for k, v in items if v is not None]
            if query:
                url += "?" + urllib.parse.urlencode(query)
        sent = {"Accept": "application/json", **dict(headers or {})}
        if self.token:
            sent["Authorization"] = f"token {self.token}"
        if body is not None:
            data = json.dumps(body).encode()
            sent["Content-Type"] = "application/json"
        req = urllib.request.Request(url, data=data, method=method, headers=sent)
        try:
            return urllib.request.urlopen(req, timeout=self.timeout)
        except urllib.error.HTTPError as err:
            raise self._http_error(err, job_id) from None
        except (urllib.error.URLError, OSError) as err:
            reason = getattr(err, "reason", err)
            raise ServerUnreachable(
                self.url,
                f"Cannot reach the jupyter-edt server at {self.url} ({reason}; found from "
                f"{self.source}). Is the Jupyter server running? {HOW_TO_CONFIGURE}",
            ) from None

    def _http_error(self, err: urllib.error.HTTPError, job_id: str | None) -> EDTError:
        try:
            body = json.loads(err.read() or b"{}")
        except ValueError:
            body = {}
        if not isinstance(body, dict):
            body = {}
        message = str(body.get("message") or err.reason or f"HTTP {err.code}")
        field = body.get("field")
        if err.code == 404:
            if field == "path":
                return NoSuchArtifact(message)
            if job_id is not None and body.get("message"):
                return NoSuchJob(job_id, message)
            return ServerUnreachable(
                self.url,
                f"{self.url} has no jupyter-edt API ({err.url} answered 404): the Jupyter server "
                "there does not run the jupyter-edt extension (enable it with `jupyter "
                "server extension enable jupyter_edt`), or the URL lacks the base path. "
                + HOW_TO_CONFIGURE,
            )
        if err.code in (401, 403):
            if message in ("Forbidden", "Unauthorized", "") or err.code == 401:
                hint = (
                    f"The token (from {self.source}) is missing or wrong"
                    if self.token
                    else "No token was given"
                )
                return Forbidden(
                    f"{self.url} refused the request (HTTP {err.code}). {hint}: pass "
                    f"EDTClient(url, token=...) or set {ENV_TOKEN} (and {ENV_URL}).",
                    err.code,
                )
            return Forbidden(message, err.code)
        if err.code == 409:
            return Conflict(message, field, 409)
        if 400 <= err.code < 500:
            return BadRequest(message, field, err.code)
        return EDTError(f"The server at {self.url} failed (HTTP {err.code}): {message}")

    # -- jobs -------------------------------------------------------------------------------

    def cluster(self) -> dict[str, Any]:
        """The devices jobs can be given, and which are held."""
        return self.request("GET", "cluster")

    def submit(
        self,
        code: str | None = None,
        *,
        script: str | os.PathLike[str] | None = None,
        directory: str | os.PathLike[str] | None = None,
        files: Sequence[str | os.PathLike[str]] = (),
        name: str | None = None,
        max_gpus: int = 1,
        min_gpus: int = 1,
        priority: int = 0,
        kind: str = "elastic",
        entrypoint: str | None = None,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        epochs: int | None = None,
        effective_batch_size: int | None = None,
        checkpoint_every: int | None = None,
        data_dir: str | os.PathLike[str] | None = None,
    ) -> Job:
        """Submit a program: its source (`code`), a local `script` file, or a local
        `directory` whose `entrypoint` (default ``main.py``) is run.

        A script is read here, so the job runs the file as it is now (not as it is when the job
        starts, which may be much later for a queued job) and the server need not see this
        machine's files. A directory, and any extra `files` (files or folders placed next to
        the program by their base name), travel as one uploaded archive. The training options
        (`epochs`, ...) reach the program as environment variables (:func:`training_env`) and
        win over the same names in `env`. `kind`: what a resize does to the job, ``elastic``
        (in place, the runtime's Trainer), ``restart`` (a torchrun program, started again at
        the new size) or ``rigid`` (one size). Everything is checked before the one request that
        submits, so an error leaves no job behind.
        """
        if sum(x is not None for x in (code, script, directory)) != 1:
            raise BadRequest("give exactly one of code, script and directory", "code")
        source: bytes | None = None
        if code is not None:
            source = code.encode()
        elif script is not None:
            path = Path(script)
            try:
                source = path.read_bytes()
            except OSError as err:
                raise BadRequest(f"cannot read {path}: {err.strerror or err}", "script") from None
            entrypoint = entrypoint or path.name
            name = path.stem if name is None else name
        elif name is None:
            name = Path(os.fspath(directory)).resolve().name
        spec: dict[str, Any] = {
            "name": name or "",
            "max_gpus": max_gpus,
            "min_gpus": min_gpus,
            "priority": priority,
            "kind": kind,
            "args": list(args),
            "env": {
                **parse_env_pairs(f"{k}={v}" for k, v in (env or {}).items()),
                **training_env(
                    epochs=epochs,
                    effective_batch_size=effective_batch_size,
                    checkpoint_every=checkpoint_every,
                    data_dir=data_dir,
                ),
            },
            "entrypoint": entrypoint or "main.py",
        }
        if directory is None and not files:
            assert source is not None
            try:
                spec["code"] = source.decode()
            except UnicodeDecodeError:
                raise BadRequest("the program is not UTF-8 text", "script") from None
            return Job(self, self.request("POST", "jobs", body=spec))
        entry = None if source is None else (spec["entrypoint"], source)
        with code_archive(directory=directory, entry=entry, files=files) as archive:
            body, content_type = multipart(spec, archive, "code.tar.gz")
        with body:
            headers = {"Content-Type": content_type, "Content-Length": str(size_of(body))}
            return Job(self, self.request("POST", "jobs", data=body, headers=headers))

    def list(
        self, state: str | Sequence[str] | None = None, user: str | None = None
    ) -> builtins.list[Job]:
        """The caller's jobs, newest first; `state` keeps some states, `user` (admins) another
        user's jobs."""
        states = [state] if isinstance(state, str) else list(state or [])
        params = [("state", s) for s in states] + [("user", user)]
        return [Job(self, j) for j in self.request("GET", "jobs", params=params)["jobs"]]

    def get(self, job_id: str) -> Job:
        return Job(self, self.request("GET", _job_path(job_id), job_id=job_id))

    def cancel(self, job_id: str) -> Job:
        """Stop the job's processes and free its devices; the job stays, CANCELLED."""
        return Job(self, self.request("POST", _job_path(job_id) + "/cancel", job_id=job_id))

    def delete(self, job_id: str) -> Job:
        """Remove the job (stopped first if it has not ended) with its logs and results; its
        GPU-seconds stay in the usage report. Returns its last record."""
        return Job(self, self.request("DELETE", _job_path(job_id), job_id=job_id))

    def set_priority(self, job_id: str, priority: int) -> Job:
        return self._patch(job_id, {"priority": priority})

    def set_max_gpus(self, job_id: str, max_gpus: int) -> Job:
        """Change the most GPUs the job may hold; the allocator grows or shrinks it at once."""
        return self._patch(job_id, {"max_gpus": max_gpus})

    def _patch(self, job_id: str, change: dict[str, Any]) -> Job:
        return Job(self, self.request("PATCH", _job_path(job_id), body=change, job_id=job_id))


class Job:
    """One job: its last known state and the calls that act on it."""

    def __init__(self, client: EDTClient, data: Mapping[str, Any]) -> None:
        self.client = client
        self._data = dict(data)

    # -- state ------------------------------------------------------------------------------

    @property
    def data(self) -> dict[str, Any]:
        """The job as the server last described it (the API's ``Job`` object)."""
        return dict(self._data)

    @property
    def id(self) -> str:
        return self._data["id"]

    @property
    def name(self) -> str:
        return self._data.get("name", "")

    @property
    def state(self) -> str:
        return self._data["state"]

    @property
    def reason(self) -> str:
        return self._data.get("reason") or ""

    @property
    def user(self) -> str:
        return self._data.get("user", "")

    @property
    def devices(self) -> builtins.list[str]:
        return list(self._data.get("devices") or [])

    @property
    def max_gpus(self) -> int:
        return self._data["max_gpus"]

    @property
    def min_gpus(self) -> int:
        return self._data["min_gpus"]

    @property
    def priority(self) -> int:
        return self._data["priority"]

    @property
    def elastic(self) -> bool:
        """Its program runs the elastic runtime, so it is resized in place; False: a rigid
        job (yet), kept on the GPUs it started with."""
        return bool(self._data.get("elastic"))

    @property
    def restarts(self) -> int:
        """Times it went back to the queue after its driver died."""
        return int(self._data.get("restarts") or 0)

    @property
    def spec(self) -> dict[str, Any]:
        return dict(self._data.get("spec") or {})

    @property
    def created(self) -> float:
        return self._data["created"]

    @property
    def finished(self) -> float | None:
        return self._data.get("finished")

    @property
    def done(self) -> bool:
        """The job has finished: SUCCEEDED, FAILED or CANCELLED."""
        return self.state in TERMINAL_STATES

    def refresh(self) -> Job:
        """Fetch the job again; returns self, so ``job.refresh().state`` reads fresh."""
        self._data = self.client.request("GET", _job_path(self.id), job_id=self.id)
        return self

    def _replace(self, other: Job) -> Job:
        self._data = other._data
        return self

    # -- changes ----------------------------------------------------------------------------

    def cancel(self) -> Job:
        return self._replace(self.client.cancel(self.id))

    def delete(self) -> Job:
        """Remove the job from the server (see `EDTClient.delete`); this object keeps its
        last record."""
        return self._replace(self.client.delete(self.id))

    def set_priority(self, priority: int) -> Job:
        return self._replace(self.client.set_priority(self.id, priority))

    def set_max_gpus(self, max_gpus: int) -> Job:
        return self._replace(self.client.set_max_gpus(self.id, max_gpus))

    # -- waiting ----------------------------------------------------------------------------

    def wait(
        self,
        timeout: float | None = None,
        progress: bool = True,
        poll_interval: float = 1.0,
        stream: TextIO | None = None,
        check: bool = False,
    ) -> Job:
        """Block until the job finishes; returns it. A FAILED job returns too, unless `check`:
        then it raises :class:`JobFailed` (see :meth:`check`).

        With `progress`, a line shows state, GPUs, epoch, step and loss, redrawn in place in a
        notebook or terminal. Interrupting (Ctrl-C, the notebook's stop button) stops waiting,
        not the job. `timeout` raises :class:`WaitTimeout` when it runs out. `stream` sends the
        progress there instead of the notebook's output or stdout.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        bar = Progress(stream) if progress else None
        tracker = MetricsTracker() if progress else None
        try:
            while True:
                self.refresh()
                if tracker is not None and bar is not None:
                    self._track(tracker)
                    bar.update(format_line(self, tracker, bar.elapsed))
                if self.done:
                    break
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise WaitTimeout(self, float(timeout or 0))
                    time.sleep(min(poll_interval, left))
                else:
                    time.sleep(poll_interval)
        finally:
            if bar is not None:
                bar.close(format_line(self, tracker, bar.elapsed))
        return self.check() if check else self

    def check(self) -> Job:
        """Raise :class:`JobFailed` if the job FAILED (as of the last call that returned it):
        its message is the job's reason, its report adds the folded tracebacks and the end of
        the logs. Returns the job otherwise, as ``job.wait().check()`` reads."""
        if self.state == "FAILED":
            raise JobFailed(self, failure_report(self))
        return self

    def _track(self, tracker: MetricsTracker) -> None:
        while True:
            page = self.client.request(
                "GET",
                _job_path(self.id, "metrics"),
                params={"after": tracker.cursor},
                job_id=self.id,
            )
            if not page["metrics"]:
                return
            tracker.add(page["metrics"])
            tracker.cursor = page["cursor"]

    # -- logs and metrics -------------------------------------------------------------------

    def log_names(self) -> builtins.list[str]:
        """The job's log files: the driver's first, then each worker's."""
        return self.client.request("GET", _job_path(self.id, "logs"), job_id=self.id)["logs"]

    def logs(self, name: str | None = None, tail: int = 100) -> str:
        """The last `tail` lines of one log, or of every log under a ``==> name <==`` header."""
        names = [name] if name is not None else self.log_names()
        parts = []
        for log in names:
            chunk = self._log(log, tail=tail)
            if name is not None:
                return chunk["text"]
            parts.append(f"==> {log} <==\n{chunk['text']}")
        return "\n".join(parts)

    def follow_logs(
        self, name: str | None = None, poll_interval: float = 1.0
    ) -> Iterator[tuple[str, str]]:
        """Yield ``(log name, new text)`` from the start of the logs until the job finishes.

        Logs that appear later (workers that join) are followed too. Whatever was written
        before the job finished is read, so the end of the output is never cut off.
        """
        offsets: dict[str, int] = {}
        while True:
            finished = self.refresh().done  # read after this, so nothing written before is lost
            names = self.log_names()
            if name is not None:
                names = [name] if name in names else []
            for log in names:
                while True:
                    chunk = self._log(log, offset=offsets.get(log, 0))
                    offsets[log] = chunk["next_offset"]
                    if chunk["text"]:
                        yield log, chunk["text"]
                    if chunk["next_offset"] >= chunk["size"]:
                        break
            if finished:
                return
            time.sleep(poll_interval)

    def _log(self, name: str, **params: int) -> dict[str, Any]:
        return self.client.request(
            "GET", _job_path(self.id, "logs"), params={"name": name, **params}, job_id=self.id
        )

    def metrics(
        self, kind: str | None = None, *, as_frame: bool | None = None, all_workers: bool = False
    ) -> Any:
        """The job's metric records (oldest first); a pandas DataFrame when pandas is installed.

        `kind` keeps one record type (``"step"``: train loss per step, ``"epoch"``: validation
        loss and metrics per epoch). Every worker reports the same reduced values, so the
        service keeps one record per step and epoch; records of other kinds that name a rank
        are kept from rank 0 only unless `all_workers`. `as_frame` forces (True) or refuses
        (False) a DataFrame.
        """
        records: builtins.list[dict[str, Any]] = []
        cursor = 0
        while True:
            page = self.client.request(
                "GET", _job_path(self.id, "metrics"), params={"after": cursor}, job_id=self.id
            )
            if not page["metrics"]:
                break
            records.extend(page["metrics"])
            cursor = page["cursor"]
        if kind is not None:
            records = [r for r in records if r.get("type") == kind]
        if not all_workers:
            records = [r for r in records if r.get("rank", 0) == 0]
        if as_frame is False:
            return records
        try:
            import pandas
        except ImportError:
            if as_frame:
                raise EDTError("as_frame=True needs pandas: pip install pandas") from None
            return records
        return pandas.DataFrame.from_records(records)

    # -- results ----------------------------------------------------------------------------

    def artifacts(self) -> builtins.list[dict[str, Any]]:
        """The files in the job's result directory: ``{"path", "size", "modified"}`` each."""
        return self.client.request("GET", _job_path(self.id, "artifacts"), job_id=self.id)[
            "artifacts"
        ]

    def download(
        self, out_dir: str | os.PathLike[str] | None = None, path: str | None = None
    ) -> Path:
        """Copy the job's result directory (or only the artifact at `path`) into `out_dir`
        (default: ``<job name or id>-result`` in the working directory); returns it.

        Files are streamed through a temporary file, so large results do not fill memory. A
        job that is still running gives what it has written so far (its checkpoints).
        """
        default = re.sub(r"[^\w.-]+", "_", self.name or self.id) + "-result"
        out = Path(out_dir) if out_dir is not None else Path(default)
        out.mkdir(parents=True, exist_ok=True)
        if path is not None:
            target = safe_target(out, path)
            target.parent.mkdir(parents=True, exist_ok=True)
            with self._artifact(path) as response, open(target, "wb") as f:
                copy_response(response, f)
            return out
        with tempfile.TemporaryFile() as archive:
            with self.client._open(
                "GET", _job_path(self.id, "result.zip"), job_id=self.id
            ) as response:
                copy_response(response, archive)
            archive.seek(0)
            extract_zip(archive, out)
        return out

    def load_model(
        self, path: str = MODEL_PATH, map_location: Any = "cpu", weights_only: bool = True
    ) -> Any:
        """The trained model's state dict (``model.load_state_dict(job.load_model())``).

        The runtime saves it as ``model/model_epoch_final.pth`` in the result directory when
        training ends. Loaded with ``weights_only=True``, torch's safe mode for tensors and
        plain containers, since the file was written by code that ran elsewhere.
        """
        try:
            with self._artifact(path) as response:
                buffer = io.BytesIO(response.read())
        except NoSuchArtifact:
            if self.refresh().state == "SUCCEEDED":
                raise
            raise NoSuchArtifact(
                f"Job {self.id} is {self.state} and has no {path} yet: the model is saved when "
                "training ends (job.wait() waits for it)."
            ) from None
        import torch

        return torch.load(buffer, map_location=map_location, weights_only=weights_only)

    def _artifact(self, path: str) -> Any:
        quoted = "/".join(urllib.parse.quote(p, safe="") for p in path.split("/"))
        return self.client._open(
            "GET", _job_path(self.id, "artifacts") + "/" + quoted, job_id=self.id
        )

    # -- display ----------------------------------------------------------------------------

    def _summary(self) -> builtins.list[tuple[str, str]]:
        gpus = f"{len(self.devices)} of max {self.max_gpus}" + (
            f" (min {self.min_gpus})" if self.min_gpus > 1 else ""
        )
        rows = [("state", self.state), ("GPUs", gpus), ("priority", str(self.priority))]
        if self.reason:
            rows.append(("reason", self.reason.splitlines()[0][:200]))
        return rows

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v}" for k, v in self._summary())
        return f"<Job {self.id} {self.name!r}: {fields}>"

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><th style='text-align:left'>{html.escape(k)}</th>"
            f"<td style='text-align:left'>{html.escape(v)}</td></tr>"
            for k, v in self._summary()
        )
        title = html.escape(f"{self.name or 'job'} [{self.id}]")
        return f"<div class='edt-job'><b>{title}</b><table>{rows}</table></div>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Job) and other.id == self.id and other.client is self.client

    def __hash__(self) -> int:
        return hash(self.id)


def _job_path(job_id: str, *rest: str) -> str:
    if not job_id or not isinstance(job_id, str):
        raise NoSuchJob(str(job_id), f"{job_id!r} is not a job id.")
    return "/".join(["jobs", urllib.parse.quote(job_id, safe=""), *rest])
