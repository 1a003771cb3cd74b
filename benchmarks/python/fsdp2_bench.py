"""PyTorch FSDP2 (or DDP) training on CPU: the time of one step and the peak memory.

The model is DEPTH blocks of Linear(WIDTH, WIDTH)+ReLU, each block fully_shard-ed, then
the root, over init_device_mesh("cpu", (WORLD,)); Adam; a batch of BATCH random samples per
rank. By default (the speed yardstick) 8 blocks of 2048 (34M parameters), batch 32, world 2.
Per step FSDP2 all-gathers each block's parameters in forward and again in backward
(dist.all_gather_single: 8.4 MB in, 16.8 MB out per block at world 2, in place: the input
is the rank's slice of a freshly allocated output) and reduce-scatters each block's
gradients (dist.reduce_scatter_single, op AVG: 16.8 MB in, 8.4 MB out); on CPU both calls
are synchronous (async_op=False). With --ddp the same model is trained by PyTorch's
DistributedDataParallel instead (whole parameters, gradients and Adam state on each rank).

With --save-every K --save-dir DIR, the model's and Adam's state (model.state_dict() and
opt.state_dict(), sharded under FSDP2) is saved with torch.distributed.checkpoint.async_save
every K timed steps (one save in flight: the previous one's future is waited on first),
and the line also has mean_step_ms (the mean, saving steps included), saves and
save_block_ms (the training loop's time in async_save per save).

usage: python3 fsdp2_bench.py BACKEND [comm] [--width N] [--depth N] [--batch N]
                              [--world N] [--steps N] [--ddp]      (BACKEND: gloo or tdist)
                              [--save-every K --save-dir DIR]
Prints one line: fsdp2-BACKEND (ddp-BACKEND with --ddp) world=W params=P step_ms=T
samples_per_s=S peak_rss_mib=M peak_above_baseline_mib=N (T the median of the steps after
the warm-up, each step from a barrier; S = WORLD * BATCH / T; M the largest of the ranks'
peak resident memory, N of its peak less the resident memory before the model was made).
With `comm`, also one line per collective kind and size: how many calls per step and their
median time, as seen by rank 0 around the torch.distributed call (the time includes waiting
for the other ranks).
"""

import argparse
import collections
import os
import resource
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

WARMUP = 3


def timed(fn, name, log):
    """fn, logging (name, bytes of its input, seconds) of each call into log."""
    def call(output, input, *args, **kwargs):
        start = time.perf_counter()
        work = fn(output, input, *args, **kwargs)
        if work is not None:
            work.wait()  # FSDP2 on CPU asks for none asynchronously; wait to time any
        log.append((name, input.numel() * input.element_size(), time.perf_counter() - start))
    return call


def rss_mib():
    """This process's resident memory now, in MiB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def run(rank, args, port):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.set_num_threads(1)
    if args.backend == "tdist":
        import tdist  # noqa: F401
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group(args.backend, rank=rank, world_size=args.world)
    log = []
    if args.comm:
        dist.all_gather_single = timed(dist.all_gather_single, "all_gather_single", log)
        dist.reduce_scatter_single = timed(dist.reduce_scatter_single,
                                           "reduce_scatter_single", log)
    mesh = init_device_mesh("cpu", (args.world,))
    baseline = rss_mib()
    torch.manual_seed(0)
    if args.ddp:
        model = nn.parallel.DistributedDataParallel(nn.Sequential(
            *[nn.Sequential(nn.Linear(args.width, args.width), nn.ReLU())
              for _ in range(args.depth)]))
    else:
        # Each block sharded as it is made, as FSDP2's users do with large models.
        blocks = []
        for _ in range(args.depth):
            blocks.append(nn.Sequential(nn.Linear(args.width, args.width), nn.ReLU()))
            fully_shard(blocks[-1], mesh=mesh)
        model = nn.Sequential(*blocks)
        fully_shard(model, mesh=mesh)
    params = sum(p.numel() for p in model.parameters())  # a DTensor counts its global shape
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(rank)
    x = torch.randn(args.batch, args.width, generator=gen)
    target = torch.randn(args.batch, args.width, generator=gen)
    # async_save's collectives run in its background thread: on a group of their own, as
    # PyTorch's documentation asks (on the training group they interleave with training's).
    ckpt_group = dist.new_group(backend="gloo") if args.save_every else None
    times, blocked, pending = [], [], None
    for step in range(WARMUP + args.steps):
        if step == WARMUP:
            log.clear()
        dist.barrier()
        start = time.perf_counter()
        opt.zero_grad()
        nn.functional.mse_loss(model(x), target).backward()
        opt.step()
        if args.save_every and step >= WARMUP and (step - WARMUP + 1) % args.save_every == 0:
            import torch.distributed.checkpoint as dcp
            t0 = time.perf_counter()
            if pending is not None:
                pending.result()
            pending = dcp.async_save({"model": model.state_dict(), "optim": opt.state_dict()},
                                     checkpoint_id=os.path.join(args.save_dir, f"step-{step}"),
                                     process_group=ckpt_group)
            blocked.append(time.perf_counter() - t0)
        times.append(time.perf_counter() - start)
    if pending is not None:
        pending.result()
    step_s = statistics.median(times[WARMUP:])
    mean_s = statistics.mean(times[WARMUP:])
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    mem = torch.tensor([peak, peak - baseline], dtype=torch.float64)
    dist.all_reduce(mem, op=dist.ReduceOp.MAX)
    if rank == 0:
        kind = "ddp" if args.ddp else "fsdp2"
        print(f"{kind}-{args.backend} world={args.world} params={params} "
              f"step_ms={step_s * 1e3:.1f} samples_per_s={args.world * args.batch / step_s:.1f} "
              f"peak_rss_mib={mem[0].item():.0f} peak_above_baseline_mib={mem[1].item():.0f} "
              f"mean_step_ms={mean_s * 1e3:.1f} saves={len(blocked)} "
              f"save_block_ms={statistics.mean(blocked) * 1e3 if blocked else 0:.1f}",
              flush=True)
        by_kind = collections.defaultdict(list)
        for name, size, seconds in log:
            by_kind[(name, size)].append(seconds)
        for (name, size), secs in sorted(by_kind.items()):
            print(f"  {name} in_bytes={size} per_step={len(secs) / args.steps:g} "
                  f"median_ms={statistics.median(secs) * 1e3:.2f} "
                  f"total_ms_per_step={sum(secs) * 1e3 / args.steps:.1f}", flush=True)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("backend", choices=("gloo", "tdist"))
    p.add_argument("comm", nargs="?", choices=("comm",), help="also time each collective")
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--depth", type=int, default=8)
    p.add_argument("--batch", type=int, default=32, help="samples per rank")
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--steps", type=int, default=10, help="timed steps, after 3 warm-up ones")
    p.add_argument("--ddp", action="store_true", help="DistributedDataParallel instead")
    p.add_argument("--save-every", type=int, default=0, help="async_save every K steps")
    p.add_argument("--save-dir", help="where --save-every saves")
    args = p.parse_args()
    if args.save_every and not args.save_dir:
        p.error("--save-every needs --save-dir")
    args.comm = args.comm == "comm"
    mp.spawn(run, args=(args, free_port()), nprocs=args.world)


if __name__ == "__main__":
    main()
