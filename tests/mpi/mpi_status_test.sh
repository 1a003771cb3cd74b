#!/usr/bin/env bash
# tdist-status against a job started by mpirun on the mpi backend: 3 ranks of hang_worker
# (tests/pg) in its "sleep" scenario, rank 1 computing while ranks 0 and 2 wait in
# all_reduce #1, the store at MASTER_ADDR:MASTER_PORT (a free port picked here). While
# they wait, tdist-status must get all three answers and name rank 1 as the one they wait
# for; then the job is released and must end with status 0.
#
#   mpi_status_test.sh HANG_WORKER TDIST_STATUS MPIRUN [MPIRUN OPTIONS...]
#
# Every wait is bounded; mpirun runs under `timeout`. Exit status: 0 passed, 1 failed.
set -euo pipefail

if (($# < 3)); then
  echo "usage: $0 HANG_WORKER TDIST_STATUS MPIRUN [OPTIONS...]" >&2
  exit 2
fi
worker=$1
status_bin=$2
shift 2
dir=$(mktemp -d)
mpirun_pid=
cleanup() {
  touch "$dir/release"
  if [[ -n $mpirun_pid ]]; then
    kill "$mpirun_pid" 2>/dev/null || true
    wait "$mpirun_pid" 2>/dev/null || true
  fi
  rm -rf "$dir"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  for f in "$dir"/log* "$dir"/error*; do
    [[ -f $f ]] && { echo "--- $f" >&2; cat "$f" >&2; }
  done
  exit 1
}

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout 60 "$@" -np 3 -x MASTER_ADDR -x MASTER_PORT \
  -x OMP_NUM_THREADS=1 "$worker" sleep "$dir" mpi 60000 &
mpirun_pid=$!

for _ in $(seq 300); do
  [[ -f $dir/at0 && -f $dir/at2 ]] && break
  sleep 0.1
done
[[ -f $dir/at0 && -f $dir/at2 ]] || fail "ranks 0 and 2 did not reach all_reduce #1 within 30 s"

out=$("$status_bin" "127.0.0.1:$port" 2>&1) || fail "tdist-status exited with $?: $out"
echo "$out"
for want in "job at 127.0.0.1:$port: 3 ranks, 3 answered" \
            "in all_reduce #1 f32 x4 sum of group default (mpi)" \
            "waiting for rank 1 (computing; last: all_reduce #0 f32 x4 sum)" \
            "rank 1 ("; do
  [[ $out == *"$want"* ]] || fail "tdist-status does not say '$want'"
done

touch "$dir/release"
code=0
wait "$mpirun_pid" || code=$?
mpirun_pid=
((code == 0)) || fail "the job ended with status $code"
echo "PASS: tdist-status names the rank an mpi job waits for"
