#!/usr/bin/env bash
# Sharded training benchmark, all in one run (issue 32's yardsticks), OMP_NUM_THREADS=1:
#   speed, world 2: 8 blocks of Linear(2048, 2048) + ReLU (34M parameters), Adam, batch 32
#     per rank: tdist's fully_shard in C++ (examples/train_sharded), tdist's DDP in C++ (its
#     --ddp), and PyTorch's FSDP2 over gloo and over tdist (benchmarks/python/fsdp2_bench.py),
#     interleaved R rounds; the table gives the median step and samples/s of each, and the
#     ratios the issue names (C++ fully_shard / FSDP2-gloo, FSDP2-tdist / FSDP2-gloo);
#   memory: 8 and 16 blocks of Linear(4096, 4096) (134M and 268M parameters), Adam, batch
#     8, 3 steps, at world 2 and 4: the peak RSS per rank (the largest over the ranks) of
#     tdist's fully_shard and DDP in C++, their ratio, and the ratio of the peaks above each
#     process's resident memory before the model was made; for 134M also PyTorch's FSDP2
#     and DDP over gloo (fsdp2_bench.py --ddp) and their ratio, the peer's figure;
#   parity: the model of tests/torch/sharded_parity_worker.cc trained 20 steps by tdist's
#     fully_shard (f32; bf16 params with f32 reduce) and DDP (f32) in C++, and by PyTorch's
#     FSDP2 over gloo (tests/torch/fsdp2_parity.py): per case the largest relative
#     difference of the losses and of the final parameters, and whether all bits match
#     (scripts/bench_sharded_parity.sh; needs only torch_sharded_parity_worker, and a
#     python3 with FSDP2).
# Needs: a build with train_sharded and tdistrun (LibTorch found), and the tdist Python
# package installed for python3 (pip install .) for the FSDP2 rows.
# Usage: bash scripts/bench_sharded.sh [BUILD_DIR] [R]   (defaults: build 3)
#        bash scripts/bench_sharded.sh BUILD_DIR parity   (the parity section only)
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${1:-build}")
rounds=${2:-3}
if [[ $rounds == parity ]]; then
  exec bash scripts/bench_sharded_parity.sh "$build"
fi
[[ $rounds =~ ^[1-9][0-9]*$ ]] || {
  echo "usage: bash scripts/bench_sharded.sh [BUILD_DIR] [R|parity]" >&2
  exit 2
}
for bin in "$build/examples/train_sharded" "$build/tools/tdistrun"; do
  [[ -x $bin ]] || {
    echo "bench_sharded: $bin is missing (cmake --build $build --target train_sharded tdistrun)" >&2
    exit 1
  }
done
python3 -c 'import tdist' 2>/dev/null || {
  echo "bench_sharded: the tdist Python package is not installed for python3 (pip install .)" >&2
  exit 1
}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 PYTHONWARNINGS=ignore
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# cxx LABEL WORLD ARGS...: one train_sharded run under tdistrun; its summary line, relabeled.
cxx() {
  local label=$1 world=$2
  shift 2
  "$build/tools/tdistrun" --standalone --nproc-per-node "$world" "$build/examples/train_sharded" \
    "$@" 2>/dev/null | grep '^sharded-' | sed "s/^sharded-[a-z_]*/$label/" | tee -a "$log"
}

speed=(--width 2048 --depth 8 --batch-size 32 --steps 11)
memory=(--width 4096 --batch-size 8 --steps 3)
for ((r = 1; r <= rounds; r++)); do
  echo "== round $r/$rounds"
  cxx speed-cxx-fully_shard 2 "${speed[@]}"
  cxx speed-cxx-ddp 2 "${speed[@]}" --ddp
  for b in gloo tdist; do
    python3 benchmarks/python/fsdp2_bench.py "$b" 2>/dev/null |
      sed "s/^fsdp2-$b/speed-fsdp2-$b/" | tee -a "$log"
  done
done
for depth in 8 16; do
  for world in 2 4; do
    cxx "memory$depth-cxx-fully_shard" "$world" "${memory[@]}" --depth "$depth"
    cxx "memory$depth-cxx-ddp" "$world" "${memory[@]}" --depth "$depth" --ddp
    if ((depth == 8)); then  # PyTorch's DDP at 268M and world 4 would not fit in 24 GiB
      for kind in fsdp2 ddp; do
        python3 benchmarks/python/fsdp2_bench.py gloo --width 4096 --depth "$depth" --batch 8 \
          --world "$world" --steps 2 $([[ $kind == ddp ]] && echo --ddp) 2>/dev/null |
          sed "s/^$kind-gloo/memory$depth-py-$kind/" | tee -a "$log"
      done
    fi
  done
done

python3 - "$log" <<'PY'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    m = re.match(r"(\S+) world=(\d+) .*step_ms=([\d.]+) samples_per_s=([\d.]+) "
                 r"peak_rss_mib=([\d.]+)(?: peak_above_baseline_mib=([\d.]+))?", line)
    if m:
        rows.setdefault((m[1], int(m[2])), []).append(tuple(float(v or "nan") for v in m.group(3, 4, 5, 6)))
med = {k: [statistics.median(x[i] for x in v) for i in range(4)] for k, v in rows.items()}
print("\n| speed, world 2 (34M parameters, Adam) | step ms | samples/s | peak RSS MiB |")
print("|---|---:|---:|---:|")
for name in ("speed-cxx-fully_shard", "speed-cxx-ddp", "speed-fsdp2-gloo", "speed-fsdp2-tdist"):
    if (name, 2) in med:
        s, t, m, _ = med[(name, 2)]
        print(f"| {name[6:]} | {s:.0f} | {t:.1f} | {m:.0f} |")
def ratio(a, b):
    return med[(a, 2)][1] / med[(b, 2)][1] if (a, 2) in med and (b, 2) in med else float("nan")
print(f"\nC++ fully_shard / FSDP2 over gloo: {ratio('speed-cxx-fully_shard', 'speed-fsdp2-gloo'):.2f}x samples/s")
print(f"FSDP2 over tdist / over gloo: {ratio('speed-fsdp2-tdist', 'speed-fsdp2-gloo'):.2f}x samples/s")
print("\nmemory: peak RSS MiB per rank (the largest over the ranks), Adam, batch 8; 'net': "
      "the peaks above the resident memory before the model was made")
print("| model | world | tdist fully_shard | tdist DDP | ratio | net ratio "
      "| FSDP2 (gloo) | PyTorch DDP | ratio | net ratio |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
def pair(a, b):
    if a is None or b is None:
        return ["", "", "", ""]
    return [f"{a[2]:.0f}", f"{b[2]:.0f}", f"{a[2] / b[2]:.2f}", f"{a[3] / b[3]:.2f}"]
for depth, size in ((8, "134M"), (16, "268M")):
    for world in (2, 4):
        key = lambda kind: med.get((f"memory{depth}-{kind}", world))
        cells = pair(key("cxx-fully_shard"), key("cxx-ddp")) + pair(key("py-fsdp2"), key("py-ddp"))
        if any(cells):
            print(f"| {size} | {world} | " + " | ".join(cells) + " |")
PY

echo
if [[ -x $build/tests/torch/torch_sharded_parity_worker ]]; then
  bash scripts/bench_sharded_parity.sh "$build"
else
  echo "parity: skipped ($build/tests/torch/torch_sharded_parity_worker is not built)"
fi
