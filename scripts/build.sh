#!/usr/bin/env bash
# Configures and builds tdist (release with debug info, warnings as errors).
# Usage: bash scripts/build.sh [extra cmake args]
#          build/, everything, against the LibTorch CMake finds (Debian's 1.13)
#        bash scripts/build.sh --torch2 [extra cmake args]
#          build-torch2/, against the LibTorch inside the `python3` on PATH's torch package
#          (PyPI's 2.x; needs a CUDA toolkit for its TorchConfig), only what the LibTorch
#          checks need (target torch_checks; then: ctest --test-dir build-torch2 -L '^torch$')
set -euo pipefail
cd "$(dirname "$0")/.."
# Every CPU this may use (plain nproc honours OMP_NUM_THREADS, which test runs set to 1).
jobs=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
# With ccache, the second tree takes the first's objects of everything outside the LibTorch
# part (scripts/run_tests.sh sets CCACHE_BASEDIR and CCACHE_NOHASHDIR so paths match).
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
if [[ ${1:-} == --torch2 ]]; then
  shift
  torch_dir=$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))' 2>/dev/null) ||
    { echo "build.sh --torch2: python3 has no torch (bash scripts/setup.sh installs it)" >&2; exit 1; }
  if ! command -v nvcc >/dev/null && [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
    echo "build.sh --torch2: PyPI's torch is a CUDA build, and its TorchConfig.cmake needs a" \
      "CUDA toolkit (nvcc, e.g. /usr/local/cuda) even for CPU-only use; none found" >&2
    exit 1
  fi
  # One process loads one libnccl.so.2: PyPI's libtorch_cuda needs the wheel's own NCCL
  # (nvidia-nccl-cu*), so tdist's nccl backend is built against that one too (headers and
  # library), not the toolkit's.
  nccl=()
  nccl_dir=$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null) || true
  if [[ -n $nccl_dir && -f $nccl_dir/include/nccl.h && -f $nccl_dir/lib/libnccl.so.2 ]]; then
    nccl=(-DNCCL_INCLUDE_DIR="$nccl_dir/include" -DNCCL_LIBRARY="$nccl_dir/lib/libnccl.so.2")
  fi
  # The package folder itself too, so that TorchConfig takes its libtorch.so, not Debian's.
  cmake -S . -B build-torch2 -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTDIST_WERROR=ON \
    -DTDIST_BUILD_BENCHMARKS=OFF -DCMAKE_PREFIX_PATH="$torch_dir/share/cmake;$torch_dir" \
    "${nccl[@]}" "${launcher[@]}" "$@" >/dev/null
  cmake --build build-torch2 -j"$jobs" --target torch_checks
  exit 0
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTDIST_WERROR=ON "${launcher[@]}" "$@" \
  >/dev/null
cmake --build build -j"$jobs"
