"""Multi-worker jobs (gloo, CPU): elastic equivalence, sample accounting, PIDs, fault recovery,
checkpoint and resume. Each scenario asserts several invariants to keep the suite short."""

from __future__ import annotations

import json
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from waiting import eventually_sync
from workerruns import final_model, worker_steps

from jupyter_edt.runtime import LocalController
from jupyter_edt.runtime import partition as part

PROGRAM = str(Path(__file__).parent / "programs" / "tiny.py")
N_TRAIN, BATCH, EPOCHS = 56, 12, 3  # 5 steps an epoch, the last a partial batch of 8
STEPS = part.steps_per_epoch(N_TRAIN, BATCH)
ARGS = ["--epochs", str(EPOCHS), "--batch", str(BATCH), "--micro", "3"]
# virtual devices: CPU and gloo, also on a GPU machine; gradient buckets of 32 float64 (the
# model has 178 parameters), so that the exchange starts during backward, bucket by bucket
CPU = {"CUDA_VISIBLE_DEVICES": "", "EDT_BUCKET_BYTES": "256"}


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, warm_launcher) -> dict[str, Any]:
    """The same job on one fixed worker."""
    out = tmp_path_factory.mktemp("ref")
    with LocalController(
        [PROGRAM, *ARGS], out, timeout_s=10, env=CPU, launcher=warm_launcher()
    ) as ctl:
        ctl.start(1)
        assert ctl.wait(180) == {"w0": 0}
        events = ctl.events()
    steps = worker_steps(events, "w0")
    return {
        "losses": [s["loss"] for s in steps],
        "val": [e["val_loss"] for e in events if e["type"] == "epoch"],
        "final": final_model(out),
    }


