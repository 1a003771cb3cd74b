"""fsdp2_parity.py: the PyTorch side of the parity yardstick (issue 32).

Trains the model of tests/torch/sharded_parity_worker.cc (same formulas, same output format;
its top comment describes both) with PyTorch's FSDP2 (torch.distributed.fsdp.fully_shard)
over gloo on the CPU, once per SPEC (WORLD-DTYPE-OPTIM, e.g. 2-f32-sgd; DTYPE f32 or bf16,
OPTIM sgd or adam), and writes rank 0's losses and the final full parameters of each to
OUT_DIR/SPEC.txt.

    python3 fsdp2_parity.py [--require-torch MAJOR.MINOR] OUT_DIR SPEC...

Each job's ranks are forked from this process (torch is imported once, for all jobs) and
meet in a FileStore. Needs torch >= 2.4 (FSDP2); exits 77 (skip) without it, and with
--require-torch where torch is another version (parity needs the same kernels on both sides).
"""

import math
import multiprocessing
import os
import sys
import tempfile

try:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
except ImportError as e:
    print(f"fsdp2_parity: {sys.executable} has no torch with FSDP2 ({e})", file=sys.stderr)
    sys.exit(77)

WIDTH, OUT, BLOCKS, GLOBAL_BATCH, STEPS = 37, 5, 3, 12, 20


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        for i in range(BLOCKS):
            setattr(self, f"block{i}", torch.nn.Linear(WIDTH, WIDTH))
        self.head = torch.nn.Linear(WIDTH, OUT)

    def forward(self, x):
        for i in range(BLOCKS):
            x = torch.relu(getattr(self, f"block{i}")(x))
        return self.head(x)


def formula(shape, f):
    """A float32 tensor of `shape` whose flat element i is f(i), computed in double."""
    n = math.prod(shape)
    return torch.tensor([f(i) for i in range(n)], dtype=torch.float64).to(torch.float32).view(shape)


def init_parameters(net):
    scale = 1.0 / math.sqrt(WIDTH)
    with torch.no_grad():
        for k, (_, p) in enumerate(net.named_parameters()):
            p.copy_(formula(list(p.shape), lambda i: math.sin(0.37 * i + k) * scale))


def batch(step, rank, world):
    local = GLOBAL_BATCH // world
    first = step * GLOBAL_BATCH + rank * local
    x = formula([local, WIDTH],
                lambda i: math.sin(0.71 * (first + i // WIDTH) + 0.13 * (i % WIDTH)))
    y = formula([local, OUT], lambda i: 0.5 * math.cos(0.29 * (first + i // OUT) + 0.5 * (i % OUT)))
    return x, y


def hex_bits(t):
    """Each float32's bits as 8 hex digits."""
    bits = t.detach().float().contiguous().view(-1).view(torch.int32).tolist()
    return " ".join(f"{b & 0xFFFFFFFF:08x}" for b in bits)


def train(rank, world, dtype, optim, out_path, store_path):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    net = Net()
    init_parameters(net)
    kwargs = {"mesh": mesh}
    if dtype == "bf16":
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                                   reduce_dtype=torch.float32)
    for i in range(BLOCKS):
        fully_shard(getattr(net, f"block{i}"), **kwargs)
    fully_shard(net, **kwargs)
    if optim == "sgd":
        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    else:
        opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    losses = []
    for step in range(STEPS):
        x, y = batch(step, rank, world)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(net(x).float(), y)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    params = [(name, p.full_tensor()) for name, p in net.named_parameters()]
    if rank == 0:
        with open(out_path, "w") as out:
            for loss in losses:
                out.write(f"loss {hex_bits(loss)}\n")
            for name, value in params:
                out.write(f"param {name} {hex_bits(value)}\n")
    dist.destroy_process_group()


def child(rank, *args):
    try:
        train(rank, *args)
    except BaseException as e:  # noqa: BLE001 - report, then fail the rank
        print(f"fsdp2_parity rank {rank}: {e!r}", file=sys.stderr)
        os._exit(1)
    os._exit(0)


def run_job(world, dtype, optim, out_path):
    """One training job with `world` forked ranks; True when every rank succeeded."""
    with tempfile.TemporaryDirectory(prefix="fsdp2_parity_") as tmp:
        store = os.path.join(tmp, "store")
        ctx = multiprocessing.get_context("fork")
        procs = [ctx.Process(target=child, args=(r, world, dtype, optim, out_path, store))
                 for r in range(world)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
    return all(p.exitcode == 0 for p in procs)


def main():
    args = sys.argv[1:]
    if len(args) >= 2 and args[0] == "--require-torch":
        version = ".".join(torch.__version__.split(".")[:2])
        if version != args[1]:
            print(f"fsdp2_parity: torch {torch.__version__} is not {args[1]}", file=sys.stderr)
            return 77
        args = args[2:]
    if len(args) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    out_dir, jobs = args[0], []
    for spec in args[1:]:
        parts = spec.split("-")
        if (len(parts) != 3 or not parts[0].isdigit() or parts[1] not in ("f32", "bf16")
                or parts[2] not in ("sgd", "adam")):
            print(f"fsdp2_parity: bad SPEC {spec!r}\n{__doc__}", file=sys.stderr)
            return 2
        jobs.append((int(parts[0]), parts[1], parts[2], os.path.join(out_dir, spec + ".txt")))
    for job in jobs:
        if not run_job(*job):
            print(f"fsdp2_parity: job {job} failed", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
