"""The cost of one small dist.all_reduce from Python, world 2: the figure issue 31 sets a
goal for (scripts/bench_python.sh runs it for gloo, tdist and torch's "fake" backend, whose
groups do no communication at all: the floor that torch's own Python and dispatch set).

usage: python3 call_latency.py BACKEND [BYTES] [ITERS]   (defaults 1024 and 5000)
Prints one line: latency-BACKEND world=2 bytes=B time_us=T (the best of 5 rounds of
ITERS calls, each round after a barrier; a fake group's ranks do not meet).
"""

import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank, backend, port, size, iters):
    torch.set_num_threads(1)
    if backend == "tdist":
        import tdist  # noqa: F401
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group(backend, rank=rank, world_size=2)
    t = torch.ones(size // 4)
    for _ in range(500):
        dist.all_reduce(t)
    best = float("inf")
    for _ in range(5):
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        best = min(best, (time.perf_counter() - start) / iters)
    if rank == 0:
        print(f"latency-{backend} world=2 bytes={size} time_us={best * 1e6:.2f}", flush=True)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    backend = sys.argv[1]
    size = int(sys.argv[2]) if len(sys.argv) > 2 else 1024
    iters = int(sys.argv[3]) if len(sys.argv) > 3 else 5000
    mp.spawn(run, args=(backend, free_port(), size, iters), nprocs=2)
