"""/edt/api/v1/jobs: submit, list, read, change and cancel the user's jobs."""

from __future__ import annotations

from jupyter_server.auth.decorator import authorized
from tornado import web

from ..jobs.models import JobSpec, JobState, parse_limits
from .base import APIError, EDTHandler, api_errors


class JobsHandler(EDTHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        states = self.get_arguments("state")
        try:
            parsed = [JobState(s) for s in states] if states else None
        except ValueError as err:
            names = ", ".join(s.value for s in JobState)
            raise APIError(400, f"state must be one of {names}", "state") from err
        owner = self.get_argument("user", None)
        with api_errors():
            jobs = self.service.list(self.user_name, states=parsed, owner=owner)
        self.write_json({"jobs": jobs})

    @web.authenticated
    @authorized
    async def post(self) -> None:
        with api_errors():
            spec = JobSpec.from_dict(self.json_body())
            job = await self.service.submit(self.user_name, spec)
        self.set_header("Location", self.request.path.rstrip("/") + "/" + job["id"])
        self.write_json(job, status=201)


class JobHandler(EDTHandler):
    @web.authenticated
    @authorized
    async def get(self, job_id: str) -> None:
        with api_errors():
            self.write_json(self.service.get(self.user_name, job_id))

    @web.authenticated
    @authorized
    async def patch(self, job_id: str) -> None:
        with api_errors():
            limits = parse_limits(self.json_body())
            self.write_json(await self.service.update(self.user_name, job_id, **limits))

    @web.authenticated
    @authorized
    async def delete(self, job_id: str) -> None:
        with api_errors():
            self.write_json(await self.service.cancel(self.user_name, job_id))


class MetricsHandler(EDTHandler):
    @web.authenticated
    @authorized
    async def get(self, job_id: str) -> None:
        try:
            after = int(self.get_argument("after", "0"))
        except ValueError as err:
            raise APIError(400, "must be an integer cursor", "after") from err
        with api_errors():
            self.service.get(self.user_name, job_id)
            records = self.service.store.metrics(job_id, after=after)
        cursor = records[-1]["id"] if records else after
        self.write_json({"metrics": records, "cursor": cursor})
