"""Prints what torch.utils.data.distributed.DistributedSampler yields for every case of
tests/torch/sampler_test.cc's table, one line per case:

    n num_replicas rank shuffle drop_last seed epoch : index index ...

When torch cannot be imported it prints one line "SKIP <reason>" instead (exit status 0),
so the test can skip with that reason.
"""
import sys

SIZES = (0, 1, 7, 1000)
REPLICAS = range(1, 9)
SEEDS = (0, 1, 1234, -3)  # -3 + epoch checks the negative-seed wrap-around
EPOCHS = (0, 1, 5)


def main():
    try:
        from torch.utils.data.distributed import DistributedSampler
    except Exception as e:  # ImportError, or a broken torch install
        print(f"SKIP /usr/bin/python3 cannot import torch: {e!r}")
        return
    out = []
    for n in SIZES:
        for replicas in REPLICAS:
            for rank in range(replicas):
                for shuffle in (False, True):
                    for drop_last in (False, True):
                        for seed in SEEDS:
                            for epoch in EPOCHS:
                                sampler = DistributedSampler(
                                    range(n), num_replicas=replicas, rank=rank,
                                    shuffle=shuffle, seed=seed, drop_last=drop_last)
                                sampler.set_epoch(epoch)
                                indices = " ".join(map(str, sampler))
                                out.append(f"{n} {replicas} {rank} {int(shuffle)} "
                                           f"{int(drop_last)} {seed} {epoch} : {indices}")
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
