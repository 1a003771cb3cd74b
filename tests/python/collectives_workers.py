"""Rank bodies of test_collectives.py: every collective on a tdist group beside the same
call on a gloo group in the same processes, both checked against a reference computed
from every rank's (deterministic) input."""

import torch
import torch.distributed as dist

import tdist

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
          torch.uint8, torch.int32, torch.int64, torch.bool]
FLOATS = {torch.float32, torch.float64, torch.float16, torch.bfloat16}
COUNTS = [1, 7, 1000, 70001]


def ops_for(dtype):
    """(name, torch op, reference over a stacked [world, ...] tensor) valid for dtype."""
    def premul(x):
        return (x.double() * 2).sum(0).to(x.dtype)

    def avg(x):
        if dtype in FLOATS:
            return (x.double().sum(0) / x.shape[0]).to(dtype)
        return torch.div(x.long().sum(0), x.shape[0], rounding_mode="trunc").to(dtype)

    def wrap(fn):
        return lambda x: fn(x.long() if dtype not in FLOATS else x.double()).to(dtype)

    if dtype == torch.bool:
        return [("sum", dist.ReduceOp.SUM, lambda x: x.any(0)),
                ("prod", dist.ReduceOp.PRODUCT, lambda x: x.all(0)),
                ("min", dist.ReduceOp.MIN, lambda x: x.all(0)),
                ("max", dist.ReduceOp.MAX, lambda x: x.any(0)),
                ("band", dist.ReduceOp.BAND, lambda x: x.all(0)),
                ("bor", dist.ReduceOp.BOR, lambda x: x.any(0)),
                ("bxor", dist.ReduceOp.BXOR, lambda x: (x.long().sum(0) % 2).bool())]
    ops = [("sum", dist.ReduceOp.SUM, wrap(lambda x: x.sum(0))),
           ("prod", dist.ReduceOp.PRODUCT, wrap(lambda x: x.prod(0))),
           ("min", dist.ReduceOp.MIN, lambda x: x.min(0).values),
           ("max", dist.ReduceOp.MAX, lambda x: x.max(0).values),
           ("avg", dist.ReduceOp.AVG, avg)]
    if dtype in FLOATS:
        ops.append(("premul_sum", dist._make_nccl_premul_sum(2.0), premul))
    else:
        def fold(fn):
            def reduce(x):
                out = x[0].long()
                for row in x[1:]:
                    out = fn(out, row.long())
                return out.to(dtype)
            return reduce
        ops += [("band", dist.ReduceOp.BAND, fold(torch.bitwise_and)),
                ("bor", dist.ReduceOp.BOR, fold(torch.bitwise_or)),
                ("bxor", dist.ReduceOp.BXOR, fold(torch.bitwise_xor))]
    return ops


def make(rank, dtype, n, salt=0):
    """Rank `rank`'s input: small values whose sums and products are exact in every dtype."""
    base = torch.arange(n, dtype=torch.int64) + salt
    if dtype == torch.bool:
        return (base + rank) % 3 == 0
    values = (base * (rank + 1) + rank) % 5
    if dtype != torch.uint8:
        values = values - 2
    return values.to(dtype)


def stacked(world, dtype, n, salt=0):
    return torch.stack([make(r, dtype, n, salt) for r in range(world)])


class Checker:
    """Runs one call on both groups; compares with the reference and with gloo's result."""

    def __init__(self, tdist_group):
        self.tg = tdist_group
        self.checks = 0
        self.gloo_checks = 0

    def same(self, got, want, what):
        if isinstance(want, (list, tuple)):
            assert len(got) == len(want), f"{what}: {len(got)} results, expected {len(want)}"
            for i, (g, w) in enumerate(zip(got, want)):
                self.same(g, w, f"{what}[{i}]")
            return
        assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, expected {want.dtype}"
        assert torch.equal(got, want), f"{what}: got {got.flatten()[:8]}, expected {want.flatten()[:8]}"

    def run(self, what, call, want):
        """call(group) returns the output; gloo's result must match too where gloo serves."""
        self.same(call(self.tg), want, f"tdist {what}")
        self.checks += 1
        try:
            gloo = call(None)
        except (RuntimeError, ValueError):
            # An op, dtype or call gloo does not serve (premul_sum, avg on integers, ...),
            # refused alike on every rank; the test counts the comparisons that did happen.
            return
        self.same(gloo, want, f"gloo {what}")
        self.gloo_checks += 1


def all_reduce_cases(rank, world, c):
    for dtype in DTYPES:
        for name, op, ref in ops_for(dtype):
            for n in COUNTS:
                want = ref(stacked(world, dtype, n))

                def call(group, dtype=dtype, op=op, n=n):
                    t = make(rank, dtype, n)
                    dist.all_reduce(t, op=op, group=group)
                    return t
                c.run(f"all_reduce {dtype} {name} x{n}", call, want)


