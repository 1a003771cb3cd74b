#!/usr/bin/env bash
# TLS against plaintext on the tcp backend, and against the cipher's bound: 2 ranks on this
# host, all_reduce f32 sum at 1-64 MiB (tdist-bench), R rounds alternating plaintext and
# TLS, in one run with `openssl speed` of the cipher TLS negotiates (TLS_AES_128_GCM_SHA256:
# AES-128-GCM, 16 KiB blocks, one core). Each rank of a 2-rank all_reduce sends and
# receives the whole buffer's size once per call, encrypting what it sends and decrypting
# what it receives on its own core, so TLS busbw is at most 1 / (1/plain + 2/cipher): the
# summary prints that bound per size (from the same run's plaintext median) and TLS's share;
# and the same with the cipher's speed per core while both cores encrypt at once (`openssl
# speed -multi 2`, divided by 2), which is what two ranks on two cores get.
# Certificates: a throwaway CA and one node certificate (openssl's command line).
# Needs a build (BUILD=dir, default build) and the openssl command.
# Usage: bash scripts/bench_tls.sh [ROUNDS]   (3)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
bench=${BUILD:-build}/tools/tdist-bench
export OMP_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(
  cd "$tmp"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key \
    -out ca.pem -days 2 -subj /CN=bench-ca
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout node.key \
    -out node.csr -subj /CN=node
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n' \
    >ext.cnf
  openssl x509 -req -in node.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out node.pem \
    -days 2 -extfile ext.cnf
) >/dev/null 2>&1
cipher_gbs() {  # [PROCS]: openssl speed's AES-128-GCM at 16 KiB blocks, GB/s per process
  openssl speed -multi "${1:-1}" -evp aes-128-gcm -bytes 16384 -seconds 1 2>/dev/null |
    awk -v p="${1:-1}" '/^(AES-128-GCM|aes-128-gcm)/ {
      sub(/k$/, "", $NF); printf "%.3f\n", $NF * 1000 / 1e9 / p }'
}
run() {  # LABEL [ENV...]: "LABEL BYTES BUSBW" per size
  local label=$1
  shift
  env "$@" "$bench" --nproc 2 --bind core --backend tcp -b 1M -e 64M -f 4 -n 50 -w 5 -c 0 |
    awk -v l="$label" '$1 ~ /^[0-9]+$/ { print l, $1, $8 }'
}
tls=(TDIST_TLS_CERT="$tmp/node.pem" TDIST_TLS_KEY="$tmp/node.key" TDIST_TLS_CA="$tmp/ca.pem")
raw="$tmp/raw"
for ((r = 1; r <= rounds; r++)); do
  echo "round $r/$rounds" >&2
  echo "cipher 0 $(cipher_gbs)" >>"$raw"
  echo "cipher2 0 $(cipher_gbs 2)" >>"$raw"
  run plain >>"$raw"
  run tls "${tls[@]}" >>"$raw"
done
python3 - "$raw" "$rounds" <<'PY'
import collections, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    label, size, value = line.split()
    rows[label, int(size)].append(float(value))
cipher = statistics.median(rows["cipher", 0])
both = statistics.median(rows["cipher2", 0])
print(f"AES-128-GCM (openssl speed, 16 KiB blocks): {cipher:.2f} GB/s on one core alone, "
      f"{both:.2f} GB/s per core with both encrypting (medians of {sys.argv[2]})")
print("all_reduce f32 sum, 2 ranks, tcp, busbw GB/s (medians); bound: 1 / (1/plain + 2/cipher)")
print(f"{'bytes':>10} {'plain':>7} {'tls':>7} {'tls/plain':>9} {'bound':>7} {'of bound':>8} "
      f"{'bound2':>7} {'of bound2':>9}")
for size in sorted(s for (l, s) in rows if l == "plain"):
    plain = statistics.median(rows["plain", size])
    tls = statistics.median(rows["tls", size])
    bound = 1 / (1 / plain + 2 / cipher)
    bound2 = 1 / (1 / plain + 2 / both)
    print(f"{size:>10} {plain:7.2f} {tls:7.2f} {tls / plain:9.2f} {bound:7.2f} "
          f"{100 * tls / bound:7.0f}% {bound2:7.2f} {100 * tls / bound2:8.0f}%  (tls rounds: "
          + ", ".join(f"{v:.2f}" for v in rows["tls", size]) + ")")
PY
