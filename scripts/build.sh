#!/usr/bin/env bash
# Configures and builds tdist (release with line-table debug info, warnings as errors).
# Usage: bash scripts/build.sh [--target NAME]... [extra cmake args]
#          build/, everything (or only the named targets), against the LibTorch CMake finds
#          (Debian's 1.13)
#        bash scripts/build.sh --torch2 [extra cmake args]
#          build-torch2/, against the LibTorch inside the `python3` on PATH's torch package
#          (PyPI's 2.x; needs a CUDA toolkit for its TorchConfig), only what the LibTorch
#          checks need (target torch_checks; then: ctest --test-dir build-torch2 -L '^torch$')
# The trees are RelWithDebInfo at -O2 with -g1 (line tables and functions: backtraces and
# profiles, in about three quarters of -g's compile time), the tests' own sources at -O0
# without debug info, libtdist, tdistrun's library and tdist_torch as unity builds; a tree for a
# debugger is plain cmake (the README's "Building and installing"). Ninja builds a new tree
# where present.
set -euo pipefail
cd "$(dirname "$0")/.."
# Every CPU this may use (plain nproc honours OMP_NUM_THREADS, which test runs set to 1).
jobs=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
# With ccache, the second tree takes the first's objects of everything outside the LibTorch
# part (scripts/run_tests.sh sets CCACHE_BASEDIR and CCACHE_NOHASHDIR so paths match).
common=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DTDIST_WERROR=ON
        "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"
        "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" -DTDIST_TEST_DEBUG_INFO=OFF
        -DTDIST_UNITY_BUILD=ON)
if command -v ccache >/dev/null; then
  common+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  # The precompiled headers (LibTorch's in src/torch and tests/torch, gtest's in tests/)
  # and the sources that use them cached too: ccache hashes a .gch only with GCC's
  # -fpch-preprocess and this sloppiness.
  export CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
  common+=(-DCMAKE_CXX_FLAGS=-fpch-preprocess)
fi
# Ninja for a new tree (a tree made by another generator keeps it): it starts the next
# compile as soon as a core is free, across targets, where make waits per target.
generator() {
  if [[ ! -f $1/CMakeCache.txt ]] && command -v ninja >/dev/null; then echo "-GNinja"; fi
}
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
  cmake $(generator build-torch2) -S . -B build-torch2 "${common[@]}" \
    -DTDIST_BUILD_BENCHMARKS=OFF -DCMAKE_PREFIX_PATH="$torch_dir/share/cmake;$torch_dir" \
    "${nccl[@]}" "$@" >/dev/null
  cmake --build build-torch2 -j"$jobs" --target torch_checks
  exit 0
fi
targets=()
while [[ ${1:-} == --target ]]; do
  targets+=(--target "$2")
  shift 2
done
cmake $(generator build) -S . -B build "${common[@]}" "$@" >/dev/null
cmake --build build -j"$jobs" "${targets[@]}"
