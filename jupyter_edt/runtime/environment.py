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
3. the runtime's wiring of this worker (its store, id, run, log directory, timeout), and
   torchrun's contract (:func:`torchrun_environment`), so that a program written for torchrun
   (DDP, FSDP, Accelerate, Hugging Face, Lightning) forms its group unchanged;
4. its device (``EDT_DEVICE_ID``, and ``CUDA_VISIBLE_DEVICES``: the job's GPUs on its node in
   local-rank order, as :func:`torchrun_environment` lists them).

Paths below the job directory are moved into a node's copy of it by the launcher that copies
it (``launch/mirror.py``), after this rule has been applied.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

#: The key of ``job.json`` holding the job's environment (layer 2).
JOB_ENV_KEY = "env"


def worker_environment(
    job_env: Mapping[str, str],
    wiring: Mapping[str, str],
    device: Mapping[str, str] = {},
) -> dict[str, str]:
    """Layers 2 to 4 of the rule; the launcher adds them to its base (layer 1)."""
    return {**job_env, **wiring, **device}


@dataclass(frozen=True)
class Rendezvous:
    """Where and which time a job's workers meet, in torchrun's terms: the store the job's
    driver hosts for this start of its workers (a fresh one each time, as torchrun's agent
    makes one per round, so no key of an earlier start is read), the job's id, and how many
    times its workers have been started again (``TORCHELASTIC_RESTART_COUNT``)."""

    master_addr: str
    master_port: int
    run_id: str
    restart_count: int = 0
    max_restarts: int = 0


def rank_order(nodes: Sequence[str | None]) -> list[int]:
    """The workers' indices in rank order: grouped by node, nodes in the order they first
    appear, each node's workers in the order given (torchrun numbers ranks node by node)."""
    first: dict[str | None, int] = {}
    for node in nodes:
        first.setdefault(node, len(first))
    return sorted(range(len(nodes)), key=lambda i: (first[nodes[i]], i))


def torchrun_environment(
    nodes: Sequence[str | None],
    gpus: Sequence[str],
    rendezvous: Rendezvous,
    job_env: Mapping[str, str] = {},
) -> list[dict[str, str]]:
    """What torchrun gives each worker (``torch.distributed.run``'s agent), for workers on
    `nodes` holding `gpus` (each one's ``CUDA_VISIBLE_DEVICES`` entry; "" for a virtual
    device), in that order.

    Ranks follow :func:`rank_order`. On each node the job's GPUs there are visible in
    local-rank order, so ``torch.cuda.set_device(LOCAL_RANK)`` (or ``cuda:LOCAL_RANK``)
    reaches the worker's own GPU, as under torchrun on a node given to one job. The store is
    the driver's (``TORCHELASTIC_USE_AGENT_STORE``: rank 0 hosts none, and nothing needs a
    free port on a worker's node). ``OMP_NUM_THREADS`` is 1 where several workers share a
    node, unless the job sets it (torchrun's rule)."""
    if len(nodes) != len(gpus):
        raise ValueError(f"one GPU entry per worker: {len(nodes)} nodes, {len(gpus)} GPUs")
    order = rank_order(nodes)
    rank = {worker: r for r, worker in enumerate(order)}
    node_ids = list(dict.fromkeys(nodes[i] for i in order))
    on_node = {node: [i for i in order if nodes[i] == node] for node in node_ids}
    world = len(nodes)
    envs = []
    for i, node in enumerate(nodes):
        local = on_node[node]
        # a worker on a virtual device sees none; one on a GPU, the node's GPUs of the job
        visible = ",".join(gpus[w] for w in local if gpus[w]) if gpus[i] else ""
        env = {
            "RANK": str(rank[i]),
            "LOCAL_RANK": str(local.index(i)),
            "WORLD_SIZE": str(world),
            "LOCAL_WORLD_SIZE": str(len(local)),
            "GROUP_RANK": str(node_ids.index(node)),
            "GROUP_WORLD_SIZE": str(len(node_ids)),
            "ROLE_NAME": "default",
            "ROLE_RANK": str(rank[i]),
            "ROLE_WORLD_SIZE": str(world),
            "MASTER_ADDR": rendezvous.master_addr,
            "MASTER_PORT": str(rendezvous.master_port),
            "TORCHELASTIC_RUN_ID": rendezvous.run_id,
            "TORCHELASTIC_RESTART_COUNT": str(rendezvous.restart_count),
            "TORCHELASTIC_MAX_RESTARTS": str(rendezvous.max_restarts),
            "TORCHELASTIC_USE_AGENT_STORE": "True",
            "TORCH_NCCL_ASYNC_ERROR_HANDLING": job_env.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
            "CUDA_VISIBLE_DEVICES": visible,
        }
        if len(local) > 1 and "OMP_NUM_THREADS" not in job_env:
            env["OMP_NUM_THREADS"] = "1"
        envs.append(env)
    return envs
