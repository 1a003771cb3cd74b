"""tdist.elastic.ElasticSampler alone (no processes): the indices of torch's
DistributedSampler for the same arguments, and an epoch re-dealt over a changed world with
every sample trained on once (elastic recover() moves the samplers this way)."""

import itertools

import pytest
import torch
from torch.utils.data.distributed import DistributedSampler

from tdist.elastic_sampler import ElasticSampler


class _Sized:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


@pytest.mark.parametrize("n,world,shuffle,drop_last",
                         list(itertools.product([0, 1, 7, 10, 23], [1, 3, 4], [True, False],
                                                [False, True])))
def test_the_indices_are_torchs(n, world, shuffle, drop_last):
    for rank in range(world):
        ours = ElasticSampler(n, world, rank, shuffle=shuffle, seed=5, drop_last=drop_last)
        theirs = DistributedSampler(_Sized(n), world, rank, shuffle=shuffle, seed=5,
                                    drop_last=drop_last)
        for epoch in (0, 3):
            ours.set_epoch(epoch)
            theirs.set_epoch(epoch)
            assert list(ours) == list(theirs), (rank, epoch)
            assert len(ours) == len(theirs)


def _train(samplers, steps, batch):
    """Each rank takes `batch` per step for `steps` steps; the indices trained on."""
    seen = []
    for _ in range(steps):
        for s in samplers:
            idx = s.batch(batch)
            seen += idx
            s.advance(len(idx))
    return seen


@pytest.mark.parametrize("drop_last", [False, True])
def test_a_shrink_and_a_growth_mid_epoch_train_every_sample_once(drop_last):
    n = 60
    world = [ElasticSampler(n, 4, r, seed=1, drop_last=drop_last) for r in range(4)]
    for s in world:
        s.set_epoch(2)
    seen = _train(world, 3, 2)  # 24 samples on 4 ranks
    epoch, mask = world[0].state()
    # Rank 3 died: the other three re-deal the rest of the epoch, twice over (3 then 5).
    world = world[:3]
    for r, s in enumerate(world):
        s.resume(epoch, mask, 3, r)
    seen += _train(world, 4, 3)  # 36 more: 60 in all
    assert sorted(seen) == list(range(n))
    assert all(s.exhausted() for s in world)
    # A new deal after the epoch's last sample: nothing left.
    epoch, mask = world[1].state()
    fresh = ElasticSampler(n, 5, 4, seed=1, drop_last=drop_last)
    fresh.resume(epoch, mask, 5, 4)
    assert len(fresh) == 0 and fresh.batch(4) == []


def test_a_step_not_committed_is_dealt_again():
    s = ElasticSampler(12, 2, 0, seed=0)
    first = s.batch(3)
    assert s.batch(3) == first  # redone: the same indices
    s.advance(3)
    assert s.batch(3) != first


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="not in a world"):
        ElasticSampler(10, 2, 2)
    s = ElasticSampler(10, 2, 0)
    with pytest.raises(ValueError, match="mask of 9 positions"):
        s.resume(0, bytes(9), 2, 0)
    with pytest.raises(ValueError, match="passes the end"):
        s.advance(6)
