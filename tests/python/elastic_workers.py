"""Rank bodies of test_elastic.py: torch.distributed.shrink_group and the reconfigure API
(dist._reconfigure with handles exchanged through the store) on tdist groups, and
tdist.elastic on a store the test keeps alive."""

import os
import time

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

import tdist  # noqa: F401  (registers the backend)
import tdist.elastic


def _error(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}"
    return None


def _sum_of_ranks(group=None):
    """all_reduce of rank + 1 (this group's rank)."""
    t = torch.full((3,), float(dist.get_rank(group) + 1))
    dist.all_reduce(t, group=group)
    return float(t[0])


def shrink_after_death(rank, world, init, abort_flag):
    """Rank 2 leaves (exits without a word) after one all_reduce; the others find out in
    their next collective and shrink the default group without it."""
    dist.init_process_group("tdist", init_method=init, rank=rank, world_size=world)
    out = {"before": _sum_of_ranks()}
    if rank == 2:
        os._exit(0)
    out["failed"] = _error(lambda: dist.all_reduce(torch.ones(1 << 16)))
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    out["supports"] = bool(backend.supports_shrinking)
    flags = c10d.SHRINK_ABORT if abort_flag else c10d.SHRINK_DEFAULT
    if not abort_flag:  # the old group may still wait on the dead rank: abort it by hand
        backend.abort()
    small = dist.shrink_group([2], shrink_flags=flags)
    out["same_as_default"] = small is dist.group.WORLD
    out["rank"], out["size"] = dist.get_rank(), dist.get_world_size()
    out["backend"] = dist.get_backend(small)
    out["after"] = _sum_of_ranks()
    # Shrinking again, to rank 0 alone (rank 1 excluded leaves).
    if rank == 0:
        alone = dist.shrink_group([1])
        out["alone"] = (alone.size(), _sum_of_ranks())
    dist.destroy_process_group()
    return out


def reconfigure_api(rank, world, init, deferred):
    """Handles through the default store; the same size in another rank order, a set
    (sorted order), then smaller groups: ranks 0 and 1 together, rank 2 alone."""
    dist.init_process_group("tdist", init_method=init, rank=rank, world_size=world,
                            enable_reconfigure=deferred)
    store = c10d._get_default_store()
    out = {"supports": dist.distributed_c10d._supports_reconfigure()}
    if deferred:
        out["before"] = _error(lambda: dist.all_reduce(torch.ones(1)))
    else:
        out["before"] = _sum_of_ranks()
    handle = dist.distributed_c10d._get_reconfigure_handle()
    out["handle_stable"] = handle == dist.distributed_c10d._get_reconfigure_handle()
    store.set(f"test/handle/{rank}", handle)
    handles = [store.get(f"test/handle/{r}").decode() for r in range(world)]
    out["handles_distinct"] = len(set(handles)) == world
    # Reversed: rank r becomes world-1-r.
    work = dist.distributed_c10d._reconfigure(101, list(reversed(handles)))
    work.wait()
    out["reversed"] = (dist.get_rank(), dist.get_world_size(), _sum_of_ranks())
    # A set: ranks in the handles' sorted order.
    dist.distributed_c10d._reconfigure(102, set(handles)).wait()
    out["set"] = (dist.get_rank(), sorted(handles).index(handle), _sum_of_ranks())
    # Smaller: ranks 0 and 1 of the start together, rank 2 alone.
    if rank < 2:
        dist.distributed_c10d._reconfigure(103, handles[:2]).wait()
    else:
        dist.distributed_c10d._reconfigure(104, [handle]).wait()
    out["smaller"] = (dist.get_rank(), dist.get_world_size(), _sum_of_ranks())
    used = 103 if rank < 2 else 104
    out["reused"] = _error(lambda: dist.distributed_c10d._reconfigure(used, [handle]))
    out["stranger"] = _error(lambda: dist.distributed_c10d._reconfigure(105, ["nobody"]))
    # Back to all three.
    dist.distributed_c10d._reconfigure(106, handles).wait()
    out["again"] = (dist.get_rank(), dist.get_world_size(), _sum_of_ranks())
    dist.destroy_process_group()
    return out


def elastic_on_store(rank, world, init, port):
    """tdist.elastic on a TCPStore the test process hosts: slot 2 dies after step 2's
    vote; the others fail in their next collective, rejoin as a generation of 2, and the
    state is the same on both; the default group follows the generations. Each step trains
    on 2 samples per rank of a 30-sample epoch (an ElasticSampler): the survivors deal the
    rest of the epoch between them."""
    store = dist.TCPStore("127.0.0.1", port, is_master=False, wait_for_workers=False)
    job = tdist.elastic.join(store=store, slot=rank, slots=world, join_window=1.0)
    out = {"first": (job.generation, job.rank, job.size, dist.get_rank(), dist.get_world_size()),
           "indices": []}
    sampler = tdist.elastic.ElasticSampler(30, job.size, job.rank, seed=3)
    w = torch.zeros(4)
    extra = {"seen": []}
    while job.step < 6:
        try:
            idx = sampler.batch(2)
            t = torch.full((4,), float(job.step + 1))
            dist.all_reduce(t)
            if job.slot == 2 and job.step == 3:
                os._exit(0)
            if job.commit():
                w += t / job.size
                extra["seen"].append(job.step)
                sampler.advance(len(idx))
                out["indices"] += idx
        except Exception as e:  # noqa: BLE001
            if not tdist.elastic.is_failure(e):
                raise
            out["failure"] = f"{type(e).__name__}: {e}"[:300]
            r = job.rejoin(optimizer=None, extra=extra, sampler=sampler)
            out["recovery"] = (r.generation, r.step, r.received)
    out["last"] = (job.generation, job.rank, job.size, dist.get_rank(), dist.get_world_size(),
                   job.members)
    out["w"] = w.tolist()
    out["seen"] = extra["seen"]
    job.close()
    time.sleep(0.1)
    return out


def sampler_mismatch(rank, world, init, port):
    """Slot 1's dataset has one sample more: recover() refuses it with ValueError (it must
    exit) and the other member with DistBackendError (a failure to rejoin on)."""
    store = dist.TCPStore("127.0.0.1", port, is_master=False, wait_for_workers=False)
    job = tdist.elastic.join(store=store, slot=rank, slots=world, join_window=1.0)
    sampler = tdist.elastic.ElasticSampler(30 + rank, job.size, job.rank)
    try:
        job.recover(sampler=sampler)
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}"
    finally:
        time.sleep(0.1)
    return "recovered"

