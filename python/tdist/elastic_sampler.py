"""ElasticSampler: torch's DistributedSampler for a job whose world changes mid-epoch.

It deals an epoch as ``torch.utils.data.distributed.DistributedSampler`` does (the same
indices, rank for rank, for the same seed, epoch, shuffle and drop_last), and it knows how
far the job got, so that ``ElasticJob.recover(..., sampler=s)`` can re-deal the rest of the
epoch over the next generation: after a shrink, a replacement or both, every sample of the
epoch is still trained on once (with drop_last: every sample the new world keeps).

Every rank takes the same number of samples per step (a fixed per-rank batch) and tells
the sampler after each committed step::

    sampler = tdist.elastic.ElasticSampler(len(dataset), job.size, job.rank, seed=0)
    job.recover(model, opt, sampler=sampler)
    while ...:
        idx = sampler.batch(B)              # the same indices again if the step is redone
        ... forward/backward on dataset[idx] ...
        if job.commit():
            opt.step()
            sampler.advance(len(idx))
        # at the epoch's end (sampler.exhausted()): sampler.set_epoch(epoch + 1)

Positions: position g of an epoch is element g of its order (torch.randperm(n) seeded
with seed + epoch, or 0..n-1) before padding. A world of W deals a list of positions: rank
r takes its entries r, r + W, ...; the list is the epoch's positions not yet trained on,
in increasing order, padded from its start to a multiple of W (or cut, with drop_last), as
PyTorch pads. Padding entries repeat real ones, so only the real ones count as trained.
"""

import math

import torch

__all__ = ["ElasticSampler"]


class ElasticSampler(torch.utils.data.Sampler):
    def __init__(self, dataset_len, num_replicas, rank, shuffle=True, seed=0, drop_last=False):
        if dataset_len < 0:
            raise ValueError(f"ElasticSampler: dataset_len {dataset_len} is negative")
        self.dataset_len = int(dataset_len)
        self.shuffle = shuffle
        self.seed = int(seed)
        self.drop_last = drop_last
        self.epoch = 0
        self.taken = 0  # samples this rank trained on from its share, committed
        self._check_world(num_replicas, rank)
        self.num_replicas, self.rank = num_replicas, rank
        self._consumed = bytearray(self.dataset_len)  # positions trained on before this deal
        self._deal()

    @staticmethod
    def _check_world(num_replicas, rank):
        if num_replicas < 1 or not 0 <= rank < num_replicas:
            raise ValueError(f"ElasticSampler: rank {rank} is not in a world of {num_replicas}")

    def _order(self):
        if not self.shuffle:
            return list(range(self.dataset_len))
        g = torch.Generator()
        g.manual_seed(self.seed + self.epoch)
        return torch.randperm(self.dataset_len, generator=g).tolist()

    def _deal(self):
        """The positions left, dealt over the world as PyTorch deals an epoch."""
        self._real = [p for p in range(self.dataset_len) if not self._consumed[p]]
        w, n = self.num_replicas, len(self._real)
        if self.drop_last and n % w:
            per_rank = math.ceil((n - w) / w)
        else:
            per_rank = math.ceil(n / w)
        total = per_rank * w
        listed = list(self._real)
        if total > n and n > 0:
            listed += (listed * math.ceil((total - n) / n))[:total - n]
        self._list = listed[:total]
        self._share = self._list[self.rank::w]
        self._index = self._order()

    def __len__(self):
        return len(self._share)

    def __iter__(self):
        """This rank's indices not yet taken, in order."""
        return iter([self._index[p] for p in self._share[self.taken:]])

    def batch(self, size):
        """The next up to ``size`` dataset indices of this rank, from its committed place: a
        step that is redone gets the same ones again."""
        return [self._index[p] for p in self._share[self.taken:self.taken + size]]

    def advance(self, samples):
        """After a committed step that trained on ``samples`` of this rank's indices."""
        if samples < 0 or self.taken + samples > len(self._share):
            raise ValueError(f"ElasticSampler: advancing {samples} from {self.taken} passes "
                             f"the end of this rank's {len(self._share)} samples")
        self.taken += samples

    def exhausted(self):
        return self.taken >= len(self._share)

    def set_epoch(self, epoch):
        """A new epoch, dealt over the current world from its start."""
        self.epoch = int(epoch)
        self.taken = 0
        self._consumed = bytearray(self.dataset_len)
        self._deal()

    def world_mask(self):
        """The positions of this epoch the whole world has trained on, once every rank has
        taken ``taken`` samples of its share (every rank takes the same per step)."""
        mask = bytearray(self._consumed)
        w, n = self.num_replicas, len(self._real)
        for r in range(w):
            for k in range(self.taken):
                i = r + k * w
                if i < n:
                    mask[self._list[i]] = 1
        return bytes(mask)

    def state(self):
        """(epoch, world_mask()): what recover() sends from the most advanced rank."""
        return self.epoch, self.world_mask()

    def resume(self, epoch, mask, num_replicas, rank):
        """Moves to a world of ``num_replicas`` where this is ``rank`` and deals the rest of
        ``epoch``: the positions not in ``mask`` (another rank's world_mask())."""
        self._check_world(num_replicas, rank)
        if len(mask) != self.dataset_len:
            raise ValueError(f"ElasticSampler: a mask of {len(mask)} positions for a dataset "
                             f"of {self.dataset_len} (do the ranks' datasets differ?)")
        self.num_replicas, self.rank = num_replicas, rank
        self.epoch = int(epoch)
        self.taken = 0
        self._consumed = bytearray(mask)
        self._deal()
