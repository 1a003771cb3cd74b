#!/usr/bin/env bash
# Sets everything up and runs every test: installs missing Debian packages (and PyPI's
# torch), checks that clang builds tdist warning-free too, builds with g++ and runs the
# suite under CTest; then builds the LibTorch part again against PyPI's LibTorch 2.x
# (build-torch2/, only what those checks need) and runs the LibTorch tests there
# (ctest label `torch`: tests/torch, the main job on a subset, the install test); last,
# the Python package (tdist as a torch.distributed backend) is installed and its pytest
# suite runs on both PyTorches (scripts/test_python.sh).
# Usage: bash scripts/run_tests.sh   (TDIST_SKIP_CLANG=1, TDIST_SKIP_TORCH2=1 leave those out)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

if [ "${TDIST_SKIP_CLANG:-0}" != 1 ]; then
  echo "== clang build (warnings are errors)"
  CXX=clang++ CC=clang cmake -S . -B build-clang -DTDIST_WERROR=ON >/dev/null
  cmake --build build-clang -j"$(nproc)" >/dev/null
fi

echo "== g++ build (warnings are errors)"
bash scripts/build.sh
echo "== tests"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
status=0
ctest --test-dir build --output-on-failure -j"$(nproc)" || status=$?

if [ "${TDIST_SKIP_TORCH2:-0}" != 1 ]; then
  echo "== LibTorch 2.x (PyPI's torch): g++ build of the LibTorch part (warnings are errors)"
  bash scripts/build.sh --torch2 >/dev/null
  echo "== LibTorch 2.x tests"
  ctest --test-dir build-torch2 -L '^torch$' --output-on-failure -j"$(nproc)" || status=$?
  bash scripts/test_python.sh torch2 || status=$?
fi
bash scripts/test_python.sh torch1 || status=$?
exit "$status"
