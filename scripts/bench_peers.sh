#!/usr/bin/env bash
# Side-by-side all_reduce (f32 sum) busbw of tdist's tcp and shm backends,
# torch.distributed with gloo, and OpenMPI over TCP and over shared memory (vader), on
# this machine, in one run (docs/performance.md).
# Needs: a build (scripts/build.sh), python3-torch, openmpi-bin, libopenmpi-dev.
# Usage: bash scripts/bench_peers.sh [WORLD] [MAX_BYTES]
set -euo pipefail
cd "$(dirname "$0")/.."
world=${1:-2}
max=${2:-67108864}
anchors=../shared/anchors
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mpicc -O2 -o "$tmp/mpi_allreduce" "$anchors/mpi_allreduce.c"
mpicc -O2 -o "$tmp/mpi_allreduce_small" scripts/peers/mpi_allreduce_small.c

echo "## tdist (tcp), world $world"
build/tools/tdist-bench --nproc "$world" --coll all_reduce -b 8 -e 1K -f 2 -n 2000 -w 100 -c 0 |
  grep -v '^# [A-Z]'
build/tools/tdist-bench --nproc "$world" --coll all_reduce -b 1K -e "$max" -f 4 -n 20 -w 5 -c 0 |
  grep -v '^# [A-Z]'
echo "## tdist (shm), world $world"
build/tools/tdist-bench --nproc "$world" --backend shm --coll all_reduce -b 8 -e 1K -f 2 -n 2000 \
  -w 100 -c 0 | grep -v '^# [A-Z]'
build/tools/tdist-bench --nproc "$world" --backend shm --coll all_reduce -b 1K -e "$max" -f 4 \
  -n 20 -w 5 -c 0 | grep -v '^# [A-Z]'
echo "## OpenMPI (default transports: shared memory, vader), world $world"
mpirun --allow-run-as-root --oversubscribe -np "$world" "$tmp/mpi_allreduce_small"
mpirun --allow-run-as-root --oversubscribe -np "$world" "$tmp/mpi_allreduce" "$max"
echo "## OpenMPI (--mca btl self,tcp), world $world"
mpirun --allow-run-as-root --oversubscribe -np "$world" --mca btl self,tcp \
  "$tmp/mpi_allreduce_small"
mpirun --allow-run-as-root --oversubscribe -np "$world" --mca btl self,tcp \
  "$tmp/mpi_allreduce" "$max"
echo "## torch.distributed (gloo), world $world"
/usr/bin/python3 "$anchors/torch_allreduce.py" "$world" "$max" 2>&1 | grep torch-gloo
