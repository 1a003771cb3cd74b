"""Rank bodies of test_backend_api.py: what torch 2.x's c10d Backend offers beyond the
plain collectives, on a tdist group: any-source receive, the coalesced calls and the
coalescing manager, sparse all_reduce, split_group, monitored_barrier in gloo's words,
sequence numbers, collective timing, timeouts in torch's words, the backend's name in
DDP's logging data, shutdown."""

import datetime
import time

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

import tdist  # noqa: F401  (registers the backend)


def _error(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}"
    return None


def _sum_of_ones():
    """all_reduce of a 1 on every rank: the group still works after refused calls."""
    t = torch.ones(1)
    dist.all_reduce(t)
    return float(t)


def any_source(rank, world, init):
    dist.init_process_group("tdist", init_method=init, rank=rank, world_size=world)
    out = {}
    if rank == 0:
        got = []
        for _ in range(world - 1):
            t = torch.zeros(3)
            got.append((dist.recv(t, tag=5), t.tolist()))
        out["blocking"] = sorted(got)
        t = torch.zeros(1 << 20)  # 4 MiB: a rendezvous send, never buffered
        work = dist.irecv(t, tag=6)
        work.wait()
        out["large"] = (work._source_rank(), float(t[0]), float(t[-1]))
    else:
        dist.send(torch.full((3,), float(rank)), 0, tag=5)
        if rank == world - 1:
            dist.send(torch.full((1 << 20,), float(rank)), 0, tag=6)
    dist.barrier()
    dist.destroy_process_group()
    return out


