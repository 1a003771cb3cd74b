#!/usr/bin/env bash
# Several "hosts" on one machine for multi-node launcher tests: network namespaces joined
# by veth pairs on a bridge. The bridge lives in a namespace of its own (PREFIX-hub), so
# the root namespace gets no interface, address or route, and nothing sent between the
# hosts can leave them: each host has only loopback and 10.X.Y.0/24, without a default
# route.
#
#   netns.sh check                 exit 0 when this can work here (root, `ip`, namespaces
#                                  and veth pairs can be made); else print one line why
#                                  and exit 77 (the ctest/automake "skipped" code)
#   netns.sh setup PREFIX N        hosts PREFIX-0 .. PREFIX-(N-1), host I at 10.X.Y.(I+1)
#                                  (X, Y derived from PREFIX), loopback up; on failure
#                                  removes what it made and exits 1
#   netns.sh exec PREFIX I CMD...  runs CMD in host I (exec: CMD keeps this pid)
#   netns.sh addr PREFIX I         prints host I's address
#   netns.sh leftovers PREFIX      waits up to 3 s for every host to be empty; prints one
#                                  line per host that is not ("host I: PID ARGS;...") and
#                                  kills what is left there; exit 0 when nothing was left
#   netns.sh teardown PREFIX       kills every process left in PREFIX's namespaces, then
#                                  removes them; idempotent, exit 0 when nothing is left
#
# PREFIX (letters, digits, '_', '-', up to 40) must be unique per test run: include $$.
set -euo pipefail

die() {
  echo "netns.sh: $*" >&2
  exit 1
}

check_prefix() {
  [[ $1 =~ ^[A-Za-z0-9_-]{1,40}$ ]] || die "bad PREFIX '$1' (letters, digits, _ and -, up to 40)"
}

check_index() {
  [[ $1 =~ ^[0-9]+$ ]] || die "bad host index '$1'"
}

# Our namespaces for PREFIX, one a line: hosts and the hub.
namespaces_of() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$1-(hub|[0-9]+)\$" || true
}

# 10.X.Y from PREFIX's checksum, X in 64..191, so runs with different prefixes differ.
subnet_of() {
  local sum
  sum=$(printf '%s' "$1" | cksum | cut -d' ' -f1)
  echo "10.$((64 + (sum >> 8) % 128)).$((sum % 256))"
}

cmd_check() {
  if [[ $(id -u) != 0 ]]; then
    echo "netns.sh: skipped: network namespaces need root"
    exit 77
  fi
  if ! command -v ip >/dev/null; then
    echo "netns.sh: skipped: 'ip' not found (apt-get install iproute2)"
    exit 77
  fi
  local probe="tdist-probe-$$"
  if ! ip netns add "$probe" 2>/dev/null; then
    echo "netns.sh: skipped: 'ip netns add' is not permitted here"
    exit 77
  fi
  local ok=0
  ip link add v0 netns "$probe" type veth peer name v1 netns "$probe" 2>/dev/null || ok=1
  ip netns del "$probe"
  if ((ok != 0)); then
    echo "netns.sh: skipped: veth pairs cannot be made here"
    exit 77
  fi
}

cmd_setup() {
  (($# == 2)) || die "usage: netns.sh setup PREFIX N"
  local prefix=$1 n=$2
  check_prefix "$prefix"
  if ! [[ $n =~ ^[0-9]+$ ]] || ((n < 1 || n > 250)); then
    die "N must be 1..250, got '$n'"
  fi
  [[ -z $(namespaces_of "$prefix") ]] || die "namespaces for '$prefix' exist already"
  trap 'cmd_teardown "$prefix"; die "setup of $prefix failed"' ERR
  local hub="$prefix-hub" net
  net=$(subnet_of "$prefix")
  ip netns add "$hub"
  ip -n "$hub" link add br0 type bridge
  ip -n "$hub" link set br0 up
  local i
  for ((i = 0; i < n; i++)); do
    ip netns add "$prefix-$i"
    ip link add eth0 netns "$prefix-$i" type veth peer name "v$i" netns "$hub"
    ip -n "$hub" link set "v$i" master br0 up
    ip -n "$prefix-$i" link set lo up
    ip -n "$prefix-$i" addr add "$net.$((i + 1))/24" dev eth0
    ip -n "$prefix-$i" link set eth0 up
  done
  trap - ERR
}

cmd_exec() {
  (($# >= 3)) || die "usage: netns.sh exec PREFIX I CMD..."
  check_prefix "$1"
  check_index "$2"
  local ns="$1-$2"
  shift 2
  ip netns list | awk '{print $1}' | grep -qx "$ns" || die "no namespace $ns (run setup first)"
  exec ip netns exec "$ns" "$@"
}

cmd_addr() {
  (($# == 2)) || die "usage: netns.sh addr PREFIX I"
  check_prefix "$1"
  check_index "$2"
  echo "$(subnet_of "$1").$(($2 + 1))"
}

cmd_teardown() {
  (($# == 1)) || die "usage: netns.sh teardown PREFIX"
  check_prefix "$1"
  local ns pids
  for ns in $(namespaces_of "$1"); do
    # A namespace outlives `ip netns del` while a process is in it: kill them first.
    for _ in {1..50}; do
      pids=$(ip netns pids "$ns" 2>/dev/null || true)
      [[ -z $pids ]] && break
      # shellcheck disable=SC2086  # one pid per word
      kill -KILL $pids 2>/dev/null || true
      sleep 0.1
    done
    [[ -z $pids ]] || echo "netns.sh: processes $pids in $ns did not die" >&2
    ip netns del "$ns" 2>/dev/null || true
  done
  [[ -z $(namespaces_of "$1") ]] || die "could not remove all namespaces of $1"
}

cmd_leftovers() {
  (($# == 1)) || die "usage: netns.sh leftovers PREFIX"
  check_prefix "$1"
  local ns pids status=0
  for ns in $(namespaces_of "$1"); do
    [[ $ns == "$1-hub" ]] && continue
    for _ in {1..30}; do
      pids=$(ip netns pids "$ns" 2>/dev/null || true)
      [[ -z $pids ]] && break
      sleep 0.1
    done
    [[ -z $pids ]] && continue
    status=1
    echo "host ${ns##*-}: $(ps -o pid=,args= -p "${pids//$'\n'/,}" | tr '\n' ';')"
    # shellcheck disable=SC2086  # one pid per word
    kill -KILL $pids 2>/dev/null || true
  done
  return $status
}

usage="check | setup PREFIX N | exec PREFIX I CMD... | addr PREFIX I | leftovers PREFIX | teardown PREFIX"
(($# >= 1)) || die "usage: netns.sh $usage"
command=$1
shift
case $command in
  check) cmd_check ;;
  setup) cmd_setup "$@" ;;
  exec) cmd_exec "$@" ;;
  addr) cmd_addr "$@" ;;
  leftovers) cmd_leftovers "$@" ;;
  teardown) cmd_teardown "$@" ;;
  *) die "unknown command '$command'; usage: netns.sh $usage" ;;
esac
