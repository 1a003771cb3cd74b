#!/usr/bin/env bash
# Runs one libFuzzer target for a bounded time (the `fuzz` CTest tests; tests/fuzz).
# Usage: run_fuzzer.sh FUZZER SECONDS WORK_DIR SEED_CORPUS [DICT]
# The seed corpus is only read: libFuzzer writes what it finds into WORK_DIR/corpus (made
# afresh) and a crashing input into WORK_DIR/crash-*, which is where to look when it fails.
# Ends with libFuzzer's statistics (executions, exec/s, coverage) and its exit status.
set -euo pipefail
fuzzer=$1 seconds=$2 work=$3 seeds=$4 dict=${5:-}
rm -rf "$work"
mkdir -p "$work/corpus"
args=(-max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$work/"
      -timeout=10 -rss_limit_mb=4096)
[ -n "$dict" ] && args+=(-dict="$dict")
exec "$fuzzer" "${args[@]}" "$work/corpus" "$seeds"