def rooted_cases(rank, world, c):
    dtype = torch.float32
    for root in range(world):
        want = make(root, dtype, 1001)

        def bcast(group, root=root):
            t = make(rank, dtype, 1001)
            dist.broadcast(t, src=root, group=group)
            return t
        c.run(f"broadcast root {root}", bcast, want)
    for dtype in (torch.float32, torch.int64, torch.bfloat16):
        for name, op, ref in ops_for(dtype)[:4]:
            root = world - 1
            full = ref(stacked(world, dtype, 513))

            def red(group, op=op, dtype=dtype, root=root):
                t = make(rank, dtype, 513)
                dist.reduce(t, dst=root, op=op, group=group)
                return t if rank == root else make(rank, dtype, 513)
            c.run(f"reduce {dtype} {name}", red,
                  full if rank == root else make(rank, dtype, 513))
    root = 1 % world
    pieces = [make(r, torch.float64, 33, salt=7) for r in range(world)]

    def gather(group):
        out = [torch.zeros(33, dtype=torch.float64) for _ in range(world)] if rank == root else None
        dist.gather(make(rank, torch.float64, 33, salt=7), out, dst=root, group=group)
        return out if rank == root else []
    c.run("gather", gather, pieces if rank == root else [])

    def scatter(group):
        out = torch.zeros(33, dtype=torch.float64)
        dist.scatter(out, pieces if rank == root else None, src=root, group=group)
        return out
    c.run("scatter", scatter, pieces[rank])


def gather_cases(rank, world, c):
    for dtype in (torch.float32, torch.float16, torch.int8, torch.bool):
        each = [make(r, dtype, 257) for r in range(world)]

        def all_gather(group, dtype=dtype):
            out = [torch.empty(257, dtype=dtype) for _ in range(world)]
            dist.all_gather(out, make(rank, dtype, 257), group=group)
            return out
        c.run(f"all_gather {dtype}", all_gather, each)

        def into_tensor(group, dtype=dtype):
            out = torch.empty(world * 257, dtype=dtype)
            dist.all_gather_into_tensor(out, make(rank, dtype, 257), group=group)
            return out
        c.run(f"all_gather_into_tensor {dtype}", into_tensor, torch.cat(each))


def reduce_scatter_cases(rank, world, c):
    for dtype in (torch.float32, torch.int32):
        for name, op, ref in ops_for(dtype)[:4]:
            full = ref(stacked(world, dtype, world * 100))  # rank r gets block r
            want = full[rank * 100:(rank + 1) * 100]

            def rs_list(group, dtype=dtype, op=op):
                inp = list(make(rank, dtype, world * 100).split(100))
                out = torch.empty(100, dtype=dtype)
                dist.reduce_scatter(out, inp, op=op, group=group)
                return out
            c.run(f"reduce_scatter {dtype} {name}", rs_list, want)

            def rs_tensor(group, dtype=dtype, op=op):
                out = torch.empty(100, dtype=dtype)
                dist.reduce_scatter_tensor(out, make(rank, dtype, world * 100), op=op, group=group)
                return out
            c.run(f"reduce_scatter_tensor {dtype} {name}", rs_tensor, want)


def all_to_all_cases(rank, world, c):
    def block(src, dst):
        return torch.full((3 + src + dst,), float(100 * src + dst))

    def a2a(group):
        out = [torch.empty(3 + p + rank) for p in range(world)]
        dist.all_to_all(out, [block(rank, p) for p in range(world)], group=group)
        return out
    c.run("all_to_all (uneven)", a2a, [block(p, rank) for p in range(world)])

    def single_even(group):
        inp = torch.arange(world * 4, dtype=torch.float32) + 1000 * rank
        out = torch.empty(world * 4)
        dist.all_to_all_single(out, inp, group=group)
        return out
    want = torch.cat([torch.arange(rank * 4, rank * 4 + 4, dtype=torch.float32) + 1000 * p
                      for p in range(world)])
    c.run("all_to_all_single", single_even, want)

    def single_uneven(group):
        inp = torch.cat([block(rank, p) for p in range(world)])
        out = torch.empty(sum(3 + p + rank for p in range(world)))
        dist.all_to_all_single(out, inp, output_split_sizes=[3 + p + rank for p in range(world)],
                               input_split_sizes=[3 + rank + p for p in range(world)],
                               group=group)
        return out
    c.run("all_to_all_single (splits)", single_uneven,
          torch.cat([block(p, rank) for p in range(world)]))


