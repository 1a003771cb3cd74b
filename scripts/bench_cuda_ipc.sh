#!/usr/bin/env bash
# cuda_ipc all_reduce against the staging path (cudaMemcpy to pinned host memory, shm
# all_reduce, cudaMemcpy back): 4 processes on one GPU, 1 MiB to 64 MiB, busbw of both and
# their ratio (issue 16's goal: >= 10x at 64 MiB). Skips, like gpu_check.sh, where no GPU
# is visible. Builds benchmarks/cuda_ipc_bench in the given folder (default build-bench).
# Usage: bash scripts/bench_cuda_ipc.sh [build folder] [nproc (4)]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-bench}
nproc=${2:-4}
command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU [0-9]' ||
  { echo "bench_cuda_ipc: no GPU visible; skipping"; exit 0; }
export PATH="$PATH:/usr/local/cuda/bin"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTDIST_CUDA=ON \
  -DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON >/dev/null
cmake --build "$build" -j"$(nproc)" --target cuda_ipc_bench >/dev/null
"$build/benchmarks/cuda_ipc_bench" --nproc "$nproc" --min-bytes $((1 << 20)) \
  --max-bytes $((64 << 20)) --iters 10
