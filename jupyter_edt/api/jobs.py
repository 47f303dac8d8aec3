"""/edt/api/v1/jobs: submit, list, read, change, cancel and delete the user's jobs."""

from __future__ import annotations

from ..jobs.models import JobSpec, JobState, parse_limits
from .base import LAST_ID, APIError, EDTHandler, api_errors


class JobsHandler(EDTHandler):
    async def get(self) -> None:
        states = self.get_arguments("state")
        try:
            parsed = [JobState(s) for s in states] if states else None
        except ValueError as err:
            names = ", ".join(s.value for s in JobState)
            raise APIError(400, f"state must be one of {names}", "state") from err
        owner = self.get_argument("user", None)
        with api_errors():
            # read first: an event recorded meanwhile is in the list and in the feed after it
            last_id = self.service.last_event_id()
            jobs = self.service.list(self.user_name, states=parsed, owner=owner)
        self.write_json({"jobs": [job.to_dict() for job in jobs], "last_event_id": last_id})

    async def post(self) -> None:
        with api_errors():
            spec = JobSpec.from_dict(self.json_body())
            job = await self.service.submit(self.user_name, spec)
        self.set_header("Location", self.request.path.rstrip("/") + "/" + job.id)
        self.write_json(job.to_dict(), status=201)


class JobHandler(EDTHandler):
    async def get(self, job_id: str) -> None:
        with api_errors():
            self.write_json(self.service.get(self.user_name, job_id).to_dict())

    async def patch(self, job_id: str) -> None:
        with api_errors():
            limits = parse_limits(self.json_body())
            job = await self.service.update(self.user_name, job_id, **limits)
        self.write_json(job.to_dict())

    async def delete(self, job_id: str) -> None:
        """Remove the job (stopped first if it has not ended), as REST and WMLA's execs API
        do; its GPU-seconds stay in the usage report. Answers its last record."""
        with api_errors():
            job = await self.service.delete(self.user_name, job_id)
        self.write_json(job.to_dict())


class CancelHandler(EDTHandler):
    """Stop a job and free its devices; it stays, with its logs and results."""

    async def post(self, job_id: str) -> None:
        with api_errors():
            job = await self.service.cancel(self.user_name, job_id)
        self.write_json(job.to_dict())


class MetricsHandler(EDTHandler):
    async def get(self, job_id: str) -> None:
        after = _int_argument(self, "after") or 0
        with api_errors():
            # no id is larger than the store's integers, whose limit a query must not exceed
            records = self.service.metrics(self.user_name, job_id, after=min(after, LAST_ID))
        cursor = records[-1]["id"] if records else after
        self.write_json({"metrics": records, "cursor": cursor})


class LogsHandler(EDTHandler):
    """Without `name`: the job's log names. With it: `tail` lines, or the bytes from `offset`.
    With `fold=true`: the job's logs (or the log `name`) folded as a user reads a failure, each
    traceback once with the processes that printed it, the framework's frames folded, read
    from the last `tail` lines of each (200 by default).

    A name the job has no log under is 404 naming `name`, as a missing artifact is; `tail`,
    `offset` and `fold` are checked whether or not a name is given."""

    async def get(self, job_id: str) -> None:
        name = self.get_argument("name", None)
        offset = _int_argument(self, "offset")
        tail = _int_argument(self, "tail")
        fold = _bool_argument(self, "fold")
        if offset is not None and tail is not None:
            raise APIError(400, "give offset or tail, not both", "tail")
        if fold and offset is not None:
            raise APIError(400, "give offset or fold, not both", "fold")
        with api_errors():
            names = self.service.log_names(self.user_name, job_id)
            if name is not None and name not in names:
                raise APIError(404, f"Job {job_id} has no log named {name!r}.", "name")
            if fold:
                folded = self.service.fold_logs(
                    self.user_name,
                    job_id,
                    names=names if name is None else [name],
                    **({} if tail is None else {"tail": tail}),
                )
                self.write_json({"text": folded.text, "logs": list(folded.names)})
                return
            if name is None:
                self.write_json({"logs": names})
                return
            chunk = self.service.read_log(
                self.user_name,
                job_id,
                name,
                offset=offset,
                tail=100 if offset is None and tail is None else tail,
            )
        self.write_json(
            {
                "name": chunk.name,
                "text": chunk.text,
                "offset": chunk.offset,
                "next_offset": chunk.next_offset,
                "size": chunk.size,
            }
        )


def _int_argument(handler: EDTHandler, name: str) -> int | None:
    value = handler.get_argument(name, None)
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError as err:
        raise APIError(400, "must be a non-negative integer", name) from err
    if number < 0:
        raise APIError(400, "must be a non-negative integer", name)
    return number


def _bool_argument(handler: EDTHandler, name: str) -> bool:
    """A flag in the query: ``true`` or ``false`` (``1``, ``0``); false when absent."""
    value = handler.get_argument(name, None)
    if value is None:
        return False
    flag = {"true": True, "1": True, "false": False, "0": False}.get(value.lower())
    if flag is None:
        raise APIError(400, "must be true or false", name)
    return flag
