#!/usr/bin/env bash
# PyTorch's own distributed test suite (DistributedTest._DistTestBase of the installed torch)
# on gloo and on tdist, world sizes 2 and 3 by default, through tests/python/torch_suite
# (run.py; gates.py opens the suite's gloo-only gates to tdist). Prints each test as it ends,
# then one table of passed/failed/skipped per backend and world size and every test that
# fails on tdist but passes on gloo, grouped by cause (table.py). A developer script, not CI
# (tests/python/test_torch_suite.py runs a subset): on 2 cores about 8.5 min for worlds 2
# and 3 (1.5-2.5 min per backend and world). Runs one test at a time (each forks WORLD ranks);
# do not reinstall tdist while it runs (its runs stop: forked ranks would crash).
# Needs: the tdist Python package installed for python3 (pip install .), expecttest.
# Usage: bash scripts/torch_suite.sh [OUT_DIR] [run.py flags...]
#   OUT_DIR (default: a new folder under /tmp) gets <backend>_w<world>.json, .out and logs/;
#   WORLDS="2 3 4" bash scripts/torch_suite.sh   other world sizes (4: the new_subgroups and
#   gather_object tests; 8: the suite's "small world size" tests);
#   flags go to every run.py, e.g. -k all_reduce --timeout 60 --no-profiler-checks
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-$(mktemp -d /tmp/torch_suite.XXXXXX)}
[[ $# -gt 0 ]] && shift
worlds=${WORLDS:-2 3}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=1
mkdir -p "$out"
results=()
for world in $worlds; do
  for backend in gloo tdist; do
    name=${backend}_w${world}
    echo "== $backend, world $world (output: $out/$name.out)"
    # run.py exits 1 when a test failed; the table says which.
    python3 tests/python/torch_suite/run.py --backend "$backend" --world "$world" \
      --json "$out/$name.json" --logs "$out/logs/$name" "$@" 2>&1 |
      tee "$out/$name.out" | grep -E '^(PASS|FAIL|SKIP|XSKIP) |^torch_suite' || true
    [[ -f $out/$name.json ]] && results+=("$out/$name.json")
  done
done
echo
python3 tests/python/torch_suite/table.py "${results[@]}"
