"""What every worker of a job sees in its environment, whatever launcher runs it and wherever.

One rule, in order of precedence (later wins):

1. the launcher's base: the environment of the process that starts the worker on its node (the
   driver's own here, a Ray keeper's on another node), reduced to its safe part when the worker
   runs as a user's account (``launch/accounts.py``);
2. the job's environment: what was submitted (``env``, the submission's overrides such as
   ``EDT_EPOCHS``), then the service's contract (``EDT_JOB_ID``, ``DATA_DIR``, ``RESULT_DIR``,
   ``LOG_DIR``, ...), then the plugins' names (WMLA's); the service computes it once
   (``DriverRunner.job_environment``) and writes it into ``job.json``, so it reaches a worker
   explicitly, never by inheritance from the driver (a Ray node inherits nothing of it);
3. the runtime's wiring of this worker (its store, id, run, log directory, timeout);
4. its device (``CUDA_VISIBLE_DEVICES``, ``EDT_DEVICE_ID``).

Paths below the job directory are moved into a node's copy of it by the launcher that copies
it (``launch/mirror.py``), after this rule has been applied.
"""

from __future__ import annotations

from collections.abc import Mapping

#: The key of ``job.json`` holding the job's environment (layer 2).
JOB_ENV_KEY = "env"


def worker_environment(
    job_env: Mapping[str, str],
    wiring: Mapping[str, str],
    device: Mapping[str, str] = {},
) -> dict[str, str]:
    """Layers 2 to 4 of the rule; the launcher adds them to its base (layer 1)."""
    return {**job_env, **wiring, **device}
