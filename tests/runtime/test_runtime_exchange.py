"""The exact gradient exchange: its layout, and sums over real gloo groups of 1 to 4 workers
that equal a one-device sum bit for bit, whatever the dealing of micro-batches."""

from __future__ import annotations

import importlib.util
import itertools
import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from jupyter_edt.runtime.exchange import bucket_ranges, chunk_range

PROGRAM = Path(__file__).parent / "programs" / "exchange_check.py"


def _program():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("exchange_check", PROGRAM)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_buckets_cover_the_buffer_from_its_end_within_the_cap() -> None:
    assert bucket_ranges(10, 4) == [(6, 10), (2, 6), (0, 2)]
    assert bucket_ranges(8, 4) == [(4, 8), (0, 4)]
    assert bucket_ranges(3, 100) == [(0, 3)]
    assert bucket_ranges(0, 4) == []


def test_a_bucket_smaller_than_one_element_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one element"):
        bucket_ranges(10, 0)


@pytest.mark.parametrize(("lo", "hi", "world"), [(0, 10, 3), (5, 7, 4), (3, 3, 2), (0, 9, 1)])
def test_chunks_split_a_range_into_contiguous_near_equal_parts(
    lo: int, hi: int, world: int
) -> None:
    chunks = [chunk_range(lo, hi, c, world) for c in range(world)]
    assert chunks[0][0] == lo and chunks[-1][1] == hi
    assert all(a[1] == b[0] for a, b in itertools.pairwise(chunks))
    sizes = [b - a for a, b in chunks]
    assert max(sizes) - min(sizes) <= 1


def test_the_data_of_the_exchange_check_depends_on_the_addition_order() -> None:
    """So a reduction that adds out of micro-batch order fails the next test."""
    prog = _program()
    forward, backward = torch.zeros(sum(prog.SIZES), dtype=torch.float64), None
    for j in range(5):
        forward += prog.gradient(j)
    backward = torch.zeros_like(forward)
    for j in reversed(range(5)):
        backward += prog.gradient(j)
    assert not torch.equal(forward, backward)


def _configs() -> list[dict[str, int]]:
    """World sizes 1 to 4; one micro-batch (a broadcast), fewer than the workers (ranks without
    any), uneven blocks, many; buckets of 8 elements, of 3 (empty chunks with 4 workers) and
    one bucket; a parameter that reports no gradient; gloo's finishing thread and the in-order
    path of NCCL groups."""
    out, gen = [], 0
    for world in (1, 2, 3, 4):
        for micro, bucket_bytes, skip, tagged in [
            (1, 64, -1, True),
            (max(world - 1, 1), 24, -1, True),
            (world + 1, 64, 2, True),
            (world + 1, 64, 2, False),
            (2 * world + 1, 1 << 20, -1, True),
            (3 * world + 2, 24, 0, True),
            (3 * world + 2, 24, 0, False),
        ]:
            gen += 1
            out.append(
                {
                    "gen": gen,
                    "world": world,
                    "micro_batches": micro,
                    "bucket_bytes": bucket_bytes,
                    "skip": skip,
                    "tagged": tagged,
                }
            )
    return out


def test_sums_equal_one_device_bit_for_bit_for_1_to_4_workers() -> None:
    configs = _configs()
    store = dist.TCPStore(
        "127.0.0.1", 0, is_master=True, timeout=timedelta(seconds=60), wait_for_workers=False
    )
    procs = [
        subprocess.Popen(
            [sys.executable, str(PROGRAM), str(store.port), f"w{i}", json.dumps(configs)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(4)
    ]
    try:
        outs = [p.communicate(timeout=240) for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [0] * 4, [err[-2000:] for _, err in outs]
    results = [json.loads(line) for out, _ in outs for line in out.splitlines()]
    assert len(results) == sum(c["world"] for c in configs)
    for r in results:
        assert r["exact"] and r["aux_exact"], r
        assert r["max_abs_diff"] == 0.0
    assert max(r["buckets"] for r in results) > 100  # the small buckets made many
