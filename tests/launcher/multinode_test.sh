#!/usr/bin/env bash
# Multi-node tests of tdistrun: three "hosts" made of network namespaces (netns.sh), one
# tdistrun agent per host meeting at host 0's address (--rdzv-endpoint ADDR0:29400).
#
#   multinode_test.sh TDISTRUN BIN_DIR
#
# BIN_DIR holds launcher_env_worker, launcher_flaky_worker and launcher_elastic_worker. Scenarios: 3 nodes x 2
# workers and their environment; a node joining late (either way round); an elastic
# MIN:MAX range filled within the last call; a node SIGKILLed mid-job (its workers die
# with it, the others restart without it); a job-wide restart budget ending in a failure
# summary that names the worker; with --elastic, a node SIGKILLed mid-job left out while the
# other node's workers go on. After each, nothing may be left in the namespaces.
# Every tdistrun runs under `timeout`, so a hung rendezvous fails its scenario instead
# of the whole test. Exit status: 0 all passed, 77 skipped (netns.sh check says why),
# 1 a scenario failed (its PASS/FAIL line and the agents' stderr say which and why).
set -euo pipefail

if (($# != 2)); then
  echo "usage: $0 TDISTRUN BIN_DIR" >&2
  exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
netns="$here/netns.sh"
tdistrun=$(realpath "$1")
bin=$(realpath "$2")
for program in "$tdistrun" "$bin/launcher_env_worker" "$bin/launcher_flaky_worker" \
  "$bin/launcher_elastic_worker"; do
  [[ -x $program ]] || {
    echo "multinode_test: $program is not an executable (build it first)" >&2
    exit 1
  }
done

"$netns" check || exit $?

prefix="tdmn$$"
tmp=$(mktemp -d)
trap '"$netns" teardown "$prefix" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM HUP  # so that the EXIT trap runs on these too
"$netns" setup "$prefix" 3
addrs=()
for i in 0 1 2; do addrs+=("$("$netns" addr "$prefix" "$i")"); done
endpoint=("--rdzv-endpoint" "${addrs[0]}:29400" "--rdzv-id" "test" "--rdzv-timeout" "20")

failed=0  # scenarios that failed
problems=()  # what went wrong in the current scenario
agents=()  # pid of the `timeout` wrapping each host's tdistrun in the current scenario
scenario_dir=""

problem() { problems+=("$*"); }

# begin NAME: a fresh directory for the scenario's files and outputs.
begin() {
  problems=()
  agents=()
  scenario_dir="$tmp/$1"
  mkdir -p "$scenario_dir"
}

# launch HOST [VAR=VALUE...] -- TDISTRUN_ARGS...: tdistrun in HOST, in the background, its
# stdout and stderr in the scenario's node<HOST>.out/.err. `timeout` execs nothing itself,
# so the agent is its only child. TMPDIR keeps the run directories an agent leaves behind
# (after a failure or a SIGKILL) inside this test's directory.
launch() {
  local host=$1 vars=()
  shift
  while [[ $1 != -- ]]; do
    vars+=("$1")
    shift
  done
  shift
  timeout -k 5 30 env TMPDIR="$scenario_dir" "${vars[@]}" \
    "$netns" exec "$prefix" "$host" "$tdistrun" "$@" \
    >"$scenario_dir/node$host.out" 2>"$scenario_dir/node$host.err" &
  agents[host]=$!
}

# expect_exit HOST CODE: waits for HOST's tdistrun, which must exit with CODE (124: it ran
# into the timeout).
expect_exit() {
  local rc=0
  wait "${agents[$1]}" 2>/dev/null || rc=$?  # bash would say "Killed" for a SIGKILLed one
  [[ $rc == "$2" ]] || problem "tdistrun on host $1 exited with $rc, expected $2"
}

# value FILE NAME: NAME's value in an env_worker report.
value() { sed -n "s/^$2=//p" "$1"; }

# reports DIR...: the env_worker reports under the given directories, one a line.
reports() { find "$@" -name 'rank_*.env' 2>/dev/null | sort || true; }

# True while process $1 exists and is not a zombie.
alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  [[ $(awk '{print $3}' <<<"${stat##*)}") != Z ]]
}

# Nothing of the scenario may outlive it: every namespace must empty within 3 s (workers
# killed by PDEATHSIG go a moment after their agent). Leftovers are reported and killed,
# so the next scenario starts clean.
check_nothing_left() {
  local line
  while IFS= read -r line; do
    problem "left behind in $line"
  done < <("$netns" leftovers "$prefix" || true)
}

# end TITLE: the scenario's PASS/FAIL line; on failure, what went wrong and the agents'
# stderr.
end() {
  check_nothing_left
  if ((${#problems[@]} == 0)); then
    echo "multinode_test: PASS $1"
    return
  fi
  failed=$((failed + 1))
  echo "multinode_test: FAIL $1"
  printf '  %s\n' "${problems[@]}"
  local err
  for err in "$scenario_dir"/node*.err; do
    echo "  --- ${err##*/} (last 30 lines):"
    tail -n 30 "$err" | sed 's/^/    /'
  done
}

# check_reports WORLD NODES RESTART DIR...: the env_worker reports of one job whose host I
# wrote to DIR_I (left empty by a host not in the job): ranks 0..WORLD-1 once each, NODES
# group ranks, each host one group rank with consecutive local ranks, RANK = the ranks of
# lower group ranks + LOCAL_RANK, the same run id, MASTER_ADDR the address of the host of
# group rank 0, TORCHELASTIC_RESTART_COUNT RESTART.
check_reports() {
  local world=$1 nodes=$2 restart=$3
  shift 3
  local dirs=("$@") n
  n=$(reports "${dirs[@]}" | wc -l)
  ((n == world)) || problem "$n worker reports, expected $world"
  local host f group_of=() local_size=() master=() seen=" " numeric=1
  for host in "${!dirs[@]}"; do
    for f in $(reports "${dirs[host]}"); do
      local rank group lrank lsize
      rank=$(value "$f" RANK)
      group=$(value "$f" GROUP_RANK)
      lrank=$(value "$f" LOCAL_RANK)
      lsize=$(value "$f" LOCAL_WORLD_SIZE)
      if ! [[ "$rank $group $lrank $lsize" =~ ^[0-9]+\ [0-9]+\ [0-9]+\ [0-9]+$ ]]; then
        problem "${f#"$tmp"/}: RANK '$rank' GROUP_RANK '$group' LOCAL_RANK '$lrank'" \
          "LOCAL_WORLD_SIZE '$lsize' are not all numbers"
        numeric=0
        continue
      fi
      [[ $seen != *" $rank "* ]] || problem "rank $rank reported twice"
      seen+="$rank "
      [[ ${group_of[host]:-$group} == "$group" ]] || problem "host $host has two group ranks"
      group_of[host]=$group
      local_size[host]=$lsize
      ((lsize == world / nodes && lrank < lsize)) ||
        problem "rank $rank: LOCAL_RANK $lrank of LOCAL_WORLD_SIZE $lsize"
      [[ $(value "$f" WORLD_SIZE) == "$world" ]] ||
        problem "rank $rank: WORLD_SIZE $(value "$f" WORLD_SIZE), expected $world"
      [[ $(value "$f" GROUP_WORLD_SIZE) == "$nodes" ]] ||
        problem "rank $rank: GROUP_WORLD_SIZE $(value "$f" GROUP_WORLD_SIZE), expected $nodes"
      [[ $(value "$f" TORCHELASTIC_RUN_ID) == test ]] ||
        problem "rank $rank: TORCHELASTIC_RUN_ID '$(value "$f" TORCHELASTIC_RUN_ID)'"
      [[ $(value "$f" TORCHELASTIC_RESTART_COUNT) == "$restart" ]] ||
        problem "rank $rank: TORCHELASTIC_RESTART_COUNT $(value "$f" TORCHELASTIC_RESTART_COUNT)"
      master+=("$(value "$f" MASTER_ADDR)")
    done
  done
  ((numeric)) || return 0
  local groups
  groups=$(printf '%s\n' "${group_of[@]}" | sort -n | tr '\n' ' ')
  [[ $groups == "$(seq -s ' ' 0 $((nodes - 1))) " ]] ||
    problem "group ranks '$groups', expected 0..$((nodes - 1)) once each"
  for host in "${!group_of[@]}"; do
    local offset=0 other
    for other in "${!group_of[@]}"; do
      if ((group_of[other] < group_of[host])); then offset=$((offset + local_size[other])); fi
    done
    for f in $(reports "${dirs[host]}"); do
      (($(value "$f" RANK) == offset + $(value "$f" LOCAL_RANK))) ||
        problem "host $host: RANK $(value "$f" RANK) for LOCAL_RANK $(value "$f" LOCAL_RANK)" \
          "with $offset ranks on lower group ranks"
    done
    ((group_of[host] == 0)) || continue
    [[ $(printf '%s\n' "${master[@]}" | sort -u) == "${addrs[host]}" ]] ||
      problem "MASTER_ADDR '$(printf '%s ' "${master[@]}")', expected ${addrs[host]}" \
        "(host $host, group rank 0)"
  done
}

# Scenario 1: 3 nodes x 2 workers, started together; the workers join one process group
# of the `auto` backend (shared memory between the two workers of a node, TCP between
# nodes).
begin s1
for i in 0 1 2; do
  mkdir -p "$scenario_dir/env$i"
  launch "$i" "ENV_WORKER_OUT_DIR=$scenario_dir/env$i" TDIST_TEST_BACKEND=auto -- \
    --nnodes 3 --nproc-per-node 2 "${endpoint[@]}" "$bin/launcher_env_worker" --init
done
for i in 0 1 2; do expect_exit "$i" 0; done
check_reports 6 3 0 "$scenario_dir"/env{0,1,2}
end "1: 3 nodes x 2 workers agree on ranks 0..5, group ranks, run id and master; auto backend"

# Scenario 2: a node joining 3 s after the host, then the host coming 2 s after the other
# node (which must keep trying to reach the store).
for order in "0 1" "1 0"; do
  read -r first second <<<"$order"
  begin "s2_$first$second"
  mkdir -p "$scenario_dir"/env{0,1}
  launch "$first" "ENV_WORKER_OUT_DIR=$scenario_dir/env$first" -- \
    --nnodes 2 --nproc-per-node 2 "${endpoint[@]}" "$bin/launcher_env_worker" --init
  sleep $((first == 0 ? 3 : 2))
  launch "$second" "ENV_WORKER_OUT_DIR=$scenario_dir/env$second" -- \
    --nnodes 2 --nproc-per-node 2 "${endpoint[@]}" "$bin/launcher_env_worker" --init
  expect_exit 0 0
  expect_exit 1 0
  check_reports 4 2 0 "$scenario_dir"/env{0,1}
  end "2: host $second starts $((first == 0 ? 3 : 2)) s after host $first; both succeed"
done

# Scenario 3: --nnodes 2:3; the third node arrives 1 s after the others, within the 2 s
# last call that began when the second arrived, so the job runs on 3 nodes.
begin s3
for i in 0 1 2; do
  if ((i == 2)); then sleep 1; fi
  mkdir -p "$scenario_dir/env$i"
  launch "$i" "ENV_WORKER_OUT_DIR=$scenario_dir/env$i" -- --nnodes 2:3 \
    --rdzv-conf last_call_timeout=2 --nproc-per-node 2 "${endpoint[@]}" \
    "$bin/launcher_env_worker" --init
done
for i in 0 1 2; do expect_exit "$i" 0; done
check_reports 6 3 0 "$scenario_dir"/env{0,1,2}
end "3: --nnodes 2:3 admits a third node within the last call (world 6)"

# Scenario 4: 3 nodes (--nnodes 2:3 --max-restarts 1) whose first-round workers hang; host
# 2's agent is SIGKILLed: its workers die with it (PDEATHSIG), hosts 0 and 1 see its
# heartbeat stop and restart without it; the second round's workers report a world of 2
# nodes and join one process group.
begin s4
cat >"$scenario_dir/worker.sh" <<'EOF'
#!/bin/sh
# Round 0 hangs (its pid in $FLAKY_PID_DIR); after a restart, report and join the job.
if [ "${TORCHELASTIC_RESTART_COUNT:-0}" -ge 1 ]; then
  exec "$MN_BIN/launcher_env_worker" --init
fi
exec "$MN_BIN/launcher_flaky_worker" --hang
EOF
chmod +x "$scenario_dir/worker.sh"
for i in 0 1 2; do
  mkdir -p "$scenario_dir"/{env,pids}$i
  launch "$i" "MN_BIN=$bin" "ENV_WORKER_OUT_DIR=$scenario_dir/env$i" \
    "FLAKY_PID_DIR=$scenario_dir/pids$i" TDIST_AGENT_HEARTBEAT_TIMEOUT=3 -- \
    --nnodes 2:3 --rdzv-conf last_call_timeout=1 --max-restarts 1 --nproc-per-node 2 \
    "${endpoint[@]}" --no-python "$scenario_dir/worker.sh"
done
for _ in {1..100}; do
  (($(find "$scenario_dir"/pids{0,1,2} -name '*.pid' | wc -l) == 6)) && break
  sleep 0.1
done
victims=$(cat "$scenario_dir"/pids2/*.pid 2>/dev/null || true)
if (($(wc -w <<<"$victims") != 2)); then
  problem "host 2 did not start its 2 workers within 10 s (pid files: $victims)"
fi
for victim in $victims; do
  alive "$victim" || problem "worker $victim of host 2 is not running before its agent is killed"
done
agent2=$(pgrep -P "${agents[2]}" || true)
if [[ $(cat "/proc/$agent2/comm" 2>/dev/null) == tdistrun ]]; then
  kill -KILL "$agent2"
  expect_exit 2 137
  for victim in $victims; do
    for _ in {1..30}; do
      alive "$victim" || break
      sleep 0.1
    done
    if alive "$victim"; then problem "worker $victim of host 2 outlived its SIGKILLed agent"; fi
  done
else
  problem "no tdistrun under timeout pid ${agents[2]} in host 2"
fi
expect_exit 0 0
expect_exit 1 0
check_reports 4 2 1 "$scenario_dir"/env{0,1,2}
for i in 0 1; do
  grep -q "restarting the workers (restart 1 of 1)" "$scenario_dir/node$i.err" ||
    problem "host $i did not say it restarted after host 2 died"
done
end "4: a SIGKILLed node's workers die; the other 2 nodes restart without it (world 4)"

# Scenario 5: the restart budget is the job's: rank 2 (host 1, local rank 0) fails in
# rounds 0 and 1; with --max-restarts 1 the job restarts once, then both agents give up
# with the worker's exit code and a summary naming rank 2 on node rank 1.
begin s5
for i in 0 1; do
  launch "$i" -- --nnodes 2 --node-rank "$i" --max-restarts 1 --nproc-per-node 2 \
    "${endpoint[@]}" "$bin/launcher_flaky_worker" --fail-attempts 2 --fail-rank 2
done
for i in 0 1; do
  expect_exit "$i" 3
  err="$scenario_dir/node$i.err"
  (($(grep -c "restarting the workers" "$err") == 1)) ||
    problem "host $i: 'restarting the workers' $(grep -c "restarting the workers" "$err") times"
  grep -q "restarts used: 1 of 1" "$err" || problem "host $i: no 'restarts used: 1 of 1'"
  grep -Eq "^  rank 2 \(local rank 0\) on .* \(node rank 1\), round 1: exit code 3$" "$err" ||
    problem "host $i: the summary does not name rank 2 on node rank 1 (round 1, exit code 3)"
done
(($(grep -c "worker rank 2 (local rank 0) failed with exit code 3" "$scenario_dir/node1.err") \
  == 2)) || problem "host 1 did not see rank 2 fail exactly twice"
end "5: --max-restarts 1 is the job's: one restart, then both nodes fail naming rank 2"

# Scenario 7: --elastic over 2 nodes x 2 workers (launcher_elastic_worker: steps of an
# all_reduce and the commit vote); host 1's agent is SIGKILLed mid-job, its workers die with
# it; host 0's agent sees its heartbeat stop, marks ranks 2 and 3 gone, and its workers go on
# as a group of 2 (generation 1) and finish: the job succeeds without a restart.
begin s7
for i in 0 1; do
  mkdir -p "$scenario_dir/pids$i"
  launch "$i" "ELASTIC_PID_DIR=$scenario_dir/pids$i" TDIST_AGENT_HEARTBEAT_TIMEOUT=2 \
    TDIST_ELASTIC_JOIN_WINDOW=20 -- --nnodes 2 --node-rank "$i" --nproc-per-node 2 --elastic \
    "${endpoint[@]}" "$bin/launcher_elastic_worker" 100 50 auto
done
for _ in {1..100}; do
  (($(find "$scenario_dir"/pids{0,1} -name '*.pid' | wc -l) == 4)) && break
  sleep 0.1
done
sleep 1  # some steps together first
agent1=$(pgrep -P "${agents[1]}" || true)
if [[ $(cat "/proc/$agent1/comm" 2>/dev/null) == tdistrun ]]; then
  kill -KILL "$agent1"
  expect_exit 1 137
else
  problem "no tdistrun under timeout pid ${agents[1]} in host 1"
fi
expect_exit 0 0
grep -q "elastic_worker: steps 100 world 2 generation 1" "$scenario_dir/node0.out" ||
  problem "host 0's workers did not finish as a group of 2 in generation 1: $(cat "$scenario_dir/node0.out")"
grep -q "the job goes on without ranks 2..3" "$scenario_dir/node0.err" ||
  problem "host 0 did not say it goes on without ranks 2..3"
end "7: --elastic: a SIGKILLed node's ranks are left out; the other node's workers finish as 2"

# Scenario 6: the namespaces go away with nothing in them.
begin s6
"$netns" teardown "$prefix" || problem "teardown failed"
if ip netns list | grep -q "^$prefix-"; then
  problem "namespaces left: $(ip netns list | grep "^$prefix-" | tr '\n' ' ')"
fi
if ((${#problems[@]} == 0)); then
  echo "multinode_test: PASS 6: no namespace of this test remains"
else
  failed=$((failed + 1))
  echo "multinode_test: FAIL 6: ${problems[*]}"
fi

if ((failed > 0)); then
  echo "multinode_test: $failed scenario(s) FAILED"
  exit 1
fi
echo "multinode_test: all scenarios passed"