def p2p_cases(rank, world, c):
    right, left = (rank + 1) % world, (rank - 1) % world

    def ring(group):
        out = torch.empty(50, dtype=torch.int64)
        if rank % 2 == 0:
            dist.send(make(rank, torch.int64, 50), dst=right, group=group)
            dist.recv(out, src=left, group=group)
        else:
            dist.recv(out, src=left, group=group)
            dist.send(make(rank, torch.int64, 50), dst=right, group=group)
        return out
    c.run("send/recv ring", ring, make(left, torch.int64, 50))

    def isend_irecv(group):
        out = torch.empty(50000)
        works = [dist.irecv(out, src=left, group=group, tag=3),
                 dist.isend(make(rank, torch.float32, 50000), dst=right, group=group, tag=3)]
        for w in works:
            w.wait()
        return out
    c.run("isend/irecv", isend_irecv, make(left, torch.float32, 50000))

    def p2p_futures(group):
        # Only the futures are waited on: the backend's progress thread moves the messages
        # (1.6 MB: a rendezvous, which moves only while somebody waits).
        out = torch.empty(400000)
        works = [dist.irecv(out, src=left, group=group, tag=4),
                 dist.isend(make(rank, torch.float32, 400000), dst=right, group=group, tag=4)]
        futures = [w.get_future() for w in works]
        torch.futures.wait_all(futures)
        return futures[0].value()[0]
    # tdist only: gloo's point-to-point Works have no future (RuntimeError once posted).
    c.same(p2p_futures(c.tg), make(left, torch.float32, 400000), "tdist isend/irecv get_future()")
    c.checks += 1

    def batch(group):
        out_l, out_r = torch.empty(20), torch.empty(20)
        ops = [dist.P2POp(dist.isend, make(rank, torch.float32, 20, salt=1), right, group),
               dist.P2POp(dist.isend, make(rank, torch.float32, 20, salt=2), left, group),
               dist.P2POp(dist.irecv, out_l, left, group),
               dist.P2POp(dist.irecv, out_r, right, group)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        return [out_l, out_r]
    c.run("batch_isend_irecv", batch,
          [make(left, torch.float32, 20, salt=1), make(right, torch.float32, 20, salt=2)])


def async_and_object_cases(rank, world, c):
    want = stacked(world, torch.float32, 4096).sum(0)

    def async_op(group):
        t = make(rank, torch.float32, 4096)
        work = dist.all_reduce(t, async_op=True, group=group)
        work.wait()
        assert work.is_completed() and work.is_success()
        return t
    c.run("all_reduce async_op", async_op, want)

    def future(group):
        t = make(rank, torch.float32, 4096)
        fut = dist.all_reduce(t, async_op=True, group=group).get_future()
        return fut.then(lambda f: f.value()[0] * 1).wait()
    c.run("all_reduce get_future().then()", future, want)

    def barrier(group):
        dist.barrier(group=group)
        return torch.ones(1)
    c.run("barrier", barrier, torch.ones(1))

    def non_contiguous(group):
        t = make(rank, torch.float32, 600).reshape(20, 30).t()  # a transposed view
        dist.all_reduce(t, group=group)
        return t.contiguous()
    c.run("all_reduce transposed", non_contiguous,
          stacked(world, torch.float32, 600).sum(0).reshape(20, 30).t().contiguous())

    objs = [{"rank": r, "name": "x" * r, "values": list(range(r))} for r in range(world)]
    got = [None] * world
    dist.all_gather_object(got, objs[rank], group=c.tg)
    assert got == objs, got
    lst = [objs[2 % world], "two"] if rank == 2 % world else [None, None]
    dist.broadcast_object_list(lst, src=2 % world, group=c.tg)
    assert lst == [objs[2 % world], "two"], lst
    gathered = [None] * world if rank == 0 else None
    dist.gather_object(objs[rank], gathered, dst=0, group=c.tg)
    assert rank != 0 or gathered == objs, gathered
    out = [None]
    dist.scatter_object_list(out, objs if rank == 0 else None, src=0, group=c.tg)
    assert out == [objs[rank]], out
    c.checks += 4


def subgroup_cases(rank, world, engine, c):
    members = [0, world - 1]
    sub = dist.new_group(members, backend="tdist", pg_options=tdist.Options(engine=engine))
    if rank in members:
        t = torch.full((10,), float(rank + 1))
        dist.all_reduce(t, group=sub)
        assert torch.equal(t, torch.full((10,), float(sum(m + 1 for m in members)))), t
        c.checks += 1


def collectives_vs_gloo(rank, world, init, engine):
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    tg = dist.new_group(backend="tdist", pg_options=tdist.Options(engine=engine))
    c = Checker(tg)
    all_reduce_cases(rank, world, c)
    rooted_cases(rank, world, c)
    gather_cases(rank, world, c)
    reduce_scatter_cases(rank, world, c)
    all_to_all_cases(rank, world, c)
    p2p_cases(rank, world, c)
    async_and_object_cases(rank, world, c)
    subgroup_cases(rank, world, engine, c)
    dist.barrier()
    dist.destroy_process_group()
    return {"checks": c.checks, "gloo_checks": c.gloo_checks}
