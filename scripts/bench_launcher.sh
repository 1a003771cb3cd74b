#!/usr/bin/env bash
# Launcher startup benchmark: wall time from starting the launcher to every worker having
# done init_process_group and a barrier and exited, for one standalone node of N workers.
#   a  tdistrun --standalone --nproc-per-node N  launcher_init_barrier_worker (tdist, C++)
#   b  torchrun, the same C++ worker (--no_python)
#   c  torchrun, tests/launcher/py/init_barrier.py (torch.distributed + gloo, as run today)
#   d  tdistrun, the same init_barrier.py
# Rounds are interleaved (a b c d, a b c d, ...) so drifting load hits every variant
# alike; each variant's median and minimum are reported, then the ratios a/b, a/c and d/c
# of the medians. torchrun is /usr/bin/python3's (python3-torch), run through
# tests/launcher/py/torchrun.py, which mends torch 1.13's Std lookup on Python 3.11 and
# otherwise leaves torchrun as it is (its default --monitor_interval 5 included).
# Variants a and d are skipped, with a note, until BUILD_DIR has tools/tdistrun.
# A run that takes over 300 s is ended (SIGTERM to the launcher's process group) and fails.
# Any failed run prints its output and ends the benchmark with status 1.
# Needs: a build with the launcher_init_barrier_worker target, python3-torch.
# Usage: bash scripts/bench_launcher.sh [BUILD_DIR] [N] [R]   (defaults: build 8 5)
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${1:-build}")
nproc=${2:-8}
rounds=${3:-5}
[[ $nproc =~ ^[1-9][0-9]*$ && $rounds =~ ^[1-9][0-9]*$ ]] || {
  echo "usage: bash scripts/bench_launcher.sh [BUILD_DIR] [N] [R]" >&2
  exit 2
}
python=/usr/bin/python3
worker="$build/tests/launcher/launcher_init_barrier_worker"
tdistrun="$build/tools/tdistrun"
torchrun=("$python" "$PWD/tests/launcher/py/torchrun.py")
script="$PWD/tests/launcher/py/init_barrier.py"
[[ -x $worker ]] || {
  echo "bench_launcher: $worker not found; build the target launcher_init_barrier_worker" >&2
  exit 1
}

export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 PYTHON=$python
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export TMPDIR=$tmp # torchrun leaves its log directories behind; they go with $tmp

launch_a() { timeout 300 "$tdistrun" --standalone --nproc-per-node "$nproc" "$worker"; }
launch_b() {
  timeout 300 "${torchrun[@]}" --standalone --nproc_per_node "$nproc" --no_python "$worker"
}
launch_c() { timeout 300 "${torchrun[@]}" --standalone --nproc_per_node "$nproc" "$script"; }
launch_d() { timeout 300 "$tdistrun" --standalone --nproc-per-node "$nproc" "$script"; }
declare -A what=([a]="tdistrun, C++ worker" [b]="torchrun, C++ worker"
  [c]="torchrun, init_barrier.py" [d]="tdistrun, init_barrier.py")
if [[ -x $tdistrun ]]; then
  variants=(a b c d)
else
  echo "# tdistrun not built ($tdistrun): variants a and d skipped"
  variants=(b c)
fi

# Milliseconds of one run of variant $1, appended to $tmp/$1.ms.
run_once() {
  local start end
  start=$(date +%s%N)
  if ! "launch_$1" >"$tmp/out" 2>&1; then
    echo "bench_launcher: variant $1 (${what[$1]}) failed:" >&2
    tail -n 40 "$tmp/out" >&2
    exit 1
  fi
  end=$(date +%s%N)
  echo $(((end - start) / 1000000)) >>"$tmp/$1.ms"
}

for ((round = 1; round <= rounds; round++)); do
  for v in "${variants[@]}"; do run_once "$v"; done
done

median() {
  sort -n "$1" | awk '{x[NR] = $1}
    END {print NR % 2 ? x[(NR + 1) / 2] : (x[NR / 2] + x[NR / 2 + 1]) / 2}'
}

echo "## launcher startup, $nproc workers, init_process_group + barrier, $rounds rounds"
printf '%-3s %10s %10s  %s\n' "" median_ms min_ms variant
declare -A med
for v in "${variants[@]}"; do
  med[$v]=$(median "$tmp/$v.ms")
  printf '%-3s %10s %10s  %s\n' "$v" "${med[$v]}" "$(sort -n "$tmp/$v.ms" | head -n1)" \
    "${what[$v]}"
done
if [[ -n ${med[a]:-} ]]; then
  awk -v a="${med[a]}" -v b="${med[b]}" -v c="${med[c]}" \
    -v d="${med[d]}" 'BEGIN {printf "a/b %.3f   a/c %.3f (goal: under 0.10)   d/c %.3f\n",
                             a / b, a / c, d / c}'
fi
