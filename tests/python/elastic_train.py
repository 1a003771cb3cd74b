"""An elastic PyTorch DDP job on tdist (tdist.elastic), run by test_elastic.py under
tdistrun --elastic: a small MLP, SGD with momentum, deterministic data (each step's global
batch is fixed by the step, dealt over the generation's ranks).

  --die SLOT@STEP[:after-vote]: the process holding SLOT SIGKILLs itself in step STEP, after
  its forward (the others are left in backward's all_reduce), or after its vote completed and
  before its optimizer step, once per job (a mark file in --marks).
  --out PREFIX: each rank writes PREFIX.<slot>: a JSON line with the parameters' SHA-256,
  the step, the world size, the generation and the recoveries.
"""

import argparse
import gc
import hashlib
import json
import os
import signal

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import tdist.elastic

GLOBAL_BATCH = 24  # dealt evenly over 4 or 3 ranks


def batch(step, rank, size):
    per = GLOBAL_BATCH // size
    idx = torch.arange(step * GLOBAL_BATCH + rank * per, step * GLOBAL_BATCH + (rank + 1) * per)
    cols = torch.arange(32, dtype=torch.float32)
    x = torch.sin(idx[:, None].float() * 0.37 + cols[None, :] * (0.01 + (idx[:, None] % 7) * 0.003))
    y = (idx * 7 + idx // 13) % 10
    return x, y


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                               torch.nn.ReLU(), torch.nn.Linear(64, 10))


def params_hash(model):
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def maybe_die(args, slot, step, when="before-backward"):
    if args.die is None:
        return
    where, _, at = args.die.partition(":")
    die_slot, die_step = (int(v) for v in where.split("@"))
    mark = os.path.join(args.marks, "died")
    if (slot, step, when) != (die_slot, die_step, at or "before-backward") or os.path.exists(mark):
        return
    with open(mark, "w") as f:
        f.write(f"{os.getpid()}\n")
    os.kill(os.getpid(), signal.SIGKILL)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--die")
    parser.add_argument("--marks", default=".")
    parser.add_argument("--out", required=True)
    parser.add_argument("--join-window", type=float, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)

    job = tdist.elastic.join(join_window=args.join_window)
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    events = []
    r = job.recover(model, opt)
    if r.received:
        events.append(["recovered", r.generation, r.step, r.received])
    ddp = DDP(model)
    while job.step < args.steps:
        try:
            opt.zero_grad()
            x, y = batch(job.step, job.rank, job.size)
            loss = F.cross_entropy(ddp(x), y)
            maybe_die(args, job.slot, job.step)
            loss.backward()
            if job.commit():
                maybe_die(args, job.slot, job.step - 1, "after-vote")
                opt.step()
        except Exception as e:  # noqa: BLE001
            if not tdist.elastic.is_failure(e):
                raise
            events.append(["failed", job.step, f"{type(e).__name__}: {e}"[:200]])
            del ddp
            gc.collect()  # the old DDP's hooks go with it
            r = job.rejoin(model, opt)
            events.append(["rejoined", r.generation, r.step, job.size, r.received])
            ddp = DDP(model)
    with open(f"{args.out}.{job.slot}", "w") as f:
        json.dump({"hash": params_hash(model), "step": job.step, "world": job.size,
                   "generation": job.generation, "events": events,
                   "default_is_job_group": dist.group.WORLD is job.group}, f)
    job.close()


if __name__ == "__main__":
    main()
