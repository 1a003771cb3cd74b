#!/usr/bin/env bash
# Distributed checkpoint benchmark, all in one run (issue 33's yardsticks), OMP_NUM_THREADS=1:
#   async save: fully_shard training at world 2 (8 blocks of Linear(2048, 2048), 34M
#     parameters, Adam, batch 32 per rank: 134 MB of parameters and 268 MB of Adam state)
#     for 60 timed steps, without saves and with an async save (model and Adam state) every
#     K steps (examples/train_sharded --checkpoint-every), interleaved R rounds: the mean
#     step time of each, their ratio, and the training thread's time blocked per save;
#     beside it PyTorch's FSDP2 over gloo with dcp.async_save every K steps
#     (benchmarks/python/fsdp2_bench.py --save-every), the same model and steps;
#   throughput: a 1 GiB state saved (fsync'd, committed) and loaded back by one process
#     (benchmarks/checkpoint_bench, the files evicted from the page cache before the load),
#     and dd writing 1 GiB of random bytes to the same disk (conv=fsync) and reading it
#     back (evicted first), interleaved R rounds: medians and ratios; then the same state
#     saved and loaded by 2 ranks;
#   round trip: saved on 4 ranks with fully_shard, loaded on 2 under DDP (tdist) and by
#     PyTorch's DCP into FSDP2 on 2 ranks: every parameter bit for bit
#     (tests/torch/checkpoint_worker.cc, tests/torch/checkpoint_interop.py).
# Needs: a build with train_sharded, checkpoint_bench, torch_checkpoint_worker and tdistrun
# (LibTorch found), and python3 with torch >= 2.4 and safetensors for the PyTorch rows.
# The folders go under CKPT_BENCH_DIR (default: a new folder in /var/tmp, on disk).
# Usage: bash scripts/bench_checkpoint.sh [BUILD_DIR] [R] [K]   (defaults: build 3 20)
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${1:-build}")
rounds=${2:-3}
every=${3:-20}
[[ $rounds =~ ^[1-9][0-9]*$ && $every =~ ^[1-9][0-9]*$ ]] || {
  echo "usage: bash scripts/bench_checkpoint.sh [BUILD_DIR] [R] [K]" >&2
  exit 2
}
for bin in examples/train_sharded benchmarks/checkpoint_bench tests/torch/torch_checkpoint_worker \
  tools/tdistrun; do
  [[ -x $build/$bin ]] || {
    echo "bench_checkpoint: $build/$bin is missing (cmake --build $build --target" \
      "$(basename "$bin"))" >&2
    exit 1
  }
done
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 PYTHONWARNINGS=ignore
work=$(mktemp -d "${CKPT_BENCH_DIR:-/var/tmp}/bench_checkpoint.XXXXXX")
trap 'rm -rf "$work"' EXIT
tdistrun=$build/tools/tdistrun

# field NAME LINE: the value of NAME=... in LINE.
field() { sed -E "s/.*(^| )$1=([^ ]*).*/\2/" <<<"$2"; }
# median of the arguments
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }

echo "== async save: fully_shard, world 2, 34M parameters + Adam, 60 steps, a save every $every"
plain=() saving=() blocked=() py_plain=() py_saving=() py_blocked=()
for r in $(seq "$rounds"); do
  line=$("$tdistrun" --standalone --nproc-per-node 2 "$build/examples/train_sharded" \
    --width 2048 --depth 8 --batch-size 32 --steps 61 2>/dev/null | grep '^sharded-')
  plain+=("$(field step_ms "$line")")
  rm -rf "$work/cx"
  line=$("$tdistrun" --standalone --nproc-per-node 2 "$build/examples/train_sharded" \
    --width 2048 --depth 8 --batch-size 32 --steps 61 --checkpoint "$work/cx" \
    --checkpoint-every "$every" 2>/dev/null | grep '^sharded-')
  saving+=("$(field step_ms "$line")")
  blocked+=("$(field save_block_ms "$line")")
  if python3 -c 'import torch.distributed.checkpoint, torch.distributed.fsdp' 2>/dev/null; then
    line=$(python3 benchmarks/python/fsdp2_bench.py gloo --steps 60 2>/dev/null | grep '^fsdp2-')
    py_plain+=("$(field mean_step_ms "$line")")
    rm -rf "$work/py" && mkdir -p "$work/py"
    line=$(python3 benchmarks/python/fsdp2_bench.py gloo --steps 60 --save-every "$every" \
      --save-dir "$work/py" 2>/dev/null | grep '^fsdp2-')
    py_saving+=("$(field mean_step_ms "$line")")
    py_blocked+=("$(field save_block_ms "$line")")
  fi
  echo "round $r: tdist ${plain[-1]} / ${saving[-1]} ms (blocked ${blocked[-1]} ms per save)" \
    "${py_plain:+; FSDP2+DCP ${py_plain[-1]} / ${py_saving[-1]} ms (blocked ${py_blocked[-1]} ms)}"
