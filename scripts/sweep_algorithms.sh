#!/usr/bin/env bash
# Times every flat algorithm of all_reduce, broadcast and reduce over the tcp and shm
# transports between processes on this machine (worlds 2, 3 and 4, 8 B..64 MiB) and prints
# the crossovers and the proposed thresholds of src/collectives/selection.cc
# (docs/performance.md, "Algorithm choice per transport"). Builds nothing. On a 2-core
# machine about 3 minutes with the defaults, 10 with --rounds 5 --iters-scale 2 (what
# selection.cc's table came from); keep the machine otherwise idle (each run reports how
# busy it was; --wait-idle S waits for a quiet second first).
# Usage: bash scripts/sweep_algorithms.sh BUILD_DIR [algo_sweep flags]
#   e.g. bash scripts/sweep_algorithms.sh build --rounds 5 --iters-scale 2 --wait-idle 300
#        bash scripts/sweep_algorithms.sh build --transports shm --worlds 2 --raw shm2.txt
#   flags: --transports tcp,shm --worlds 2,3,4 --min-bytes 8 --max-bytes 64M --factor 2
#          --rounds 3 --iters-scale 1 --margin 0.1 --wait-idle 0 --raw FILE --from-raw FILE
#          (tests/collectives/algo_sweep.cc)
set -euo pipefail
if [[ $# -lt 1 || ! -d $1 ]]; then
  echo "usage: bash scripts/sweep_algorithms.sh BUILD_DIR [algo_sweep flags]" >&2
  exit 2
fi
sweep=$1/tests/collectives/algo_sweep
shift
if [[ ! -x $sweep ]]; then
  echo "sweep_algorithms.sh: no $sweep (cmake --build BUILD_DIR --target algo_sweep)" >&2
  exit 1
fi
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
unset TDIST_ALGO
exec "$sweep" "$@"
