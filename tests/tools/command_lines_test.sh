#!/usr/bin/env bash
# The tools' command lines (tools/cli): tdistrun's and tdist-bench's --help byte for byte
# against golden/, tdist-status' one-line usage, store_scale_bench's CLI11 help, and for bad
# input each program's exit status and first line on stderr. Nothing here starts a worker
# or a rank: every case fails or stops before that.
# Usage: bash command_lines_test.sh TDISTRUN TDIST_BENCH TDIST_STATUS STORE_SCALE_BENCH
set -uo pipefail
tdistrun=$1 bench=$2 status=$3 scale=$4
golden=$(dirname "$0")/golden
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for v in $(env | grep -o '^PET_[A-Z_]*'); do unset "$v"; done
unset TDIST_TERM_TIMEOUT
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# run NAME BINARY ARGS...: BINARY run as NAME (its argv[0]); stdout, stderr and the status
# in $tmp.
run() {
  local name=$1 bin=$2
  shift 2
  (exec -a "$name" "$bin" "$@") >"$tmp/out" 2>"$tmp/err"
  echo $? >"$tmp/status"
}

# expect STATUS 'FIRST LINE OF STDERR' NAME BINARY ARGS...
expect() {
  local want_status=$1 want_err=$2
  shift 2
  run "$@"
  local got_status got_err
  got_status=$(cat "$tmp/status")
  got_err=$(head -n 1 "$tmp/err")
  [[ $got_status == "$want_status" ]] || fail "$* exited $got_status, not $want_status"
  [[ $got_err == "$want_err" ]] || fail "$*: stderr begins
  $got_err
not
  $want_err"
  # The others follow the error with their usage; tdistrun's errors are one line.
  if [[ $1 != tdistrun ]]; then
    grep -q "^usage: $1 " "$tmp/err" || fail "$*: no usage after the error"
  else
    [[ $(wc -l <"$tmp/err") == 1 ]] || fail "$*: not one line: $(cat "$tmp/err")"
  fi
  [[ ! -s $tmp/out ]] || fail "$*: wrote to stdout: $(cat "$tmp/out")"
}

# expect_help NAME BINARY STREAM TEXT-FILE ARGS...: status 0, the text exactly on STREAM
# (out or err), nothing on the other.
expect_help() {
  local name=$1 bin=$2 stream=$3 text=$4 other=err
  shift 4
  [[ $stream == err ]] && other=out
  run "$name" "$bin" "$@"
  [[ $(cat "$tmp/status") == 0 ]] || fail "$name $* exited $(cat "$tmp/status")"
  cmp -s "$tmp/$stream" "$text" || fail "$name $*: the help differs from $text:
$(diff "$text" "$tmp/$stream")"
  [[ ! -s $tmp/$other ]] || fail "$name $*: wrote to std$other: $(cat "$tmp/$other")"
}

# tdistrun: torchrun's flags in their spellings, PET_ defaults, one-line errors.
for args in --help -h "--nproc-per-node 2 --help prog" "--bogus --log-dir -h"; do
  # shellcheck disable=SC2086
  expect_help tdistrun "$tdistrun" out "$golden/tdistrun_help.txt" $args
done
run tdistrun "$tdistrun" --version
[[ $(cat "$tmp/out") == "tdistrun (tdist) "* ]] || fail "tdistrun --version: $(cat "$tmp/out")"
expect 2 "tdistrun: unrecognized option '--foo' (see tdistrun --help)" tdistrun "$tdistrun" --foo=1 p
expect 2 "tdistrun: missing PROGRAM (see tdistrun --help)" tdistrun "$tdistrun"
expect 2 "tdistrun: missing PROGRAM (see tdistrun --help)" tdistrun "$tdistrun" --nproc_per_node 2 --
expect 2 "tdistrun: program '--tdist-no-such-program' not found on PATH" \
  tdistrun "$tdistrun" --nnodes 1 -- --tdist-no-such-program
expect 2 "tdistrun: --nnodes '3:2': MIN must be <= MAX" tdistrun "$tdistrun" --nnodes=3:2 p
expect 2 "tdistrun: --nproc_per_node '0': expected a positive number, auto or cpu" \
  tdistrun "$tdistrun" --nproc_per_node 0 p
PET_NNODES=3:2 expect 2 "tdistrun: PET_NNODES '3:2': MIN must be <= MAX" tdistrun "$tdistrun" p
PET_NNODES=3:2 expect 2 "tdistrun: --rdzv-endpoint '': expected HOST[:PORT], an IPv6 address as [::1]:29400" \
  tdistrun "$tdistrun" --nnodes 1 --rdzv-endpoint= p
