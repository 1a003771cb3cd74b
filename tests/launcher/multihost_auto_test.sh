#!/usr/bin/env bash
# Multi-host tests of the `auto` backend: "hosts" made of network namespaces (netns.sh),
# so ranks on one host share memory and ranks on different hosts reach each other only
# over the bridge. The test holds whatever `auto` does inside and between hosts.
#
#   multihost_auto_test.sh TDISTRUN BIN_DIR
#
# BIN_DIR holds launcher_collectives_worker. For each layout, hosts x ranks per host of
# 2x2, 3x2 and 1+3 (one host with 1 rank, one with 3):
#  - check: one tdistrun agent per host (--node-rank = the host's index) starts the
#    host's ranks; every rank runs every collective over `auto` and checks each result
#    against its reference (collectives_worker.cc); every rank must say so and exit 0;
#    the job is authenticated: every agent gets the same TDIST_AUTH_TOKEN_FILE, and none
#    may warn that the job has no token;
#  - kill: the ranks are started directly in their hosts (env://, no agent that could
#    stop them first); the last rank, on the last host, SIGKILLs itself while the others
#    wait in an all_reduce that needs it; each must get PeerError within 5 s of the kill
#    (the ranks share a TDIST_AUTH_TOKEN).
# With mutual TLS (certificates made here with the openssl command; skipped without it):
#  - tls: the 2x2 check again, every agent and rank with its host's certificate from one
#    CA besides the token;
#  - stranger: host 1's agent presents a certificate from another CA; host 0's store
#    refuses it, it exits non-zero at once with an error about its certificate, and no
#    worker starts.
# After each scenario nothing may be left in the namespaces. Every process runs under
# `timeout`, so a hang fails its scenario in seconds, not the whole test.
# Exit status: 0 all passed, 77 skipped (netns.sh check says why: not root, no `ip`, no
# namespaces or veth pairs), 1 a scenario failed (its FAIL line and the ranks' stderr
# say which and why).
set -euo pipefail

