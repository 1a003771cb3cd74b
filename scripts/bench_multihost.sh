#!/usr/bin/env bash
# all_reduce across "hosts" made of network namespaces (tests/launcher/netns.sh): HOSTS
# hosts x RANKS ranks each, one tdistrun agent per host, tdist-bench in every rank, once
# with the `auto` backend (shared memory inside a host, TCP between hosts, hierarchical
# algorithms) and once with `tcp` (flat TCP between every pair), side by side.
# RATE (e.g. 2gbit) shapes each host's link with tc's token bucket, as a real network between
# hosts is slower than memory inside one; without it the hosts' veth link copies as fast as
# shared memory, and only TCP's own overhead separates the two.
# BACKENDS (default "auto tcp:halving_doubling") picks the backends to run, in that order; an
# entry BACKEND:ALGO runs BACKEND with TDIST_ALGO=all_reduce=ALGO. A group that spans hosts
# runs the hierarchical algorithms on every backend (collectives/selection.cc), tcp's too,
# so flat TCP, as a job without tdist's hierarchy would run it, is tcp with the algorithm
# flat selection picks for 4 ranks over TCP from 32 KiB up: tcp:halving_doubling.
# Needs root and a build (scripts/build.sh). Usage:
#   [RATE=2gbit] [BACKENDS="auto tcp:halving_doubling"] bash scripts/bench_multihost.sh \
#     [HOSTS] [RANKS] [MIN_BYTES] [MAX_BYTES] [ITERS]
set -euo pipefail
cd "$(dirname "$0")/.."
hosts=${1:-2}
ranks=${2:-2}
min=${3:-64K}
max=${4:-64M}
iters=${5:-20}
build=${BUILD:-build}
netns=tests/launcher/netns.sh
tdistrun=$(realpath "$build/tools/tdistrun")
bench=$(realpath "$build/tools/tdist-bench")
"$netns" check
prefix="tdbm$$"
trap '"$netns" teardown "$prefix" >/dev/null 2>&1 || true' EXIT
"$netns" setup "$prefix" "$hosts"
master=$("$netns" addr "$prefix" 0)
if [[ -n ${RATE:-} ]]; then
  for ((i = 0; i < hosts; i++)); do
    ip netns exec "$prefix-$i" tc qdisc add dev eth0 root tbf rate "$RATE" burst 1mb latency 100ms
  done
fi
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
for entry in ${BACKENDS:-auto tcp:halving_doubling}; do
  backend=${entry%%:*}
  algo=""
  [[ $entry == *:* ]] && algo=all_reduce=${entry#*:}
  echo "## $backend${algo:+ ($algo)}, $hosts hosts x $ranks ranks${RATE:+, links shaped to $RATE}"
  pids=()
  for ((i = 0; i < hosts; i++)); do
    out=/dev/null
    ((i == 0)) && out=/dev/stdout
    # >> (append): reopening a redirected stdout with > would truncate it.
    TDIST_ALGO=$algo timeout 600 "$netns" exec "$prefix" "$i" "$tdistrun" --nnodes "$hosts" \
      --node-rank "$i" --nproc-per-node "$ranks" --rdzv-endpoint "$master:29400" \
      --rdzv-id "bench-$backend" --rdzv-timeout 60 --no-python "$bench" --backend "$backend" \
      --coll all_reduce -b "$min" -e "$max" -f 4 -n "$iters" -w 5 -c 1 >>"$out" &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid"; done
done
