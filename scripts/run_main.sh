#!/usr/bin/env bash
# The main job, until the training example exists: sets up, builds, then
#  1. two processes meet through a TCPStore (env:// rendezvous) and exchange greetings;
#  2. the reduction-kernel benchmark compares f32 sum with memcpy bandwidth.
# Usage: bash scripts/run_main.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
echo "== two processes meet through the store"
build/examples/hello_rendezvous --nproc 2
echo "== reduction kernels vs memcpy (1 MiB)"
build/benchmarks/reduce_bench --benchmark_filter='/1048576$' --benchmark_min_time=0.2
