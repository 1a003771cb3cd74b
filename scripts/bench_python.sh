#!/usr/bin/env bash
# torch.distributed from Python, gloo beside the tdist backend, world 2, in one run:
#   the cost of one 1 KiB dist.all_reduce call (benchmarks/python/call_latency.py, 5000
#   calls, best of 5), for gloo, tdist and torch's "fake" backend, which does no
#   communication: the floor torch's own Python and dispatch set;
#   all_reduce f32 sum latency and busbw, 1 KiB-64 MiB (../shared/anchors/torch_allreduce.py)
#   PyTorch's DistributedDataParallel on the anchors' MLP and CNN (torch_ddp_mlp.py,
#   torch_ddp.py), samples/s, and world 1 (no DDP) for the scaling efficiency.
# The anchors run as written: over tdist through benchmarks/python/sitecustomize.py, which
# swaps their init_process_group("gloo") for "tdist" (TDIST_ENGINE picks the engine, default
# auto). Variants alternate R times (gloo, tdist, gloo, ...) so drifting load hits both;
# each line is printed as measured, then a summary of the medians.
# Needs: the tdist Python package installed for python3 (pip install .).
# Usage: bash scripts/bench_python.sh [R] [STEPS]   (defaults: 3 20)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
steps=${2:-20}
[[ $rounds =~ ^[1-9][0-9]*$ && $steps =~ ^[1-9][0-9]*$ ]] || {
  echo "usage: bash scripts/bench_python.sh [R] [STEPS]" >&2
  exit 2
}
anchors=${ANCHORS:-$(realpath ../shared/anchors)}
python3 -c 'import tdist' 2>/dev/null || {
  echo "bench_python: the tdist package is not installed for python3 (pip install .)" >&2
  exit 1
}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 PYTHONWARNINGS=ignore
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# run LABEL BACKEND SCRIPT ARGS...: one anchor run, its lines tagged with LABEL.
run() {
  local label=$1 backend=$2
  shift 2
  if [[ $backend == gloo ]]; then
    python3 "$@" 2>/dev/null
  else
    TDIST_BENCH_BACKEND=$backend PYTHONPATH="$PWD/benchmarks/python${PYTHONPATH:+:$PYTHONPATH}" \
      python3 "$@" 2>/dev/null
  fi | sed "s/^torch-[a-z-]*/$label/" | tee -a "$log"
}

for ((r = 1; r <= rounds; r++)); do
  echo "== round $r/$rounds"
  for b in gloo tdist fake; do
    python3 benchmarks/python/call_latency.py "$b" 2>/dev/null | tee -a "$log"
  done
  for b in gloo tdist; do run "allreduce-$b" "$b" "$anchors/torch_allreduce.py" 2; done
  for b in gloo tdist; do
    run "mlp-$b" "$b" "$anchors/torch_ddp_mlp.py" 2 "$steps"
    run "cnn-$b" "$b" "$anchors/torch_ddp.py" 2 "$steps"
  done
  run "mlp-w1" gloo "$anchors/torch_ddp_mlp.py" 1 "$steps"
  run "cnn-w1" gloo "$anchors/torch_ddp.py" 1 "$steps"
done

python3 - "$log" <<'PY'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    label = line.split()[0]
    kv = dict(re.findall(r"(\w+)=([\d.]+)", line))
    key = (label, kv.get("bytes"))
    rows.setdefault(key, []).append(kv)
med = lambda key, field: statistics.median(float(kv[field]) for kv in rows[key])
lat = {b: med((f"latency-{b}", "1024"), "time_us") for b in ("gloo", "tdist", "fake")
          if (f"latency-{b}", "1024") in rows}
if lat:
    print("\none 1 KiB dist.all_reduce from Python, world 2, us (medians of the rounds)")
    print("  " + ", ".join(f"{b} {v:.2f}" for b, v in lat.items()) +
          " (fake: no communication, torch's own floor)")
print("\nall_reduce f32 sum, world 2 (medians)")
print(f"{'bytes':>10} {'gloo us':>10} {'tdist us':>10} {'gloo GB/s':>10} {'tdist GB/s':>11} {'speedup':>8}")
for label, size in sorted((k for k in rows if k[0] == "allreduce-gloo"), key=lambda k: int(k[1])):
    g, t = ("allreduce-gloo", size), ("allreduce-tdist", size)
    if t not in rows:
        continue
    print(f"{size:>10} {med(g, 'time_us'):>10.1f} {med(t, 'time_us'):>10.1f} "
          f"{med(g, 'busbw_GBps'):>10.3f} {med(t, 'busbw_GBps'):>11.3f} "
          f"{med(g, 'time_us') / med(t, 'time_us'):>7.2f}x")
print("\nPyTorch DDP, world 2, samples/s (medians; scaling = w2 / (2 x w1))")
for model in ("mlp", "cnn"):
    w1 = med((f"{model}-w1", None), "samples_per_s")
    g, t = med((f"{model}-gloo", None), "samples_per_s"), med((f"{model}-tdist", None), "samples_per_s")
    print(f"{model}: gloo {g:.0f} ({g / 2 / w1:.0%}), tdist {t:.0f} ({t / 2 / w1:.0%}), "
          f"tdist/gloo {t / g:.2f}x; world 1 {w1:.0f}")
PY
