#!/usr/bin/env bash
# The main job, until the training example exists: sets up, builds, then
#  1. two processes meet through a TCPStore (env:// rendezvous) and exchange greetings;
#  2. tdist-bench runs an all_reduce benchmark over the tcp backend on 2 processes,
#     checking every result.
# Usage: bash scripts/run_main.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
echo "== two processes meet through the store"
build/examples/hello_rendezvous --nproc 2
echo "== all_reduce benchmark, 2 processes, tcp backend"
build/tools/tdist-bench --nproc 2 --coll all_reduce -b 8 -e 16M -f 4 -n 20 -w 5 -c 1
