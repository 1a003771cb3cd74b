"""PyTorch FSDP2 training on CPU, world 2: the time of one step over gloo or tdist.

The model is DEPTH blocks of Linear(WIDTH, WIDTH)+ReLU (about 34M parameters, 134 MB in
fp32), each block fully_shard-ed, then the root, over init_device_mesh("cpu", (2,)); Adam;
a batch of BATCH random samples per rank. Per step FSDP2 all-gathers each block's
parameters in forward and again in backward (dist.all_gather_single: 8.4 MB in, 16.8 MB
out per block, in place: the input is the rank's slice of a freshly allocated output)
and reduce-scatters each block's gradients (dist.reduce_scatter_single, op AVG: 16.8 MB
in, 8.4 MB out); on CPU both calls are synchronous (async_op=False).

usage: python3 fsdp2_bench.py BACKEND [comm]   (BACKEND: gloo or tdist)
Prints one line: fsdp2-BACKEND world=2 params=P step_ms=T samples_per_s=S peak_rss_mib=M
(T the median of STEPS steps after WARMUP, each step from a barrier; S = 2 * BATCH / T;
M the larger of the two ranks' peak resident memory). With `comm`, also one line per
collective kind and size: how many calls per step and their median time, as seen by
rank 0 around the torch.distributed call (the time includes waiting for the other rank).
"""

import collections
import os
import resource
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

WIDTH, DEPTH, BATCH = 2048, 8, 32
WARMUP, STEPS = 3, 10
WORLD = 2


def timed(fn, name, log):
    """fn, logging (name, bytes of its input, seconds) of each call into log."""
    def call(output, input, *args, **kwargs):
        start = time.perf_counter()
        work = fn(output, input, *args, **kwargs)
        if work is not None:
            work.wait()  # FSDP2 on CPU asks for none asynchronously; wait to time any
        log.append((name, input.numel() * input.element_size(), time.perf_counter() - start))
    return call


def run(rank, backend, port, comm):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.set_num_threads(1)
    if backend == "tdist":
        import tdist  # noqa: F401
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group(backend, rank=rank, world_size=WORLD)
    log = []
    if comm:
        dist.all_gather_single = timed(dist.all_gather_single, "all_gather_single", log)
        dist.reduce_scatter_single = timed(dist.reduce_scatter_single,
                                           "reduce_scatter_single", log)
    mesh = init_device_mesh("cpu", (WORLD,))
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU())
                            for _ in range(DEPTH)])
    params = sum(p.numel() for p in model.parameters())
    for block in model:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(rank)
    x = torch.randn(BATCH, WIDTH, generator=gen)
    target = torch.randn(BATCH, WIDTH, generator=gen)
    times = []
    for step in range(WARMUP + STEPS):
        if step == WARMUP:
            log.clear()
        dist.barrier()
        start = time.perf_counter()
        opt.zero_grad()
        nn.functional.mse_loss(model(x), target).backward()
        opt.step()
        times.append(time.perf_counter() - start)
    step_s = statistics.median(times[WARMUP:])
    rss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0])
    dist.all_reduce(rss, op=dist.ReduceOp.MAX)
    if rank == 0:
        print(f"fsdp2-{backend} world={WORLD} params={params} step_ms={step_s * 1e3:.1f} "
              f"samples_per_s={WORLD * BATCH / step_s:.1f} peak_rss_mib={rss.item():.0f}",
              flush=True)
        by_kind = collections.defaultdict(list)
        for name, size, seconds in log:
            by_kind[(name, size)].append(seconds)
        for (name, size), secs in sorted(by_kind.items()):
            print(f"  {name} in_bytes={size} per_step={len(secs) / STEPS:g} "
                  f"median_ms={statistics.median(secs) * 1e3:.2f} "
                  f"total_ms_per_step={sum(secs) * 1e3 / STEPS:.1f}", flush=True)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    backend = sys.argv[1]
    comm = len(sys.argv) > 2 and sys.argv[2] == "comm"
    mp.spawn(run, args=(backend, free_port(), comm), nprocs=WORLD)
