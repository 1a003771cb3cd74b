"""Rank bodies of test_ddp.py and test_errors.py."""

import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import tdist

# torch 2.x raises DistBackendError (a RuntimeError); 1.13 has only RuntimeError.
DIST_BACKEND_ERROR = getattr(dist, "DistBackendError", RuntimeError)


def backend_of(group):
    """The tdist object behind a group: its CPU backend (2.x) or the group itself (1.13)."""
    if hasattr(group, "_get_backend"):
        return group._get_backend(torch.device("cpu"))
    return group


def train_five_steps(group, rank):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                          nn.Linear(64, 10))
    # Small buckets: several all_reduces per step, overlapping backward.
    ddp = DDP(model, process_group=group, bucket_cap_mb=0.005)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    data = torch.Generator().manual_seed(100 + rank)
    for _ in range(5):
        x = torch.randn(16, 20, generator=data)
        y = torch.randint(0, 10, (16,), generator=data)
        opt.zero_grad()
        F.cross_entropy(ddp(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def ddp_parity(rank, world, init, engine):
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    tg = dist.new_group(backend="tdist", pg_options=tdist.Options(engine=engine))
    over_gloo = train_five_steps(None, rank)
    over_tdist = train_five_steps(tg, rank)
    worst = 0.0
    for a, b in zip(over_tdist, over_gloo):
        worst = max(worst, ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item())
    # The ranks must also agree with each other (DDP keeps replicas identical).
    flat = torch.cat([p.flatten() for p in over_tdist])
    mine = flat.clone()
    dist.broadcast(flat, src=0, group=tg)
    dist.destroy_process_group()
    return {"worst_relative": worst, "replicas_equal": bool(torch.equal(flat, mine)),
            "moved": bool((over_tdist[0] != train_start()).any())}


def train_start():
    torch.manual_seed(0)
    return nn.Linear(20, 64).weight.detach()


def sigkill_mid_all_reduce(rank, world, init, engine, stamp):
    os.environ["TDIST_ENGINE"] = engine
    from datetime import timedelta
    dist.init_process_group("tdist", init_method=init, rank=rank, world_size=world,
                            timeout=timedelta(seconds=120))
    t = torch.ones(1 << 20)
    dist.all_reduce(t)
    if rank == world - 1:
        dist.all_reduce(t, async_op=True)  # mid all_reduce
        with open(stamp, "w") as f:
            f.write(repr(time.time()))
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        for _ in range(100000):
            dist.all_reduce(t)
        return {"error": None}
    except Exception as e:  # noqa: BLE001 - the type is what the test checks
        took = time.time() - float(open(stamp).read())
        return {"error": type(e).__name__, "message": str(e), "seconds": took,
                "is_dist_backend_error": isinstance(e, DIST_BACKEND_ERROR)}


def skipped_call_in_loop(rank, world, init, engine):
    """Rank 1 skips one all_reduce of a loop, under TDIST_DEBUG=callsite."""
    os.environ["TDIST_ENGINE"] = engine
    os.environ["TDIST_DEBUG"] = "callsite"
    from datetime import timedelta
    dist.init_process_group("tdist", init_method=init, rank=rank, world_size=world,
                            timeout=timedelta(seconds=20))
    t = torch.ones(4)
    lines = {}
    start = time.time()
    try:
        for step in range(3):
            if rank != 1 or step != 1:
                lines["first"] = sys._getframe().f_lineno + 1
                dist.all_reduce(t)
            lines["second"] = sys._getframe().f_lineno + 1
            dist.all_reduce(t)
        return {"error": None}
    except Exception as e:  # noqa: BLE001 - the type is what the test checks
        return {"error": type(e).__name__, "message": str(e), "seconds": time.time() - start,
                "lines": lines}


def device_errors(rank, world, init):
    dist.init_process_group("tdist", init_method=init, rank=rank, world_size=world)
    backend = backend_of(dist.group.WORLD)
    messages = {}
    try:
        backend.allreduce([torch.empty(4, device="meta")]).wait()
        messages["meta"] = None
    except Exception as e:  # noqa: BLE001
        messages["meta"] = f"{type(e).__name__}: {e}"
    if torch.cuda.is_available():
        try:
            dist.all_reduce(torch.ones(4, device="cuda"))
            messages["cuda"] = None
        except Exception as e:  # noqa: BLE001
            messages["cuda"] = f"{type(e).__name__}: {e}"
    t = torch.ones(3)
    dist.all_reduce(t)  # the group still works after refused calls
    dist.destroy_process_group()
    return {"messages": messages, "sum": t.tolist()}
