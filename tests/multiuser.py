"""The multi-user test server's users, and requests made as one of them.

A module that marks itself `pytest.mark.multi_user` (see conftest.py) gets a server whose
users are named by their tokens, as JupyterHub names them: `token alice` is alice, `token bob`
bob, `token root` the admin root. Requests name their user with `as_user`; `api` is one call of
the REST API as a user, `wait_for` polls one of a user's jobs until a condition holds.
"""

from __future__ import annotations

import json

from jupyter_server.auth.identity import IdentityProvider, User
from waiting import eventually

USERS = ("alice", "bob", "root")
ADMINS = ["root"]


class TokenPerUser(IdentityProvider):
    """Names users by their token (`token alice` is alice), as JupyterHub's provider does."""

    def get_user(self, handler):
        auth = handler.request.headers.get("Authorization", "")
        token = handler.get_argument("token", "") or auth.removeprefix("token ").strip()
        if token in USERS:
            return User(username=token)
        return None

    def is_token_authenticated(self, handler) -> bool:
        # a token in a header is not a cookie, so no XSRF check applies (as with Jupyter's own)
        return self.get_user(handler) is not None


def as_user(name: str) -> dict:
    """The headers of a request made as `name`."""
    return {"Authorization": f"token {name}"}


async def api(jp_fetch, user: str, *path: str, method: str = "GET", body=None, **kw):
    """`user`'s request to /edt/api/v1/<path>: a body given as data is sent as JSON, text or
    bytes as they are; the answer read as JSON (None when empty)."""
    kwargs = {"method": method, "headers": as_user(user), **kw}
    if body is not None:
        kwargs["body"] = body if isinstance(body, str | bytes) else json.dumps(body)
    response = await jp_fetch("edt", "api", "v1", *path, **kwargs)
    return json.loads(response.body) if response.body else None


async def cancel(jp_fetch, user: str, job_id: str) -> dict:
    """`user` cancels the job (it stays, CANCELLED); the answer is the job."""
    return await api(jp_fetch, user, "jobs", job_id, "cancel", method="POST", body="")


async def wait_for(jp_fetch, user: str, job_id: str, condition, what: str) -> dict:
    """The job as `user` reads it, once `condition(job)` holds."""
    return await eventually(
        lambda: api(jp_fetch, user, "jobs", job_id),
        f"became {what} (job {job_id})",
        until=condition,
        interval=0.2,
    )


def finished(job) -> bool:
    return job["state"] in ("SUCCEEDED", "FAILED", "CANCELLED")
