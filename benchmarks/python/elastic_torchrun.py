"""The peer of examples/train_elastic for scripts/bench_elastic.sh: the same job in PyTorch.

PyTorch DDP over gloo, the same MLP (784 -> W -> W -> 10, ~23 MB at W 2048), SGD with
momentum, batch 32 per rank, the same synthetic data, under torchrun --max-restarts 1: a
checkpoint (model and optimizer, torch.save by rank 0) every --checkpoint-every steps and,
when one exists, a resume from it, as a torchrun job recovers from a dead worker. --die
SLOT@STEP makes rank SLOT SIGKILL itself in that step (after its forward), once per job
(a file in --marks records the time). --out PREFIX: each rank writes PREFIX.<rank> with each
step's completion time (ns since the epoch), as train_elastic does.

    torchrun --standalone --nproc-per-node 4 --max-restarts 1 elastic_torchrun.py \\
        --checkpoint /tmp/ck --checkpoint-every 10 --die 2@25 --marks /tmp/m --out /tmp/m/r
"""

import argparse
import faulthandler
import os
import signal
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F


def inputs(indices):
    idx = torch.tensor(indices, dtype=torch.float32).unsqueeze(1)
    cols = torch.arange(784, dtype=torch.float32).unsqueeze(0)
    return torch.sin(idx * 0.37 + cols * (0.01 + idx * 1e-5))


def labels(indices):
    return torch.tensor([(i * 7 + i // 13) % 10 for i in indices], dtype=torch.int64)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--dataset", type=int, default=8192)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--checkpoint-every", type=int, default=10)
    p.add_argument("--die", default="")
    p.add_argument("--marks", default=".")
    p.add_argument("--out", default="")
    a = p.parse_args()
    faulthandler.register(signal.SIGUSR1)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, a.width), torch.nn.ReLU(),
                                torch.nn.Linear(a.width, a.width), torch.nn.ReLU(),
                                torch.nn.Linear(a.width, 10))
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    step, epoch = 0, 0
    path = os.path.join(a.checkpoint, "ckpt.pt")
    if os.path.exists(path):
        state = torch.load(path, weights_only=False)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optim"])
        step, epoch = state["step"], state["epoch"]
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    sampler = torch.utils.data.distributed.DistributedSampler(range(a.dataset), world, rank,
                                                              shuffle=True, seed=1)
    die_slot, die_step = (int(x) for x in a.die.split("@")) if a.die else (-1, -1)
    done = []
    while step < a.steps:
        sampler.set_epoch(epoch)
        order = list(sampler)
        per_epoch = len(order) // a.batch_size
        first = step % per_epoch if step // per_epoch == epoch else 0
        for b in range(first, per_epoch):
            if step >= a.steps:
                break
            batch = order[b * a.batch_size:(b + 1) * a.batch_size]
            opt.zero_grad()
            loss = F.cross_entropy(ddp(inputs(batch)), labels(batch))
            mark = os.path.join(a.marks, "died-0")
            if rank == die_slot and step == die_step and not os.path.exists(mark):
                with open(mark, "w") as f:
                    f.write(f"{time.time_ns()} {rank} {step} {os.getpid()}\n")
                os.kill(os.getpid(), signal.SIGKILL)
            loss.backward()
            opt.step()
            step += 1
            done.append((step, time.time_ns()))
            if step % a.checkpoint_every == 0 and rank == 0:
                tmp = path + ".tmp"
                torch.save({"model": model.state_dict(), "optim": opt.state_dict(),
                            "step": step, "epoch": epoch}, tmp)
                os.replace(tmp, path)
            if step % a.checkpoint_every == 0:
                dist.barrier()  # the checkpoint exists before anyone goes past it
        else:
            epoch += 1
    if a.out:
        with open(f"{a.out}.{rank}", "w") as f:
            f.write(f"hash 0 step {step} world {world} generation 0\n")
            for s, t in done:
                f.write(f"done {s} {t}\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