def coalesced(rank, world, init):
    dist.init_process_group("tdist", init_method=init, rank=rank, world_size=world)
    out = {}
    # all_gather_coalesced: one output list per rank, each like the inputs.
    inputs = [torch.full((2,), float(rank)), torch.full((3, 2), 10.0 * rank)]
    outputs = [[torch.empty(2), torch.empty(3, 2)] for _ in range(world)]
    dist.all_gather_coalesced(outputs, inputs)
    out["gather_ok"] = all(
        torch.equal(outputs[r][0], torch.full((2,), float(r)))
        and torch.equal(outputs[r][1], torch.full((3, 2), 10.0 * r)) for r in range(world))
    # The coalescing manager: all_reduces, all_gather_into_tensor, reduce_scatter_tensor.
    tensors = [torch.full((n,), float(rank + 1)) for n in (1, 5, 1000)]
    with c10d._coalescing_manager(async_ops=True) as cm:
        for t in tensors:
            dist.all_reduce(t)
    cm.wait()
    total = float(sum(range(1, world + 1)))
    out["reduce_ok"] = all(torch.equal(t, torch.full_like(t, total)) for t in tensors)
    ins = [torch.full((2,), float(rank)), torch.full((4,), float(rank))]
    outs = [torch.empty(2 * world), torch.empty(4 * world).t()]  # one non-contiguous? 1-D: no
    with c10d._coalescing_manager():
        for o, i in zip(outs, ins):
            dist.all_gather_into_tensor(o, i)
    out["into_ok"] = all(
        torch.equal(o.view(world, -1), torch.arange(world, dtype=torch.float32)
                    .unsqueeze(1).expand(world, o.numel() // world)) for o in outs)
    rs_in = [torch.arange(world * 3, dtype=torch.float32) for _ in range(2)]
    rs_out = [torch.empty(3) for _ in range(2)]
    with c10d._coalescing_manager():
        for o, i in zip(rs_out, rs_in):
            dist.reduce_scatter_tensor(o, i)
    expect = torch.arange(rank * 3, rank * 3 + 3, dtype=torch.float32) * world
    out["scatter_ok"] = all(torch.equal(o, expect) for o in rs_out)
    # batch_isend_irecv goes through startCoalescing/endCoalescing.
    send = torch.full((4,), float(rank))
    recv = torch.empty(4)
    ops = [dist.P2POp(dist.isend, send, (rank + 1) % world),
           dist.P2POp(dist.irecv, recv, (rank - 1) % world)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    out["batch_ok"] = torch.equal(recv, torch.full((4,), float((rank - 1) % world)))
    # Sent as one batch at the end: receives listed first, a non-contiguous receive, and
    # the batch's Work taken as a future (it completes only while somebody drives it).
    recv_t = torch.zeros(3, 2).t()
    ops = [dist.P2POp(dist.irecv, recv_t, (rank - 1) % world),
           dist.P2POp(dist.irecv, recv, (rank + 1) % world),
           dist.P2POp(dist.isend, torch.full((2, 3), float(rank)), (rank + 1) % world),
           dist.P2POp(dist.isend, torch.full((4,), 10.0 + rank), (rank - 1) % world)]
    works = dist.batch_isend_irecv(ops)
    for w in works:
        w.get_future().wait()
    out["batch_future_ok"] = (
        len(works) == 1 and torch.equal(recv_t, torch.full((2, 3), float((rank - 1) % world)))
        and torch.equal(recv, torch.full((4,), 10.0 + (rank + 1) % world)))
    # Mixed dtypes in one coalesced call: a clear error, and the group still works.
    out["mixed"] = _error(lambda: dist.all_gather_coalesced(
        [[torch.empty(1), torch.empty(1, dtype=torch.int64)] for _ in range(world)],
        [torch.ones(1), torch.ones(1, dtype=torch.int64)]))
    out["after"] = _sum_of_ones()
    dist.destroy_process_group()
    return out


def sparse(rank, world, init):
    dist.init_process_group("tdist", init_method=init, rank=rank, world_size=world)
    i = torch.tensor([[rank, 4], [0, 1]])
    v = torch.tensor([1.0, 2.0])
    s = torch.sparse_coo_tensor(i, v, (5, 2))
    dist.all_reduce(s)
    dense = torch.zeros(5, 2)
    for r in range(world):
        dense[r, 0] += 1.0
        dense[4, 1] += 2.0
    out = {"ok": torch.equal(s.to_dense(), dense)}
    out["max"] = _error(lambda: dist.all_reduce(torch.sparse_coo_tensor(i, v, (5, 2)),
                                                op=dist.ReduceOp.MAX))
    shape = (5, 2) if rank == 0 else (6, 2)
    out["shape"] = _error(lambda: dist.all_reduce(torch.sparse_coo_tensor(i, v, shape)))
    out["after"] = _sum_of_ones()
    dist.destroy_process_group()
    return out


def group_api(rank, world, init):
    dist.init_process_group("tdist", init_method=init, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=30))
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    out = {"supports_splitting": backend.supports_splitting,
           "supports_coalescing": backend.supports_coalescing}
    # split_group: ranks 0,1 together, the rest on their own.
    splits = [[0, 1]] + [[r] for r in range(2, world)]
    sub = dist.split_group(split_ranks=splits)
    t = torch.tensor([float(rank)])
    dist.all_reduce(t, group=sub)
    out["split_sum"] = float(t)
    out["split_size"] = dist.get_world_size(sub)
    out["split_backend"] = dist.get_backend(sub)
    # monitored_barrier in gloo's words: rank world-1 stays away.
    dist.monitored_barrier(timeout=datetime.timedelta(seconds=5))
    if rank != world - 1:
        out["monitored"] = _error(
            lambda: dist.monitored_barrier(timeout=datetime.timedelta(seconds=1)))
    dist.barrier()
    # Sequence numbers count the group's collectives.
    seq0 = backend._get_sequence_number_for_group()
    dist.all_reduce(torch.ones(1))
    out["seq_step"] = backend._get_sequence_number_for_group() - seq0
    # A call waited for at once finishes inside it and returns no Work, as NCCL's does
    # (torch.distributed's functions then skip work.wait()); an async one returns its Work.
    opts = dist.AllreduceOptions()
    opts.asyncOp = False
    waited = torch.ones(3)
    out["waited_work"] = repr(dist.group.WORLD.allreduce([waited], opts))
    out["waited_sum"] = waited.tolist()
    opts.asyncOp = True
    pending = dist.group.WORLD.allreduce([waited], opts)
    out["async_work"] = pending is not None
    pending.wait()
    # Collective timing: the Work's duration once complete.
    dist.group.WORLD._enable_collectives_timing()
    work = dist.all_reduce(torch.ones(1000), async_op=True)
    work.wait()
    out["duration_ms"] = work._get_duration()
    # DDP names the backend as dist.get_backend() does.
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2))
    out["ddp_backend"] = model._get_ddp_logging_data().get("backend_name")
    # A barrier that times out says so in the words torch's callers match.
    short = dist.new_group(timeout=datetime.timedelta(seconds=1))
    if rank == 0:
        out["timeout"] = _error(lambda: dist.barrier(group=short))
    else:
        time.sleep(2.5)  # alive (and away) until rank 0's barrier timed out
    dist.barrier()
    dist.destroy_process_group()
    return out


def join_uneven(rank, world, init, backend):
    """DDP under torch.distributed.algorithms.Join with 3 and 7 batches: the final weights."""
    from torch.distributed.algorithms.join import Join

    torch.manual_seed(0)
    dist.init_process_group(backend, init_method=init, rank=rank, world_size=world)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with Join([model]):
        for i in range(3 if rank == 0 else 7):
            opt.zero_grad()
            model(torch.full((2, 4), float(i + rank))).sum().backward()
            opt.step()
    weights = torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()
    dist.destroy_process_group()
    return weights
