"""Where a PyTorch DDP step of the anchors' MLP goes, over gloo and over tdist, world 2.

The MLP of shared/anchors/torch_ddp_mlp.py (784-2048-2048-10, 23 MB of gradients), batch 32
per rank, SGD. First, per backend and in the same processes: the step without DDP (both
ranks computing at once), one 23 MB dist.all_reduce alone, and the DDP step (medians of
STEPS). Then a DDP run whose comm hook is DDP's own (the bucket divided by the world,
all-reduced) with timestamps: for the last steps, forward, backward (which returns after
DDP waited for its buckets and copied them back) and the optimizer, and each bucket's
all_reduce from issue to completion, relative to the step's start.

usage: python3 ddp_mlp_timeline.py [gloo|tdist ...]   (default: both)
"""

import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

STEPS, WORLD, BATCH = 20, 2, 32


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 2048), nn.ReLU(), nn.Linear(2048, 2048),
                         nn.ReLU(), nn.Linear(2048, 10))


def median_ms(fn):
    for _ in range(3):
        fn()
    times = []
    for _ in range(STEPS):
        dist.barrier()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def run(rank, backend, port):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    if backend == "tdist":
        import tdist  # noqa: F401
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group(backend, rank=rank, world_size=WORLD)
    x, y = torch.randn(BATCH, 1, 28, 28), torch.randint(0, 10, (BATCH,))

    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def plain():
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    buf = torch.randn(23 * 2**20 // 4)
    t_plain, t_ar = median_ms(plain), median_ms(lambda: dist.all_reduce(buf))
    ddp = nn.parallel.DistributedDataParallel(mlp())
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)

    def step():
        opt.zero_grad()
        F.cross_entropy(ddp(x), y).backward()
        opt.step()

    t_ddp = median_ms(step)
    if rank == 0:
        print(f"{backend}: step without DDP {t_plain:.1f} ms, 23 MB all_reduce {t_ar:.1f} ms, "
              f"DDP step {t_ddp:.1f} ms", flush=True)

    ddp = nn.parallel.DistributedDataParallel(mlp())
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    buckets = []  # (index, bytes, issued, done)

    def hook(_, bucket):
        issued = time.perf_counter()
        data = bucket.buffer()
        fut = dist.all_reduce(data.div_(WORLD), async_op=True).get_future()

        def done(f):
            buckets.append((bucket.index(), data.numel() * data.element_size(), issued,
                            time.perf_counter()))
            return f.value()[0]
        return fut.then(done)

    ddp.register_comm_hook(None, hook)
    steps = []
    for _ in range(STEPS):
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = F.cross_entropy(ddp(x), y)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        steps.append((t0, t1, t2, time.perf_counter()))
    if rank == 0:
        for t0, t1, t2, t3 in steps[-3:]:
            print(f"  step: forward {1e3 * (t1 - t0):.1f} ms, backward {1e3 * (t2 - t1):.1f}, "
                  f"optimizer {1e3 * (t3 - t2):.1f}, in all {1e3 * (t3 - t0):.1f}")
            for index, size, issued, done in buckets:
                if t0 <= issued <= t3:
                    print(f"    bucket {index} ({size / 1e6:.1f} MB): issued at "
                          f"+{1e3 * (issued - t0):.1f} ms, done at +{1e3 * (done - t0):.1f} "
                          f"(backward began at +{1e3 * (t1 - t0):.1f}, returned at "
                          f"+{1e3 * (t2 - t0):.1f})")
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    for backend in sys.argv[1:] or ["gloo", "tdist"]:
        mp.spawn(run, args=(backend, free_port()), nprocs=WORLD)
