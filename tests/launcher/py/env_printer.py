"""The Python twin of launcher_env_worker (tests/launcher/env_worker.cc): shows that a
torch.distributed program runs unmodified under tdistrun.

    python3 env_printer.py [--init]

Writes one "NAME=value" line per variable of the launcher's contract ("<unset>" when
unset) to $ENV_WORKER_OUT_DIR/rank_<RANK>.env when that is set (written under a
temporary name and renamed), else to stdout as "env <RANK>: NAME=value" lines in one
write. With --init it then joins the job: init_process_group("gloo") over env://, an
all_reduce of its rank checked against world*(world-1)/2, a barrier and destroy.
Exit status: 0 on success, 1 with a message on stderr when the sum is wrong (torch's own
errors propagate as exceptions), 2 on bad usage.
"""
import os
import sys

VARIABLES = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "ROLE_NAME",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_ERROR_FILE",
    "TORCHELASTIC_USE_AGENT_STORE",
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "TDIST_AGENT_STORE",
    "TDIST_AGENT_STORE_PREFIX",
    "TDIST_USE_AGENT_STORE",
)


def report(line_prefix: str) -> str:
    return "".join(f"{line_prefix}{name}={os.environ.get(name, '<unset>')}\n" for name in VARIABLES)


def write_report(rank: str) -> None:
    out_dir = os.environ.get("ENV_WORKER_OUT_DIR")
    if out_dir is None:
        os.write(sys.stdout.fileno(), report(f"env {rank}: ").encode())
        return
    path = os.path.join(out_dir, f"rank_{rank}.env")
    with open(path + ".tmp", "w") as f:
        f.write(report(""))
    os.rename(path + ".tmp", path)


def join_and_check(rank: str) -> int:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    value = torch.tensor([dist.get_rank()], dtype=torch.int64)
    dist.all_reduce(value)
    world = dist.get_world_size()
    expected = world * (world - 1) // 2
    dist.barrier()
    dist.destroy_process_group()
    if value.item() != expected:
        print(f"env_printer.py rank {rank}: all_reduce of the ranks gave {value.item()}, "
              f"expected {expected} for world size {world}", file=sys.stderr)
        return 1
    return 0


def main() -> int:
    args = sys.argv[1:]
    if args not in ([], ["--init"]):
        print(f"usage: {sys.argv[0]} [--init]", file=sys.stderr)
        return 2
    rank = os.environ.get("RANK", "<unset>")
    write_report(rank)
    return join_and_check(rank) if args else 0


if __name__ == "__main__":
    sys.exit(main())
