#!/usr/bin/env bash
# The parity section of scripts/bench_sharded.sh (issue 32): the model, data and initial
# parameters of tests/torch/sharded_parity_worker.cc trained 20 steps by tdist's C++
# fully_shard and DDP (under tdistrun) and by PyTorch's FSDP2 over gloo
# (tests/torch/fsdp2_parity.py, the python3 on PATH, torch >= 2.4); a table of each case's
# largest relative loss difference, largest parameter difference (relative to the largest
# magnitude of its tensor), and whether every bit of the losses and parameters matches.
# SGD with momentum, except one Adam case (PyTorch's Adam updates with lerp_, LibTorch's
# with mul_ + add_: not bit-identical).
# Usage: bash scripts/bench_sharded_parity.sh BUILD_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${1:?usage: bash scripts/bench_sharded_parity.sh BUILD_DIR}")
worker=$build/tests/torch/torch_sharded_parity_worker
for bin in "$worker" "$build/tools/tdistrun"; do
  [[ -x $bin ]] || {
    echo "parity: $bin is missing (cmake --build $build --target torch_sharded_parity_worker" \
      "tdistrun)" >&2
    exit 1
  }
done
python3 -c 'from torch.distributed.fsdp import fully_shard' 2>/dev/null || {
  echo "parity: python3 has no FSDP2 (torch >= 2.4 needed)" >&2
  exit 1
}
export OMP_NUM_THREADS=1 PYTHONWARNINGS=ignore
# Bit-identity needs the same kernels on both sides: the build's LibTorch of the python3's
# torch version (build-torch2, not build/ with Debian's LibTorch 1.13).
echo "parity: python3 torch $(python3 -c 'import torch; print(torch.__version__)'), $build's" \
  "LibTorch: $(grep -m1 '^Torch_DIR' "$build/CMakeCache.txt" | cut -d= -f2)"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# The cases: mode dtype world backend optimizer.
cases=(
  "fully_shard f32 2 shm sgd" "fully_shard f32 3 shm sgd" "fully_shard f32 2 tcp sgd"
  "fully_shard bf16 2 shm sgd" "fully_shard bf16 3 shm sgd"
  "ddp f32 2 shm sgd" "ddp f32 3 shm sgd"
  "fully_shard f32 2 shm adam"
)
timeout -k 5 300 python3 tests/torch/fsdp2_parity.py "$dir" 2-f32-sgd 3-f32-sgd 2-bf16-sgd \
  3-bf16-sgd 2-f32-adam
for c in "${cases[@]}"; do
  read -r mode dtype world backend optim <<<"$c"
  timeout -k 5 120 "$build/tools/tdistrun" --standalone --nproc-per-node "$world" "$worker" \
    "$backend" "$mode" "$dtype" "$optim" "$dir/$mode-$dtype-$world-$backend-$optim.txt" \
    >"$dir/log" 2>&1 || {
    cat "$dir/log" >&2
    exit 1
  }
done

python3 - "$dir" "${cases[@]}" <<'PY'
import struct, sys
def load(path):
    """{key: [hex words]}: "loss" the losses in order, else a parameter's name."""
    out = {}
    for line in open(path):
        w = line.split()
        if w[0] == "loss":
            out.setdefault("loss", []).append(w[1])
        else:
            out[w[1]] = w[2:]
    return out
def f32(h):
    return struct.unpack("<f", struct.pack("<I", int(h, 16)))[0]
def rel(a, b, elementwise):
    a, b = list(map(f32, a)), list(map(f32, b))
    if elementwise:
        return max(abs(x - y) / abs(y) for x, y in zip(a, b))
    return max(abs(x - y) for x, y in zip(a, b)) / max(abs(y) for y in b)
d = sys.argv[1]
print("\n| parity, 20 steps, vs FSDP2 over gloo | max rel. loss diff | max rel. param diff"
      " | bit-identical |")
print("|---|---:|---:|:---:|")
for case in sys.argv[2:]:
    mode, dtype, world, backend, optim = case.split()
    a = load(f"{d}/{mode}-{dtype}-{world}-{backend}-{optim}.txt")
    b = load(f"{d}/{world}-{dtype}-{optim}.txt")
    assert a.keys() == b.keys(), (a.keys(), b.keys())
    dl = rel(a["loss"], b["loss"], True)
    dp = max(rel(a[k], b[k], False) for k in b if k != "loss")
    same = "yes" if a == b else "no"
    print(f"| {mode} {dtype} {optim}, world {world}, {backend} | {dl:.1e} | {dp:.1e} | {same} |")
PY
