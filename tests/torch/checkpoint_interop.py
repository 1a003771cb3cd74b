"""checkpoint_interop.py: PyTorch's side of the checkpoint interop (checkpoint_interop_test.cc).

The model is fsdp2_parity.py's (tests/torch/checkpoint_worker.cc builds the same in C++).

    python3 checkpoint_interop.py load CKPT REF WORLD plain|fsdp2
        PyTorch's DCP loads the checkpoint folder CKPT (tdist's, read with
        HuggingFaceStorageReader) into the model, a plain module in this process (WORLD 1) or
        FSDP2 over gloo on WORLD forked ranks, and checks every parameter, bit for bit,
        against REF (checkpoint_worker's reference file: "<name> <hex bits>..." per line).
    python3 checkpoint_interop.py save DIR WORLD plain|fsdp2
        Trains the model 2 steps (SGD) plain or under FSDP2 on WORLD ranks, saves it with
        HuggingFaceStorageWriter to DIR/ckpt (FSDP2: each rank its shards,
        save_distributed=True), and writes its parameters to DIR/ref-py.txt.

Exits 77 (skip) without torch >= 2.4's FSDP2, DCP's HuggingFace storage or safetensors.
"""

import math
import multiprocessing
import os
import sys
import tempfile

try:
    import safetensors  # noqa: F401 - DCP's HuggingFace storage needs it
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import HuggingFaceStorageReader, HuggingFaceStorageWriter
    from torch.distributed.checkpoint.state_dict import get_model_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
except ImportError as e:
    print(f"checkpoint_interop: {sys.executable} lacks what the interop needs ({e})",
          file=sys.stderr)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fsdp2_parity import BLOCKS, Net, batch, hex_bits, init_parameters  # noqa: E402


def read_ref(path):
    ref = {}
    with open(path) as f:
        for line in f:
            words = line.split()
            bits = [int(w, 16) for w in words[1:]]
            ref[words[0]] = torch.tensor([b - (1 << 32) if b >= 1 << 31 else b for b in bits],
                                         dtype=torch.int32).view(torch.float32)
    return ref


def build(world, mode):
    net = Net()
    if mode == "fsdp2":
        mesh = init_device_mesh("cpu", (world,))
        for i in range(BLOCKS):
            fully_shard(getattr(net, f"block{i}"), mesh=mesh)
        fully_shard(net, mesh=mesh)
    return net


def full(p):
    return p.full_tensor() if hasattr(p, "full_tensor") else p.detach()


def load(rank, world, mode, ckpt, ref_path):
    net = build(world, mode)
    with torch.no_grad():
        for p in net.parameters():
            p.zero_()
    state = get_model_state_dict(net)
    dcp.load(state, storage_reader=HuggingFaceStorageReader(ckpt))
    if mode == "plain":
        net.load_state_dict(state)
    ref = read_ref(ref_path)
    for name, p in net.named_parameters():
        got = full(p).contiguous().view(-1)
        want = ref[name]
        if not torch.equal(got.view(torch.int32), want.view(torch.int32)):
            raise AssertionError(f"rank {rank}: {name} differs from {ref_path}: "
                                 f"{got[:4].tolist()} vs {want[:4].tolist()}")
    if rank == 0:
        print(f"checkpoint_interop: PyTorch loaded {ckpt} ({mode}, world {world}): equal")


def save(rank, world, mode, out_dir):
    net = build(world, mode)
    if mode == "plain":
        init_parameters(net)
    else:
        # Under FSDP2 the parameters are DTensors: set them whole, then they shard.
        plain = Net()
        init_parameters(plain)
        from torch.distributed.checkpoint.state_dict import (StateDictOptions,
                                                             set_model_state_dict)
        set_model_state_dict(net, plain.state_dict(),
                             options=StateDictOptions(full_state_dict=True))
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    for step in range(2):
        x, y = batch(step, rank, world)
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(x), y).backward()
        opt.step()
    writer = HuggingFaceStorageWriter(os.path.join(out_dir, "ckpt"),
                                      save_distributed=mode == "fsdp2")
    dcp.save(get_model_state_dict(net), storage_writer=writer)
    params = [(name, full(p)) for name, p in net.named_parameters()]
    if rank == 0:
        with open(os.path.join(out_dir, "ref-py.txt"), "w") as out:
            for name, value in params:
                out.write(f"{name} {hex_bits(value)}\n")


def child(rank, world, store, fn, *args):
    try:
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                                world_size=world)
        fn(rank, world, *args)
        dist.destroy_process_group()
    except BaseException as e:  # noqa: BLE001 - report, then fail the rank
        print(f"checkpoint_interop rank {rank}: {e!r}", file=sys.stderr)
        os._exit(1)
    os._exit(0)


def run(world, mode, fn, *args):
    if mode == "plain":
        fn(0, 1, mode, *args)
        return True
    with tempfile.TemporaryDirectory(prefix="checkpoint_interop_") as tmp:
        ctx = multiprocessing.get_context("fork")
        procs = [ctx.Process(target=child,
                             args=(r, world, os.path.join(tmp, "store"), fn, mode, *args))
                 for r in range(world)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
    return all(p.exitcode == 0 for p in procs)


def main():
    args = sys.argv[1:]
    if len(args) == 5 and args[0] == "load" and args[4] in ("plain", "fsdp2"):
        ok = run(int(args[3]), args[4], load, args[1], args[2])
    elif len(args) == 4 and args[0] == "save" and args[3] in ("plain", "fsdp2"):
        ok = run(int(args[2]), args[3], save, args[1])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
