#!/usr/bin/env bash
# Self-test of netns.sh: three hosts, a TCP server on host 0 answering clients on hosts 1
# and 2 (the reply names the address the client came from, so the bytes crossed the
# bridge), checks that no host has a way out (no default route) and the root namespace
# got no address in the hosts' subnet, then a teardown that must kill a process left
# behind and remove every namespace.
# Exit status: 0 passed, 77 skipped (netns.sh check says why), 1 failed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
netns="$here/netns.sh"
python=/usr/bin/python3
[[ -x $python ]] || python=python3

"$netns" check || exit $?

prefix="tdns$$"
tmp=$(mktemp -d)
trap '"$netns" teardown "$prefix" || true; rm -rf "$tmp"' EXIT

fail() {
  echo "netns_selftest: FAILED: $*" >&2
  exit 1
}

# True while process $1 exists and is not a zombie (a reaper may be slow in containers).
alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  [[ $(awk '{print $3}' <<<"${stat##*)}") != Z ]]
}

"$netns" setup "$prefix" 3
addr0=$("$netns" addr "$prefix" 0)

"$netns" exec "$prefix" 0 "$python" - "$addr0" "$tmp/port" <<'EOF' &
import os, socket, sys
server = socket.create_server((sys.argv[1], 0))
server.settimeout(20)
with open(sys.argv[2] + ".tmp", "w") as f:
    f.write(str(server.getsockname()[1]))
os.rename(sys.argv[2] + ".tmp", sys.argv[2])
for _ in range(2):
    conn, peer = server.accept()
    with conn:
        conn.settimeout(10)
        line = conn.makefile().readline().strip()
        conn.sendall(f"pong {line} from {peer[0]}\n".encode())
EOF
server=$!
for _ in {1..100}; do
  [[ -f $tmp/port ]] && break
  sleep 0.1
done
[[ -f $tmp/port ]] || fail "the server in host 0 did not start"
port=$(<"$tmp/port")

for i in 1 2; do
  # shellcheck disable=SC2016  # expanded by the inner bash
  reply=$(timeout 10 "$netns" exec "$prefix" "$i" bash -c \
    'exec 3<>"/dev/tcp/$0/$1" && echo "ping $2" >&3 && read -r line <&3 && echo "$line"' \
    "$addr0" "$port" "host$i") || fail "host $i could not talk to $addr0:$port"
  expected="pong ping host$i from $("$netns" addr "$prefix" "$i")"
  [[ $reply == "$expected" ]] || fail "host $i got '$reply', expected '$expected'"
done
wait "$server" || fail "the server in host 0 failed"

subnet=$(cut -d. -f1-3 <<<"$addr0")
for i in 0 1 2; do
  [[ -z $("$netns" exec "$prefix" "$i" ip route show default) ]] ||
    fail "host $i has a default route"
  "$netns" exec "$prefix" "$i" ip -o link show lo | grep -q "[<,]UP[,>]" ||
    fail "loopback of host $i is down"
done
if ip -o addr show | grep -qF " $subnet."; then
  fail "the root namespace has an address in $subnet"
fi

# A process left behind in host 1, not this shell's child (as a stray worker would be).
leftover=$("$netns" exec "$prefix" 1 bash -c 'sleep 300 >/dev/null 2>&1 & echo $!')
alive "$leftover" || fail "the process left in host 1 did not start"
"$netns" teardown "$prefix"
for _ in {1..50}; do
  alive "$leftover" || break
  sleep 0.1
done
alive "$leftover" && fail "teardown left process $leftover alive in host 1"
if ip netns list | grep -q "^$prefix-"; then fail "teardown left namespaces: $(ip netns list)"; fi
"$netns" teardown "$prefix" || fail "a second teardown failed"
echo "netns_selftest: 3 hosts talked over the bridge; teardown left nothing behind"
