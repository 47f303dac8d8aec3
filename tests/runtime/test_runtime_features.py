"""The Trainer's features for real models (issue 26), each under grow and shrink against a run
at a fixed size, bit for bit: bf16 autocast with clipping and augmented samples read by
DataLoader processes (a fixed run that reads in place), fp16's skipped steps agreed on every
worker with the loss scale moving to joiners, and a Hugging Face model on dict batches that
returns its own loss. Real workers (gloo, CPU, one thread each) through ``LocalController``,
forked warm (the session's ``warm_launcher``), as the service's are."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from workerruns import final_model, worker_steps

from jupyter_edt.launch.local import LocalLauncher
from jupyter_edt.runtime import LocalController
from jupyter_edt.runtime import partition as part

OVERFLOWING = 5  # programs/features.py's sample that overflows fp16
Launch = Callable[[], LocalLauncher]  # conftest's warm_launcher
PROGRAM = str(Path(__file__).parent / "programs" / "features.py")
STEPS = 10  # 40 samples, global batch 8, 2 epochs; 4 micro-batches of 2 a step
CPU = {"CUDA_VISIBLE_DEVICES": "", "EDT_NUM_THREADS": "1", "EDT_BUCKET_BYTES": "256"}


def _controller(launch: Launch, args: list[str], out: Path) -> LocalController:
    return LocalController([PROGRAM, *args], out, timeout_s=10, env=CPU, launcher=launch())


def _identical(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def fixed(launch: Launch, out: Path, args: list[str], workers: int = 1) -> list[dict[str, Any]]:
    """The job at a fixed size; its events."""
    with _controller(launch, args, out) as ctl:
        ctl.start(workers)
        assert set(ctl.wait(240).values()) == {0}, ctl.log_dir
        return ctl.events()


def elastic(
    launch: Launch, out: Path, args: list[str], sizes: list[int]
) -> tuple[list[dict[str, Any]], list]:
    """The job started at ``sizes[0]`` workers and resized to each next size, two steps apart;
    its events and the sizes it formed at."""
    with _controller(launch, args, out) as ctl:
        at = 2
        ctl.hold(at)
        ctl.start(sizes[0])
        for n in sizes[1:]:
            ctl.wait_held(at)
            gen = ctl.scale(n, wait=False)
            ctl.hold(at + 2)
            ctl.release(at)
            ctl.wait_formed(gen)
            at += 2
        ctl.wait_held(at)
        ctl.release(at)
        assert set(ctl.wait(240).values()) == {0}, ctl.log_dir
        return ctl.events(), [len(m["members"]) for m in ctl.membership]


def test_bf16_clipped_augmented_and_read_by_loaders_grown_and_shrunk_equals_a_fixed_run(
    warm_launcher: Launch, tmp_path: Path
) -> None:
    """bf16 autocast and clipping by the global norm; samples with random augmentation read by
    2 DataLoader processes per worker in the elastic run and in place in the fixed one: the
    same data, the same updates."""
    args = ["--precision", "bf16", "--clip-norm", "0.05"]
    ref = fixed(warm_launcher, tmp_path / "fixed", [*args, "--num-workers", "0"])
    events, sizes = elastic(
        warm_launcher, tmp_path / "elastic", [*args, "--num-workers", "2"], [1, 3, 2]
    )
    assert sizes == [1, 3, 2]
    _identical(final_model(tmp_path / "elastic"), final_model(tmp_path / "fixed"))
    steps, ref_steps = worker_steps(events, "w0"), worker_steps(ref, "w0")
    assert [s["global_step"] for s in steps] == list(range(STEPS))
    assert [s["loss"] for s in steps] == [s["loss"] for s in ref_steps]
    # the gradient was clipped (its norm above the bound), by the same norm on every worker
    assert all(s["grad_norm"] > 0.05 for s in ref_steps)
    by_step = {}
    for s in (e for e in events if e["type"] == "step"):
        by_step.setdefault(s["global_step"], set()).add(s["grad_norm"])
    assert all(len(norms) == 1 for norms in by_step.values())
    assert [s["grad_norm"] for s in steps] == [s["grad_norm"] for s in ref_steps]
    # every worker's readers started before it joined its group: a joiner's too
    for w in ("w0", "w1", "w2"):
        mine = [e for e in events if e["worker"] == w]
        kinds = [e["type"] for e in mine]
        assert kinds.index("loader") < kinds.index("generation"), kinds
        assert next(e for e in mine if e["type"] == "loader")["num_workers"] == 2
    assert all(s["data_s"] >= 0 for s in steps)


def test_fp16_overflows_are_skipped_on_every_worker_and_the_scale_moves_to_joiners(
    warm_launcher: Launch, tmp_path: Path
) -> None:
    """One sample overflows fp16: the step that holds it is skipped everywhere, and the
    halved loss scale reaches the workers that join later."""
    args = ["--precision", "fp16", "--overflow"]
    ref = fixed(warm_launcher, tmp_path / "fixed", args)
    events, sizes = elastic(warm_launcher, tmp_path / "elastic", args, [1, 3, 2])
    assert sizes == [1, 3, 2]
    _identical(final_model(tmp_path / "elastic"), final_model(tmp_path / "fixed"))
    ref_steps = worker_steps(ref, "w0")
    skipped = [s["global_step"] for s in ref_steps if s["skipped"]]
    per_epoch = STEPS // 2
    holding = {
        e * per_epoch + part.epoch_permutation(40, 0, e).index(OVERFLOWING) // 8 for e in (0, 1)
    }
    assert holding <= set(skipped)  # and any step whose scaled gradient overflowed
    scales = [s["loss_scale"] for s in ref_steps]
    assert scales[-1] == 2.0**16 * 0.5 ** len(skipped)
    # each step's decision and scale, the same on every worker that took it
    seen: dict[int, set] = {}
    for s in (e for e in events if e["type"] == "step"):
        seen.setdefault(s["global_step"], set()).add((s["skipped"], s["loss_scale"]))
    assert [seen[g] for g in range(STEPS)] == [{(s["skipped"], s["loss_scale"])} for s in ref_steps]
    # so a worker that joined after an overflow took the halved scale over
    joined = worker_steps(events, "w1")[0]["global_step"]
    assert any(g < joined for g in skipped), (skipped, joined)


def test_a_hugging_face_model_on_dict_batches_with_its_own_loss(
    warm_launcher: Launch, tmp_path: Path
) -> None:
    """A tiny GPT-2 from its config, batches of {input_ids, labels}, ``loss_fn=None``; metrics
    get the output and the batch."""
    ref = fixed(warm_launcher, tmp_path / "fixed", ["--model", "gpt"])
    events, sizes = elastic(warm_launcher, tmp_path / "elastic", ["--model", "gpt"], [2, 1])
    assert sizes == [2, 1]
    _identical(final_model(tmp_path / "elastic"), final_model(tmp_path / "fixed"))
    steps = worker_steps(events, "w0")
    assert [s["loss"] for s in steps] == [s["loss"] for s in worker_steps(ref, "w0")]
    # the metric saw each micro-batch's dict: 2 sequences of 8 tokens, weighted as a mean
    assert all(s["tokens"] == pytest.approx(16.0) for s in steps)


def test_a_compiled_model_grows_and_shrinks_without_compiling_again(
    warm_launcher: Launch, tmp_path: Path
) -> None:
    """``torch.compile`` (the aot_eager backend: dynamo's capture and guards, AOTAutograd's
    backward, without inductor's C++ build, which the benchmark measures): the micro-batch's
    shape never changes with the allocation, so no worker compiles more graphs than a fixed
    run's, a joiner included; the saved model is the plain module's."""
    args = ["--compile", "aot_eager"]
    ref = fixed(warm_launcher, tmp_path / "fixed", args)
    events, sizes = elastic(warm_launcher, tmp_path / "elastic", args, [2, 1, 2])
    assert sizes == [2, 1, 2]
    final = final_model(tmp_path / "elastic")
    _identical(final, final_model(tmp_path / "fixed"))
    assert not any(k.startswith("_orig_mod") for k in final)
    graphs = [e["compiled_graphs"] for e in ref if e["type"] == "train_end"]
    assert graphs and graphs[0] >= 1
    # w0 through the shrink and the grow, and w2, which joined: the fixed run's graphs
    ends = {e["worker"]: e["compiled_graphs"] for e in events if e["type"] == "train_end"}
    assert ends == {"w0": graphs[0], "w2": graphs[0]}