def test_elastic_1_3_2_1_with_a_kill_equals_the_fixed_run(
    reference: dict[str, Any], tmp_path: Path, warm_launcher
) -> None:
    record = tmp_path / "served"
    record.mkdir()
    with LocalController(
        [PROGRAM, *ARGS, "--record", str(record)],
        tmp_path,
        timeout_s=10,
        env=CPU,
        launcher=warm_launcher(),
    ) as ctl:
        ctl.hold(3)
        ctl.start(1)
        ctl.wait_held(3)
        gen = ctl.scale(3, wait=False)  # joiners start and import while w0 waits at step 3
        ctl.hold(7)
        ctl.release(3)
        grown = ctl.wait_formed(gen)
        ctl.wait_held(7)
        gen = ctl.scale(2, wait=False)
        ctl.hold(12)  # mid-epoch 2
        ctl.release(7)
        shrunk = ctl.wait_formed(gen)
        ctl.wait_held(12)
        victim = ctl.members[1]
        ctl.release(12)
        ctl.kill(victim)
        codes = ctl.wait(180)
        pids = ctl.pids()
        events = ctl.events()
        sizes = [len(m["members"]) for m in ctl.membership]

    # membership went 1 -> 3 -> 2 -> 1; the leaver exited cleanly, the victim by SIGKILL
    assert sizes == [1, 3, 2, 1]
    assert codes == {"w0": 0, "w1": -signal.SIGKILL, "w2": 0}
    assert grown["world_size"] == 3 and grown["state_from"] == 0 and grown["receivers"] == [1, 2]
    assert shrunk["world_size"] == 2 and shrunk["receivers"] == []
    assert any(e["type"] == "left" and e["worker"] == "w2" for e in events)

    # survivors keep their PIDs: every event of a worker comes from the process launched for it
    for w, pid in pids.items():
        assert {e["pid"] for e in events if e["worker"] == w} == {pid}
    gens_of_w1 = {e["generation"] for e in worker_steps(events, "w1")}
    assert gens_of_w1 == {2, 3}

    # the kill was noticed and the half-done step redone
    failures = [e for e in events if e["type"] == "failure"]
    assert failures and all(f["worker"] == "w0" for f in failures)
    assert [
        e["world_size"] for e in events if e["type"] == "generation" and e["worker"] == "w0"
    ] == [
        1,
        3,
        2,
        1,
    ]

    # equivalence with the fixed one-worker run, to 1e-9 in float64
    steps = worker_steps(events, "w0")
    assert [s["global_step"] for s in steps] == list(range(EPOCHS * STEPS))
    assert [s["loss"] for s in steps] == pytest.approx(reference["losses"], abs=1e-9, rel=0)
    val = [e["val_loss"] for e in events if e["type"] == "epoch" and e["worker"] == "w0"]
    assert val == pytest.approx(reference["val"], abs=1e-9, rel=0)
    assert _max_diff(final_model(tmp_path), reference["final"]) <= 1e-9

    # no sample lost or seen twice: committed steps are each epoch's steps exactly once, so
    # each epoch covers every index once; fetches beyond that come only from dropped steps
    committed = [(s["epoch"], s["step"]) for s in steps]
    assert committed == [(e, s) for e in range(EPOCHS) for s in range(STEPS)]
    served: Counter[int] = Counter()
    for f in record.glob("served-*.txt"):
        served.update(int(x) for x in f.read_text().split())
    assert served.keys() == set(range(N_TRAIN))
    extra = served - Counter({i: EPOCHS for i in range(N_TRAIN)})
    assert all(served[i] >= EPOCHS for i in range(N_TRAIN))
    dropped: Counter[int] = Counter()
    for f in failures:
        g = f["global_step"]
        perm = part.epoch_permutation(N_TRAIN, 0, g // STEPS)
        dropped.update(part.global_batch(perm, g % STEPS, BATCH))
    assert not extra - dropped


def test_four_workers_equal_the_fixed_run_bit_for_bit(
    reference: dict[str, Any], tmp_path: Path, warm_launcher
) -> None:
    """4 micro-batches a step on 4 workers, and 3 on the last, partial step of an epoch: a
    worker without any micro-batch still owns a chunk of the sum."""
    with LocalController(
        [PROGRAM, *ARGS], tmp_path, timeout_s=10, env=CPU, launcher=warm_launcher()
    ) as ctl:
        ctl.start(4)
        assert set(ctl.wait(180).values()) == {0}
        events = ctl.events()
    for w in ("w0", "w3"):
        assert [s["loss"] for s in worker_steps(events, w)] == reference["losses"]
    assert _max_diff(final_model(tmp_path), reference["final"]) == 0.0


def test_checkpoint_on_request_then_whole_job_killed_resumes_exactly(
    reference: dict[str, Any], tmp_path: Path, warm_launcher
) -> None:
    args = [PROGRAM, *ARGS, "--checkpoint-every", "2"]
    with LocalController(args, tmp_path, timeout_s=10, env=CPU, launcher=warm_launcher()) as ctl:
        ctl.hold(7)
        ctl.start(2)
        ctl.wait_held(7)
        ctl.request_checkpoint()
        ctl.hold(9)
        ctl.release(7)
        ctl.wait_held(9)
        for w in ctl.members:
            ctl.kill(w)
        assert set(ctl.wait(60).values()) == {-signal.SIGKILL}
    ckpts = sorted(p.name for p in (tmp_path / "checkpoint").iterdir())
    assert ckpts == ["ckpt-000000008.pt"]  # on request after step 7, mid-epoch 1
    assert not (tmp_path / "model").exists()

    with LocalController(args, tmp_path, timeout_s=10, env=CPU, launcher=warm_launcher()) as ctl:
        ctl.start(3)
        assert set(ctl.wait(180).values()) == {0}
        pids = set(ctl.pids().values())
        events = [e for e in ctl.events() if e["pid"] in pids]  # the logs append across runs
    resumed = worker_steps(events, "w0")
    assert {e["world_size"] for e in resumed} == {3}
    assert resumed[0]["global_step"] == 8 and resumed[0]["epoch"] == 1
    assert [s["loss"] for s in resumed] == pytest.approx(reference["losses"][8:], abs=1e-9, rel=0)
    assert _max_diff(final_model(tmp_path), reference["final"]) <= 1e-9
    formed = [e for e in events if e["type"] == "generation" and e["world_size"] == 3]
    assert json.dumps(formed[-1]["receivers"]) == "[1, 2]"


def test_joiners_ordered_as_the_job_ends_are_stopped_not_started_over(
    tmp_path: Path, warm_launcher
) -> None:
    """A grow ordered after the members' last step: they never come to the new generation, so
    its joiners would form one of their own, with nobody holding the state, and train the job
    again from its start. The controller stops them once a member has finished."""
    linger = tmp_path / "linger"
    linger.mkdir()
    program = [PROGRAM, "--epochs", "1", "--batch", str(BATCH), "--linger", str(linger)]
    with LocalController(
        program, tmp_path / "out", timeout_s=10, env=CPU, launcher=warm_launcher()
    ) as ctl:
        ctl.start(2)
        eventually_sync(
            lambda: all((linger / f"trained-{w}").exists() for w in ("w0", "w1")),
            "both workers done training",
        )
        _, joiners = ctl.resize(ctl.members, [{}], wait=False)
        (linger / "go").touch()  # the members exit
        codes = ctl.wait(120)
        events = ctl.events()
        members = ctl.members
    assert codes["w0"] == codes["w1"] == 0 and codes[joiners[0]] != 0, codes
    assert members == ("w0", "w1")
    theirs = [e["type"] for e in events if e["worker"] == joiners[0]]
    assert "train_begin" not in theirs and "step" not in theirs, theirs
    assert [e["global_step"] for e in worker_steps(events, "w0")] == list(range(STEPS))


def test_a_member_that_dies_as_a_resize_is_decided_is_not_kept(
    tmp_path: Path, warm_launcher
) -> None:
    """The driver reads the members, decides, then resizes; a member that died in between (its
    node lost, say) has been dropped by the watcher. The resize keeps the others and the job
    goes on (it failed the whole job, as a ValueError in the driver, before)."""
    program = [PROGRAM, "--epochs", "60", "--batch", str(BATCH)]
    with LocalController(
        program, tmp_path / "out", timeout_s=10, env=CPU, launcher=warm_launcher()
    ) as ctl:
        ctl.start(2)
        ctl.wait_formed(1)
        seen = ctl.members  # what the driver decided from
        ctl.kill("w1")
        eventually_sync(lambda: ctl.members == ("w0",), "the watcher dropped w1")
        gen, joiners = ctl.resize(seen, [{}])
        assert ctl.members == ("w0", *joiners) and gen > 1
        with pytest.raises(ValueError, match="never started"):
            ctl.resize(["w9"], [])
        codes = ctl.wait(300)
    assert codes["w0"] == codes[joiners[0]] == 0, codes
