#!/usr/bin/env bash
# The GPU checks of the nccl backend (tests/nccl/nccl_gpu_test) and of the cuda_ipc backend
# (tests/cuda_ipc/cuda_ipc_gpu_test: 2, 4 and 8 processes on one GPU), CTest label `gpu`,
# which belong to the CTest configuration `gpu` so that a plain `ctest` never runs them.
# Where no GPU is visible (no nvidia-smi, nvidia-smi lists none, or the CUDA runtime reports
# no device) it prints "gpu_check: no GPU visible (<why>); skipping" and exits 0. Otherwise
# it configures and builds what the checks need (CUDA and NCCL required, warnings are
# errors; an existing build folder is reused), runs them and exits with their status.
# Usage: bash scripts/gpu_check.sh [build folder, default build-gpu]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpu}
skip() {
  echo "gpu_check: no GPU visible ($*); skipping"
  exit 0
}

# Before building: the driver's view.
command -v nvidia-smi >/dev/null || skip "nvidia-smi is not installed"
gpus=$(nvidia-smi -L 2>&1) || skip "nvidia-smi -L failed: $(echo "$gpus" | head -1)"
echo "$gpus" | grep -q '^GPU [0-9]' || skip "nvidia-smi lists no GPU"
echo "gpu_check: nvidia-smi lists:"
echo "$gpus" | sed 's/^/  /'

export PATH="$PATH:/usr/local/cuda/bin"
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
echo "gpu_check: configuring and building $build (target tests_gpu)"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTDIST_WERROR=ON -DTDIST_CUDA=ON \
  -DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON "${launcher[@]}" >"$log" 2>&1 ||
  { tail -40 "$log"; echo "gpu_check: configure failed"; exit 1; }
grep 'tdist: CUDA' "$log" || true
grep -q 'CUDA kernels (cuda_ipc backend): found' "$log" ||
  { echo "gpu_check: the cuda_ipc backend was not built (no working nvcc?)"; exit 1; }
cmake --build "$build" -j"$(nproc)" --target tests_gpu >"$log" 2>&1 ||
  { tail -60 "$log"; echo "gpu_check: build failed"; exit 1; }

# The CUDA runtime's view, through the test binary's own probe.
count=$("$build/tests/nccl/nccl_gpu_test" --count-devices 2>&1) ||
  skip "the CUDA runtime reports: $count"
[ "$count" -gt 0 ] 2>/dev/null || skip "the CUDA runtime reports $count devices"
echo "gpu_check: the CUDA runtime sees $count device(s); running the gpu tests"
export OMP_NUM_THREADS=1
status=0
ctest --test-dir "$build" -C gpu -L '^gpu$' --output-on-failure || status=$?
echo "gpu_check: done (status $status)"
exit "$status"
