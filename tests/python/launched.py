"""A torch.distributed program on the tdist backend, as a launcher runs it (env://)."""

import os

import torch
import torch.distributed as dist

import tdist  # noqa: F401

dist.init_process_group("tdist")
rank, world = dist.get_rank(), dist.get_world_size()
assert rank == int(os.environ["RANK"]) and world == int(os.environ["WORLD_SIZE"])
t = torch.full((1 << 16,), float(rank + 1))
dist.all_reduce(t)
assert torch.equal(t, torch.full_like(t, world * (world + 1) / 2)), t[:4]
objs = [None] * world
dist.all_gather_object(objs, {"rank": rank, "local": int(os.environ["LOCAL_RANK"])})
assert [o["rank"] for o in objs] == list(range(world)), objs
dist.barrier()
dist.destroy_process_group()
print(f"launched ok rank {rank} of {world}", flush=True)
