"""The pure data-partitioning rules behind convergence invariance."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from jupyter_edt.runtime import partition as part


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 200),
    batch=st.integers(1, 64),
    micro=st.integers(1, 64),
    world=st.integers(1, 9),
    seed=st.integers(0, 2**31),
    epoch=st.integers(0, 50),
)
def test_epoch_covers_each_sample_once_whatever_the_world_size(
    n: int, batch: int, micro: int, world: int, seed: int, epoch: int
) -> None:
    micro = min(micro, batch)
    perm = part.epoch_permutation(n, seed, epoch)
    assert perm == part.epoch_permutation(n, seed, epoch)  # a pure function of (seed, epoch)
    seen: list[int] = []
    for step in range(part.steps_per_epoch(n, batch)):
        gb = part.global_batch(perm, step, batch)
        mbs = part.micro_batches(gb, micro)
        # fixed cut: all full but the last, in order, and it does not involve the world size
        assert [i for mb in mbs for i in mb] == gb
        assert all(len(mb) == micro for mb in mbs[:-1]) and 0 < len(mbs[-1]) <= micro
        assert abs(sum(len(mb) / len(gb) for mb in mbs) - 1.0) < 1e-12
        dealt = part.deal(len(mbs), world)
        assert len(dealt) == world
        assert sorted(j for js in dealt for j in js) == list(range(len(mbs)))
        # in turn: round q is micro-batches qW .. qW+W-1, one per rank
        assert all(j % world == r for r, js in enumerate(dealt) for j in js)
        sizes = [len(js) for js in dealt]
        assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)
        seen.extend(gb)
    assert sorted(seen) == list(range(n))


def test_permutations_and_seeds_differ_where_they_should() -> None:
    assert part.epoch_permutation(100, 0, 0) != part.epoch_permutation(100, 0, 1)
    assert part.epoch_permutation(100, 0, 0) != part.epoch_permutation(100, 1, 0)
    seeds = {
        part.micro_batch_seed(s, e, st_, j)
        for s in (0, 1)
        for e in range(3)
        for st_ in range(-1, 3)
        for j in range(4)
    }
    assert len(seeds) == 2 * 3 * 4 * 4
    assert part.micro_batch_seed(7, 1, 2, 3) == part.micro_batch_seed(7, 1, 2, 3)


def test_default_micro_batch_depends_on_max_gpus_only() -> None:
    assert part.default_micro_batch_size(12, 4) == 3
    assert part.default_micro_batch_size(13, 4) == 4
    assert part.default_micro_batch_size(5, 8) == 1
    assert [list(js) for js in part.deal(5, 3)] == [[0, 3], [1, 4], [2]]
    assert [list(js) for js in part.deal(2, 3)] == [[0], [1], []]
