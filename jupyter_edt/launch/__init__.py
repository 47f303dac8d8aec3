"""Where job processes run. The Launcher interface hides it; LocalLauncher runs them here,
RayLauncher on a Ray cluster's nodes."""

from __future__ import annotations

import os
from collections.abc import Mapping

from .base import Launcher


def workers_launcher(env: Mapping[str, str] | None = None) -> Launcher:
    """The launcher a driver starts its workers with: the kind that started the driver, as its
    environment says (`Launcher.driver_env`); by default child processes in the driver's own
    process group."""
    env = os.environ if env is None else env
    kind = env.get("EDT_LAUNCHER", "local")
    if kind == "ray":
        from .ray import ADDRESS_ENV, NAMESPACE_ENV, SHARED_FS_ENV, RayLauncher

        return RayLauncher(
            env[ADDRESS_ENV],
            namespace=env.get(NAMESPACE_ENV, "jupyter-edt"),
            shared_fs=env.get(SHARED_FS_ENV) == "1",
            detached=False,  # its workers' keepers end with the driver
        )
    if kind != "local":
        raise ValueError(f"EDT_LAUNCHER must be 'local' or 'ray', got {kind!r}.")
    from .forkserver import FORKSERVER_ENV
    from .local import LocalLauncher

    # warm workers from the machine's fork server, where the service runs one
    return LocalLauncher(own_session=False, forkserver=env.get(FORKSERVER_ENV) or None)
