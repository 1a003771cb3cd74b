#!/usr/bin/env bash
# tdist-bench --csv end to end: 2 local ranks, all_reduce 8..64 B, then --coll all; the
# CSV's header, one row per size (and per collective), the values of the fixed columns,
# that the table is still printed, and the errors for an empty or unwritable path.
# Usage: bash csv_test.sh TDIST_BENCH
set -euo pipefail
bench=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
header="collective,backend,nranks,bytes,count,dtype,redop,root,inplace,iters,time_us,algbw_GBps,busbw_GBps,wrong"

# One collective, four sizes.
"$bench" --nproc 2 -b 8 -e 64 -f 2 -n 2 -w 1 --csv "$tmp/ar.csv" >"$tmp/ar.out"
[[ $(head -n 1 "$tmp/ar.csv") == "$header" ]] || fail "header: $(head -n 1 "$tmp/ar.csv")"
[[ $(wc -l <"$tmp/ar.csv") -eq 5 ]] || fail "expected 4 rows:
$(cat "$tmp/ar.csv")"
awk -F, 'NR > 1 {
  ok = $1 == "all_reduce" && $2 == "tcp" && $3 == 2 && $6 == "f32" && $7 == "sum" &&
       $8 == -1 && $9 == 0 && $10 == 2 && $11 > 0 && $12 > 0 && $13 > 0 && $14 == 0 &&
       $13 + 0 == $12 + 0 && NF == 14
  if (!ok) { print "bad row: " $0; bad = 1 }
  sizes = sizes $4 ":" $5 " "
} END {
  if (sizes != "8:2 16:4 32:8 64:16 ") { print "bytes:count " sizes; bad = 1 }
  exit bad
}' "$tmp/ar.csv" || fail "rows of $tmp/ar.csv"
# The table is printed as before: four rows of numbers on stdout.
[[ $(grep -cE '^ +[0-9]+ +[0-9]+ +f32 ' "$tmp/ar.out") -eq 4 ]] || fail "table:
$(cat "$tmp/ar.out")"

# --coll all: one row per collective and size, a single row for barrier.
"$bench" --nproc 2 --coll all -b 8 -e 16 -f 2 -n 1 -w 0 --csv="$tmp/all.csv" >/dev/null
[[ $(head -n 1 "$tmp/all.csv") == "$header" ]] || fail "header of --coll all"
got=$(awk -F, 'NR > 1 { n[$1]++ } END { for (c in n) print c "=" n[c] }' "$tmp/all.csv" | sort |
  tr '\n' ' ')
want="all_gather=2 all_reduce=2 all_to_all=2 barrier=1 broadcast=2 gather=2 reduce=2 reduce_scatter=2 scatter=2 sendrecv=2 "
[[ $got == "$want" ]] || fail "rows per collective: $got"
awk -F, 'NR > 1 && $14 != 0 { exit 1 }' "$tmp/all.csv" || fail "wrong elements in --coll all"

# Errors: an empty name is a bad flag (status 2, before anything starts); a path that
# cannot be written stops every rank with status 2 and names the path.
set +e
"$bench" --nproc 2 --csv= >/dev/null 2>"$tmp/err1"
rc=$?
"$bench" --nproc 2 -b 8 -e 8 --csv "$tmp/no/such/dir/x.csv" >/dev/null 2>"$tmp/err2"
rc2=$?
set -e
[[ $rc -eq 2 ]] || fail "--csv= exited $rc"
grep -q "^tdist-bench: --csv: expected a file name, got ''" "$tmp/err1" || fail "$(cat "$tmp/err1")"
[[ $rc2 -ne 0 ]] || fail "an unwritable --csv path exited 0"
grep -q "tdist-bench: --csv: cannot write '$tmp/no/such/dir/x.csv'" "$tmp/err2" ||
  fail "$(cat "$tmp/err2")"
echo "csv_test: ok"