done
printf '%-34s %12s %12s %8s %16s\n' "" "step ms" "with saves" "ratio" "blocked/save ms"
printf '%-34s %12s %12s %8s %16s\n' "tdist fully_shard + Checkpointer" "$(median "${plain[@]}")" \
  "$(median "${saving[@]}")" "$(ratio "$(median "${saving[@]}")" "$(median "${plain[@]}")")" \
  "$(median "${blocked[@]}")"
if ((${#py_plain[@]})); then
  printf '%-34s %12s %12s %8s %16s\n' "PyTorch FSDP2 + dcp.async_save" "$(median "${py_plain[@]}")" \
    "$(median "${py_saving[@]}")" \
    "$(ratio "$(median "${py_saving[@]}")" "$(median "${py_plain[@]}")")" \
    "$(median "${py_blocked[@]}")"
fi

echo "== throughput: a 1 GiB state, one process, against dd on the same disk ($work)"
# dd's source in memory (tmpfs) where there is one, so that dd only writes the disk.
src_dir=$work
[[ -d /dev/shm && -w /dev/shm ]] && src_dir=$(mktemp -d /dev/shm/bench_checkpoint.XXXXXX)
head -c $((1 << 30)) /dev/urandom >"$src_dir/random.bin"
dd_w=() dd_r=() ck_w=() ck_r=()
for r in $(seq "$rounds"); do
  s=$(dd if="$src_dir/random.bin" of="$work/dd.bin" bs=16M conv=fsync 2>&1 | awk '/copied/ {print $(NF-3)}')
  dd_w+=("$(awk -v s="$s" 'BEGIN { printf "%.0f", 1024 / s }')")
  dd if="$work/dd.bin" iflag=nocache count=0 2>/dev/null
  s=$(dd if="$work/dd.bin" of=/dev/null bs=16M 2>&1 | awk '/copied/ {print $(NF-3)}')
  dd_r+=("$(awk -v s="$s" 'BEGIN { printf "%.0f", 1024 / s }')")
  rm -f "$work/dd.bin"
  rm -rf "$work/ck"
  line=$("$build/benchmarks/checkpoint_bench" "$work/ck" 1024 1 | grep '^checkpoint ')
  ck_w+=("$(field write_mib_s "$line")")
  ck_r+=("$(field read_mib_s "$line")")
  echo "round $r: write MiB/s tdist ${ck_w[-1]}, dd ${dd_w[-1]}; read MiB/s tdist ${ck_r[-1]}, dd ${dd_r[-1]}"
done
rm -rf "$work/ck" "$src_dir/random.bin"
[[ $src_dir == "$work" ]] || rmdir "$src_dir"
printf '%-28s %10s %10s %8s\n' "" "tdist" "dd" "ratio"
printf '%-28s %10s %10s %8s\n' "write MiB/s (median)" "$(median "${ck_w[@]}")" \
  "$(median "${dd_w[@]}")" "$(ratio "$(median "${ck_w[@]}")" "$(median "${dd_w[@]}")")"
printf '%-28s %10s %10s %8s\n' "read MiB/s (median)" "$(median "${ck_r[@]}")" \
  "$(median "${dd_r[@]}")" "$(ratio "$(median "${ck_r[@]}")" "$(median "${dd_r[@]}")")"
"$tdistrun" --standalone --nproc-per-node 2 "$build/benchmarks/checkpoint_bench" "$work/ck2" \
  1024 "$rounds" 2>/dev/null | grep '^checkpoint '
rm -rf "$work/ck2"

echo "== round trip: fully_shard on 4 ranks -> DDP on 2 (tdist), FSDP2 on 2 (PyTorch)"
worker=$build/tests/torch/torch_checkpoint_worker
mkdir -p "$work/rt"
"$tdistrun" --standalone --nproc-per-node 4 "$worker" auto fully_shard save "$work/rt" >/dev/null 2>&1
if "$tdistrun" --standalone --nproc-per-node 2 "$worker" tcp ddp verify "$work/rt" >/dev/null 2>&1; then
  echo "tdist DDP on 2 ranks: every parameter bit for bit"
else
  echo "tdist DDP on 2 ranks: DIFFERENT"
fi
if python3 tests/torch/checkpoint_interop.py load "$work/rt/step-00000003" "$work/rt/ref-3.txt" 2 \
  fsdp2 >/dev/null 2>&1; then
  echo "PyTorch FSDP2 on 2 ranks (DCP, HuggingFaceStorageReader): every parameter bit for bit"
else
  echo "PyTorch FSDP2 on 2 ranks: DIFFERENT, or no torch >= 2.4 with safetensors"
fi