expect 2 "tdistrun: --log-dir expects a value (DIR)" tdistrun "$tdistrun" --log-dir --standalone p
expect 2 "tdistrun: --standalone takes no value" tdistrun "$tdistrun" --standalone=1 p
expect 2 "tdistrun: -r '4': expected 0-3 (0 none, 1 stdout, 2 stderr, 3 both) or LOCAL_RANK:0-3,... as in 0:1,1:2" \
  tdistrun "$tdistrun" -r4 p
expect 2 "tdistrun: program 'tdist-no-such-program' not found on PATH" \
  tdistrun "$tdistrun" --nproc-per-node=2 tdist-no-such-program --nproc-per-node x

# tdist-bench: nccl-tests' flags; an error, then the usage, on stderr.
expect_help tdist-bench "$bench" out "$golden/tdist_bench_help.txt" --help
expect_help tdist-bench "$bench" out "$golden/tdist_bench_help.txt" -b 1M -e 1K -h
expect 2 "tdist-bench: unknown flag '--foo'" tdist-bench "$bench" --help --foo
expect 2 "tdist-bench: unexpected argument 'foo'" tdist-bench "$bench" foo
expect 2 "tdist-bench: unknown flag '--'" tdist-bench "$bench" -n 2 -- -b 8
expect 2 "tdist-bench: flag '--help=1' takes no value" tdist-bench "$bench" --help=1
expect 2 "tdist-bench: flag '-b' needs a value" tdist-bench "$bench" -b
expect 2 "tdist-bench: --minbytes: expected a size such as 8, 1K, 64M or 1G, got '-e'" \
  tdist-bench "$bench" -b -e 1M
expect 2 "tdist-bench: --minbytes: expected a size such as 8, 1K, 64M or 1G, got '8X'" \
  tdist-bench "$bench" -b8X --help
expect 2 "tdist-bench: --csv: expected a file name, got ''" tdist-bench "$bench" --csv= -n 1
expect 2 "tdist-bench: --stepfactor: expected an integer in [2, 1048576], got '1'" \
  tdist-bench "$bench" --stepfactor=1
expect 2 "tdist-bench: --warmup_iters: expected an integer in [0, 1000000000], got '-1'" \
  tdist-bench "$bench" -w -1
expect 2 "tdist-bench: --bind must be core or none, not 'foo'" tdist-bench "$bench" --bind foo
expect 2 "tdist-bench: -b/--minbytes (1048576) exceeds -e/--maxbytes (1024)" \
  tdist-bench "$bench" -b 1M -e 1K
expect 2 "tdist-bench: -r/--root 2 is not a rank of --nproc 2 processes" \
  tdist-bench "$bench" --nproc 2 -r 2
expect 2 "tdist-bench: -o/--op band does not reduce -d f32 (needed by all_reduce)" \
  tdist-bench "$bench" -o band -d f32

# tdist-status: the usage line on stderr, for help too; help stops the parse where it is.
echo "usage: tdist-status [HOST:PORT | --job PID] [--wait SECONDS]" >"$tmp/status_usage"
expect_help tdist-status "$status" err "$tmp/status_usage" --help --wait x
expect 2 "tdist-status: --wait must be seconds in (0, 3600], not 'x'" \
  tdist-status "$status" --wait x --help
expect 2 "tdist-status: --wait needs a number of seconds" tdist-status "$status" --wait
expect 2 "tdist-status: --job needs tdistrun's pid, not '--wait'" \
  tdist-status "$status" --job --wait 5
expect 2 "tdist-status: give HOST:PORT or --job, not both" tdist-status "$status" h:1 --job 5
expect 2 "tdist-status: unexpected argument '--foo'" tdist-status "$status" --foo --wait x
expect 2 "tdist-status: unexpected argument 'b:2'" tdist-status "$status" a:1 b:2
expect 2 "tdist-status: unexpected argument '--'" tdist-status "$status" -- h:1
expect 2 "tdist-status: unexpected argument '-1'" tdist-status "$status" -1 --foo

# store_scale_bench: CLI11's typed options, messages and help.
run store_scale_bench "$scale" --help
if [[ $(cat "$tmp/status") != 0 ]] || ! grep -q -- "--clients N=4096 " "$tmp/out"; then
  fail "store_scale_bench --help: $(cat "$tmp/out" "$tmp/err")"
fi
expect 2 "store_scale_bench: The following argument was not expected: --foo" \
  store_scale_bench "$scale" --clients 8 --foo
expect 2 "store_scale_bench: --clients: Value 0 not in range 1 to 1048576" \
  store_scale_bench "$scale" --clients=0

if ((failures)); then
  echo "command_lines_test: $failures failures" >&2
  exit 1
fi
echo "command_lines_test: ok"
