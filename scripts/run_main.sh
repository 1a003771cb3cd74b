#!/usr/bin/env bash
# The main job, until the training example exists: sets up, builds, then
#  1. two processes meet through a TCPStore (env:// rendezvous) and exchange greetings;
#  2. tdistrun starts 2 tdist-bench workers (torchrun's flags and environment), which run
#     an all_reduce benchmark over the tcp backend, checking every result.
# Usage: bash scripts/run_main.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
echo "== two processes meet through the store"
build/examples/hello_rendezvous --nproc 2
echo "== all_reduce benchmark: tdistrun starts 2 workers, tcp backend"
build/tools/tdistrun --standalone --nproc-per-node 2 \
  build/tools/tdist-bench --coll all_reduce -b 8 -e 16M -f 4 -n 20 -w 5 -c 1
