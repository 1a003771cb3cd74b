#!/usr/bin/env bash
# Sets everything up and runs every test: installs missing Debian packages, checks that
# clang builds tdist warning-free too, builds with g++ and runs the suite under CTest.
# Usage: bash scripts/run_tests.sh
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
ctest --test-dir build --output-on-failure -j"$(nproc)"
