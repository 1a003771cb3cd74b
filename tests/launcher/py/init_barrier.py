"""The smallest complete torch.distributed job, timed by scripts/bench_launcher.sh beside
launcher_init_barrier_worker: init_process_group("gloo") over env://, one barrier,
destroy_process_group. Silent unless --print, with which rank 0 reports the world size.

    python3 init_barrier.py [--print]
"""
import sys

import torch.distributed as dist


def main() -> int:
    args = sys.argv[1:]
    if args not in ([], ["--print"]):
        print(f"usage: {sys.argv[0]} [--print]", file=sys.stderr)
        return 2
    dist.init_process_group("gloo")
    dist.barrier()
    rank, world = dist.get_rank(), dist.get_world_size()
    dist.destroy_process_group()
    if args and rank == 0:
        print(f"init_barrier.py: {world} ranks joined and passed a barrier")
    return 0


if __name__ == "__main__":
    sys.exit(main())