if (($# != 2)); then
  echo "usage: $0 TDISTRUN BIN_DIR" >&2
  exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
netns="$here/netns.sh"
tdistrun=$(realpath "$1")
worker=$(realpath "$2")/launcher_collectives_worker
for program in "$tdistrun" "$worker"; do
  [[ -x $program ]] || {
    echo "multihost_auto_test: $program is not an executable (build it first)" >&2
    exit 1
  }
done

"$netns" check || exit $?

prefix="tdah$$"
tmp=$(mktemp -d)
trap '"$netns" teardown "$prefix" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM HUP  # so that the EXIT trap runs on these too
nhosts=3
"$netns" setup "$prefix" "$nhosts"
addrs=()
for ((i = 0; i < nhosts; i++)); do addrs+=("$("$netns" addr "$prefix" "$i")"); done
token_file="$tmp/token"
(umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$token_file")

failed=0     # scenarios that failed
problems=()  # what went wrong in the current scenario
dir=""       # the current scenario's files

problem() { problems+=("$*"); }

begin() {
  problems=()
  dir="$tmp/$1"
  mkdir -p "$dir"
}

# Nothing of the scenario may outlive it: every namespace must be empty within 3 s.
check_nothing_left() {
  local line
  while IFS= read -r line; do
    problem "left behind in $line"
  done < <("$netns" leftovers "$prefix" || true)
}

# end TITLE: the scenario's PASS/FAIL line; on failure what went wrong and the stderr of
# every process.
end() {
  check_nothing_left
  if ((${#problems[@]} == 0)); then
    echo "multihost_auto_test: PASS $1"
    return
  fi
  failed=$((failed + 1))
  echo "multihost_auto_test: FAIL $1"
  printf '  %s\n' "${problems[@]}"
  local err
  for err in "$dir"/*.err; do
    [[ -s $err ]] || continue
    echo "  --- ${err##*/} (last 20 lines):"
    tail -n 20 "$err" | sed 's/^/    /'
  done
}

# check LAYOUT...: one agent per host, host I starting LAYOUT[I] ranks, all checking every
# collective.
check() {
  local layout=("$@") nnodes=$# world=0 i n pids=() rc
  for n in "${layout[@]}"; do world=$((world + n)); done
  local title="check ${layout[*]}: every collective over auto is right on $nnodes hosts"
  title+=" with ${layout[*]} ranks"
  begin "check_${layout[*]// /_}"
  for ((i = 0; i < nnodes; i++)); do
    timeout -k 5 40 env TMPDIR="$dir" TDIST_TEST_BACKEND=auto TDIST_AUTH_TOKEN_FILE="$token_file" \
      "$netns" exec "$prefix" "$i" "$tdistrun" --nnodes "$nnodes" --node-rank "$i" \
      --nproc-per-node "${layout[i]}" --rdzv-endpoint "${addrs[0]}:29400" \
      --rdzv-id "check${layout[*]// /}" --rdzv-timeout 20 --no-python "$worker" check \
      >"$dir/host$i.out" 2>"$dir/host$i.err" &
    pids+=($!)
  done
  for ((i = 0; i < nnodes; i++)); do
    rc=0
    wait "${pids[i]}" 2>/dev/null || rc=$?
    ((rc == 0)) || problem "tdistrun on host $i exited with $rc, expected 0"
  done
  local passed
  passed=$(cat "$dir"/host*.out | grep -Ec "checks passed \(backend auto, world $world\)" || true)
  ((passed == world)) || problem "$passed of $world ranks reported their checks passed"
  ! grep -l "no authentication token" "$dir"/host*.err >/dev/null ||
    problem "an agent warned that the job has no authentication token"
  end "$title"
}

# kill LAYOUT...: the ranks started directly (host I runs LAYOUT[I] consecutive ranks);
# the last rank SIGKILLs itself; every other must see PeerError within 5 s.
kill_test() {
  local layout=("$@") nnodes=$# world=0 i l n rank=0 pids=() rc port=$((29500 + kill_round))
  kill_round=$((kill_round + 1))
  for n in "${layout[@]}"; do world=$((world + n)); done
  local victim=$((world - 1))
  begin "kill_${layout[*]// /_}"
  for ((i = 0; i < nnodes; i++)); do
    for ((l = 0; l < layout[i]; l++)); do
      # Under a shell that exits with the status, so bash does not report the victim as
      # "Killed" on its own.
      bash -c '"$@"; exit $?' rank"$rank" \
        timeout -k 5 20 env RANK="$rank" WORLD_SIZE="$world" LOCAL_RANK="$l" \
        LOCAL_WORLD_SIZE="${layout[i]}" GROUP_RANK="$i" MASTER_ADDR="${addrs[0]}" \
        MASTER_PORT="$port" TDIST_TEST_BACKEND=auto TDIST_AUTH_TOKEN="$(cat "$token_file")" \
        "$netns" exec "$prefix" "$i" "$worker" kill "$victim" "$dir" \
        >"$dir/rank$rank.out" 2>"$dir/rank$rank.err" &
      pids+=($!)
      rank=$((rank + 1))
    done
  done
  for ((rank = 0; rank < world; rank++)); do
    rc=0
    wait "${pids[rank]}" || rc=$?
    if ((rank == victim)); then
      ((rc == 137)) || problem "rank $rank (the victim) exited with $rc, expected 137 (SIGKILL)"
    elif ((rc != 0)); then
      problem "rank $rank exited with $rc, expected 0 (PeerError within 5 s)"
    elif ! grep -q "^rank $rank: PeerError [0-9]* ms after the kill" "$dir/rank$rank.out"; then
      problem "rank $rank did not report its PeerError"
    fi
  done
  local slowest
  slowest=$(cat "$dir"/rank*.out | sed -n 's/.*PeerError \([0-9]*\) ms after the kill.*/\1/p' |
    sort -n | tail -n 1)
  end "kill ${layout[*]}: SIGKILL of rank $victim on host $((nnodes - 1)) is PeerError on the \
$((world - 1)) others within 5 s (slowest ${slowest:-?} ms)"
}

# make_pki: a CA (ca.pem), a certificate per host signed by it (hostI.pem, hostI.key), and
# a stranger's certificate from another CA (stranger.pem, stranger.key), under $tmp/pki.
make_pki() {
  local pki="$tmp/pki" name
  mkdir -p "$pki"
  for name in ca other_ca; do
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
      -subj "/CN=tdist test $name" -keyout "$pki/$name.key" -out "$pki/$name.pem" 2>/dev/null
  done
  for name in host0 host1 host2 stranger; do
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$name" \
      -keyout "$pki/$name.key" -out "$pki/$name.csr" 2>/dev/null
    local ca=ca
    [[ $name == stranger ]] && ca=other_ca
    openssl x509 -req -in "$pki/$name.csr" -CA "$pki/$ca.pem" -CAkey "$pki/$ca.key" \
      -CAcreateserial -days 2 -out "$pki/$name.pem" 2>/dev/null
  done
  chmod 600 "$pki"/*.key
}

# tls_env HOST_FILE_STEM: the settings for a process holding that certificate.
tls_env() {
  echo "TDIST_TLS_CERT=$tmp/pki/$1.pem TDIST_TLS_KEY=$tmp/pki/$1.key TDIST_TLS_CA=$tmp/pki/ca.pem"
}

# tls_check: the 2x2 check with every agent (and so every rank) under mutual TLS.
tls_check() {
  local nnodes=2 i pids=() rc
  begin tls_check
  for ((i = 0; i < nnodes; i++)); do
    # shellcheck disable=SC2046  # tls_env's words are separate settings
    timeout -k 5 40 env TMPDIR="$dir" TDIST_TEST_BACKEND=auto TDIST_AUTH_TOKEN_FILE="$token_file" \
      $(tls_env "host$i") "$netns" exec "$prefix" "$i" "$tdistrun" --nnodes "$nnodes" \
      --node-rank "$i" --nproc-per-node 2 --rdzv-endpoint "${addrs[0]}:29400" \
      --rdzv-id tlscheck --rdzv-timeout 20 --no-python "$worker" check \
      >"$dir/host$i.out" 2>"$dir/host$i.err" &
    pids+=($!)
  done
  for ((i = 0; i < nnodes; i++)); do
    rc=0
    wait "${pids[i]}" 2>/dev/null || rc=$?
    ((rc == 0)) || problem "tdistrun on host $i exited with $rc, expected 0"
  done
  local passed
  passed=$(cat "$dir"/host*.out | grep -Ec "checks passed \(backend auto, world 4\)" || true)
  ((passed == 4)) || problem "$passed of 4 ranks reported their checks passed"
  end "tls: every collective over auto is right on 2 hosts with 2 ranks each under mutual TLS"
}

# stranger: like intruder, with the right token but a certificate from another CA.
stranger_test() {
  local pids=() rc start elapsed
  begin stranger
  start=$(date +%s)
  # shellcheck disable=SC2046
  timeout -k 5 30 env TMPDIR="$dir" TDIST_AUTH_TOKEN_FILE="$token_file" $(tls_env host0) \
    "$netns" exec "$prefix" 0 "$tdistrun" --nnodes 2 --node-rank 0 --nproc-per-node 1 \
    --rdzv-endpoint "${addrs[0]}:29400" --rdzv-id stranger --rdzv-timeout 4 --no-python \
    "$worker" check >"$dir/host0.out" 2>"$dir/host0.err" &
  pids+=($!)
  sleep 0.5
  rc=0
  # shellcheck disable=SC2046
  timeout -k 5 30 env TMPDIR="$dir" TDIST_AUTH_TOKEN_FILE="$token_file" $(tls_env stranger) \
    "$netns" exec "$prefix" 1 "$tdistrun" --nnodes 2 --node-rank 1 --nproc-per-node 1 \
    --rdzv-endpoint "${addrs[0]}:29400" --rdzv-id stranger --rdzv-timeout 4 --no-python \
    "$worker" check >"$dir/host1.out" 2>"$dir/host1.err" || rc=$?
  elapsed=$(($(date +%s) - start))
  ((rc != 0)) || problem "the stranger's agent exited 0"
  grep -q "certificate" "$dir/host1.err" ||
    problem "the stranger's error does not name its certificate"
  ((elapsed < 4)) || problem "the stranger's agent took ${elapsed} s to fail (retried?)"
  rc=0
  wait "${pids[0]}" 2>/dev/null || rc=$?
  ((rc != 0)) || problem "host 0's agent exited 0 without its second node"
  ! grep -q "checks passed" "$dir"/host*.out || problem "a worker ran"
  end "stranger: an agent whose certificate another CA signed is refused at once"
}

# intruder: host 1's agent has another token than host 0's; it is refused by host 0's
# store with AuthError and exits non-zero at once, and no worker starts anywhere.
intruder_test() {
  local pids=() rc start elapsed
  begin intruder
  start=$(date +%s)
  timeout -k 5 30 env TMPDIR="$dir" TDIST_AUTH_TOKEN_FILE="$token_file" \
    "$netns" exec "$prefix" 0 "$tdistrun" --nnodes 2 --node-rank 0 --nproc-per-node 1 \
    --rdzv-endpoint "${addrs[0]}:29400" --rdzv-id intruder --rdzv-timeout 4 --no-python \
    "$worker" check >"$dir/host0.out" 2>"$dir/host0.err" &
  pids+=($!)
  sleep 0.5
  rc=0
  timeout -k 5 30 env TMPDIR="$dir" TDIST_AUTH_TOKEN=not-the-token \
    "$netns" exec "$prefix" 1 "$tdistrun" --nnodes 2 --node-rank 1 --nproc-per-node 1 \
    --rdzv-endpoint "${addrs[0]}:29400" --rdzv-id intruder --rdzv-timeout 4 --no-python \
    "$worker" check >"$dir/host1.out" 2>"$dir/host1.err" || rc=$?
  elapsed=$(($(date +%s) - start))
  ((rc != 0)) || problem "the intruding agent exited 0"
  grep -q "authentication token" "$dir/host1.err" ||
    problem "the intruding agent's error does not name the authentication token"
  ((elapsed < 4)) || problem "the intruding agent took ${elapsed} s to fail (retried?)"
  rc=0
  wait "${pids[0]}" 2>/dev/null || rc=$?
  ((rc != 0)) || problem "host 0's agent exited 0 without its second node"
  ! grep -q "checks passed" "$dir"/host*.out || problem "a worker ran"
  end "intruder: an agent with another token is refused at once"
}

intruder_test
if command -v openssl >/dev/null; then
  make_pki
  tls_check
  stranger_test
else
  echo "multihost_auto_test: no openssl command; the TLS scenarios are skipped"
fi
kill_round=0
for layout in "2 2" "2 2 2" "1 3"; do
  # shellcheck disable=SC2086  # the layout's words are its hosts
  check $layout
  # shellcheck disable=SC2086
  kill_test $layout
done

if ((failed > 0)); then
  echo "multihost_auto_test: $failed scenario(s) FAILED"
  exit 1
fi
echo "multihost_auto_test: all scenarios passed"
