"""Rank bodies of test_sharded.py: PyTorch's sharded training on gloo and then on tdist,
each in turn the default group, same seed and data on both, so that the test can compare
them step by step.

fsdp2_train: FSDP2 (torch.distributed.fsdp.fully_shard over init_device_mesh("cpu")), each
  Linear block sharded, then the root; Adam; in fp32, then with MixedPrecisionPolicy(bf16
  parameters, fp32 reduction). On CPU FSDP2 all-gathers each block's parameters before its
  forward and backward (all_gather_single, not async unless prefetching is asked for) and
  reduce-scatters its gradients after (reduce_scatter_single, op AVG); full_tensor()
  all-gathers the final parameters.
zero_train: DDP with torch.distributed.optim.ZeroRedundancyOptimizer wrapping Adam: DDP
  all_reduces the gradients, each rank steps its shard of the parameters and broadcasts
  it; consolidate_state_dict gathers the optimizer's state to rank 0 (broadcast_object_list).

Each returns, by backend, this rank's per-step losses and the final full parameters, as
lists of floats. The FSDP2 and ZeRO imports are inside the functions: torch 1.13 (where
the tests are skipped) has no fully_shard, and importing FSDP2 costs a rank about 4 s.
"""

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import tdist  # noqa: F401  (registers the backend)

BACKENDS = ("gloo", "tdist")
STEPS = 6
WIDTH = 32


def _model():
    """Three Linear+ReLU blocks and a head, seeded: the same weights on every rank and
    backend. Widths not multiples of 3, so that world 3's shards are uneven (padded)."""
    torch.manual_seed(0)
    blocks = [nn.Sequential(nn.Linear(n_in, n_out), nn.ReLU())
              for n_in, n_out in ((12, WIDTH), (WIDTH, WIDTH), (WIDTH, WIDTH))]
    return nn.Sequential(*blocks, nn.Linear(WIDTH, 5))


def _batches(rank):
    """STEPS batches of this rank's own data (data parallel: each rank sees other data)."""
    gen = torch.Generator().manual_seed(100 + rank)
    return [(torch.randn(8, 12, generator=gen), torch.randint(0, 5, (8,), generator=gen))
            for _ in range(STEPS)]


def _train(model, opt, rank):
    losses = []
    for x, y in _batches(rank):
        opt.zero_grad()
        loss = F.cross_entropy(model(x).float(), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _each_backend(init, rank, world, train):
    """{backend: train()} for gloo, then tdist, each the default group in turn (a
    rendezvous file of its own): one process start, and one import of FSDP2, for both."""
    out = {}
    for backend in BACKENDS:
        dist.init_process_group(backend, init_method=f"{init}-{backend}", rank=rank,
                                world_size=world)
        out[backend] = train()
        dist.destroy_process_group()
    return out


def fsdp2_train(rank, world, init):
    """{backend: {"fp32": run, "bf16": run}}, bf16 being MixedPrecisionPolicy(param_dtype=
    bfloat16, reduce_dtype=float32); a run is {"losses": [...], "params": [[...], ...]}."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    def run(mesh, policy):
        model = _model()
        for block in model[:-1]:
            fully_shard(block, mesh=mesh, mp_policy=policy)
        fully_shard(model, mesh=mesh, mp_policy=policy)
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        losses = _train(model, opt, rank)
        return {"losses": losses, "params": [p.full_tensor().flatten().tolist()
                                             for p in model.parameters()]}

    def both():
        mesh = init_device_mesh("cpu", (world,))  # over the default group
        bf16 = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        return {"fp32": run(mesh, MixedPrecisionPolicy()), "bf16": run(mesh, bf16)}

    return _each_backend(init, rank, world, both)


def zero_train(rank, world, init):
    """{backend: {"losses": [...], "params": [[...], ...], "steps": [...] on rank 0}}, steps
    being the Adam step count of each parameter in the state consolidated to rank 0."""
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP

    def run():
        model = _model()
        ddp = DDP(model)
        opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.Adam,
                                      lr=1e-2)
        losses = _train(ddp, opt, rank)
        # Gathering the optimizer's state to rank 0 exercises its broadcasts of objects.
        opt.consolidate_state_dict(to=0)
        steps = ([float(s["step"]) for s in opt.state_dict()["state"].values()]
                 if rank == 0 else None)
        return {"losses": losses, "params": [p.detach().flatten().tolist()
                                             for p in model.parameters()], "steps": steps}

    return _each_backend(init, rank, world, run)
