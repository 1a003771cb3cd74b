#!/usr/bin/env bash
# The GPU checks (CTest label `gpu`, which belong to the CTest configuration `gpu` so that a
# plain `ctest` never runs them): the nccl backend's (tests/nccl/nccl_gpu_test) and the
# cuda_ipc backend's (tests/cuda_ipc/cuda_ipc_gpu_test: 2, 4 and 8 processes on one GPU), in
# the build folder, without torch; and the LibTorch layer's on CUDA tensors (tests/torch/gpu,
# the main job --device cuda; in <build folder>-torch2, against PyPI's CUDA torch).
# Where no GPU is visible (no nvidia-smi, nvidia-smi lists none, or the CUDA runtime reports
# no device) it prints "gpu_check: no GPU visible (<why>); skipping" and exits 0. Otherwise
# it configures and builds what the checks need (CUDA and NCCL required, warnings are
# errors; an existing build folder is reused), runs them and exits with their status.
# Usage: bash scripts/gpu_check.sh [build folder, default build-gpu]
set -euo pipefail
cd "$(dirname "$0")/.."
# Every CPU this may use (plain nproc honours OMP_NUM_THREADS, which test runs set to 1).
jobs=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
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
cmake --build "$build" -j"$jobs" --target tests_gpu >"$log" 2>&1 ||
  { tail -60 "$log"; echo "gpu_check: build failed"; exit 1; }

# The CUDA runtime's view, through the test binary's own probe.
count=$("$build/tests/nccl/nccl_gpu_test" --count-devices 2>&1) ||
  skip "the CUDA runtime reports: $count"
[ "$count" -gt 0 ] 2>/dev/null || skip "the CUDA runtime reports $count devices"
echo "gpu_check: the CUDA runtime sees $count device(s); running the gpu tests"
export OMP_NUM_THREADS=1
status=0
ctest --test-dir "$build" -C gpu -L '^gpu$' --output-on-failure || status=$?

# The LibTorch layer's CUDA tests (tests/torch/gpu and the main job --device cuda) need a
# LibTorch with CUDA: PyPI's torch of the python3 on PATH, in $build-torch2, configured as
# scripts/build.sh --torch2 does (tdist's nccl backend against the wheel's own NCCL, since
# one process loads one libnccl.so.2). Without such a torch they are reported as not run.
torch_dir=$(python3 -c 'import os, torch; assert torch.version.cuda; print(os.path.dirname(torch.__file__))' 2>/dev/null) || torch_dir=""
if [[ -z $torch_dir ]]; then
  echo "gpu_check: python3 has no CUDA-enabled torch: the LibTorch CUDA tests did not run"
  status=1
else
  nccl=()
  nccl_dir=$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null) || true
  if [[ -n $nccl_dir && -f $nccl_dir/lib/libnccl.so.2 ]]; then
    nccl=(-DNCCL_INCLUDE_DIR="$nccl_dir/include" -DNCCL_LIBRARY="$nccl_dir/lib/libnccl.so.2")
  fi
  echo "gpu_check: configuring and building $build-torch2 (torch at $torch_dir, target tests_gpu)"
  cmake -S . -B "$build-torch2" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTDIST_WERROR=ON \
    -DTDIST_CUDA=ON -DTDIST_BUILD_BENCHMARKS=OFF \
    -DCMAKE_PREFIX_PATH="$torch_dir/share/cmake;$torch_dir" "${nccl[@]}" "${launcher[@]}" \
    >"$log" 2>&1 || { tail -40 "$log"; echo "gpu_check: torch configure failed"; exit 1; }
  cmake --build "$build-torch2" -j"$jobs" --target tests_gpu >"$log" 2>&1 ||
    { tail -60 "$log"; echo "gpu_check: torch build failed"; exit 1; }
  # Only the LibTorch ones here: nccl_gpu_test ran above.
  ctest --test-dir "$build-torch2" -C gpu -L '^gpu$' -R 'torch_cuda_gpu_test|_cuda$' \
    --output-on-failure || status=$?
fi
echo "gpu_check: done (status $status)"
exit "$status"
