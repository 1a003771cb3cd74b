#!/usr/bin/env bash
# Sets everything up and runs every test: installs missing Debian packages (and PyPI's
# torch); builds with clang under ASan+UBSan (build-clang/, warnings are errors, only the
# core, store, collectives and pg suites and the libFuzzer targets) and runs them there, each
# fuzz target 10 s (ctest labels); builds everything with g++ and runs the whole suite
# under CTest; then builds the LibTorch part again against PyPI's LibTorch 2.x
# (build-torch2/, only what those checks need; ccache hands it build/'s other objects) and
# runs the LibTorch tests there (ctest label `torch`: tests/torch, the main job on a subset,
# the install test); the Python package (tdist as a torch.distributed backend) is installed
# and its pytest suite runs on both PyTorches (scripts/test_python.sh); last, a TSan build
# (build-tsan/, only those suites) runs the store, transport and pg suites; where a GPU is
# visible, scripts/gpu_check.sh runs the nccl backend's GPU tests (build-gpu/).
# Tests run TDIST_TEST_JOBS at a time (default: two per CPU in the g++ trees, whose tests
# wait more than they compute, one in the sanitizer trees, whose tests compute): each
# gtest test is its own process. The ASan tree runs the pg suites over
# tcp and shm: `auto` on one host is the shm channels through the same connect_comm and
# engine (the g++ tree runs all three). The TSan tree runs them over tcp: the threads of the
# pg layer are the same over every transport, and each transport's own threads are in the
# transport label's conformance suites, which run every case over every transport. Each
# stage prints how long the run has taken so far, and the run ends with a table of every
# stage's minutes.
# Usage: bash scripts/run_tests.sh   (TDIST_SKIP_CLANG=1, TDIST_SKIP_TORCH2=1,
#        TDIST_SKIP_TSAN=1 leave those out)
set -euo pipefail
cd "$(dirname "$0")/.."
# stage NAME: one line with the time so far; the table at the end has each stage's share.
stage_names=() stage_starts=()
stage() {
  echo "== $* [$((SECONDS / 60))m$((SECONDS % 60))s]"
  stage_names+=("$*") stage_starts+=("$SECONDS")
}
stage_table() {
  local i n=${#stage_names[@]} end
  echo "== time per stage (minutes)"
  for ((i = 0; i < n; i++)); do
    end=$SECONDS
    ((i + 1 < n)) && end=${stage_starts[i + 1]}
    awk -v s=$((end - stage_starts[i])) -v name="${stage_names[i]}" \
      'BEGIN { printf "%6.1f  %s\n", s / 60, name }'
  done
  awk -v s=$SECONDS 'BEGIN { printf "%6.1f  whole run\n", s / 60 }'
}
# quiet CMD...: CMD with its standard output kept aside (a build's progress lines); when it
# fails, the last 60 lines of that output (the compiler's errors) are shown, then its status
# returned, which ends the run (set -e): a failed build never ends the log without a word.
quiet() {
  local out rc=0
  out=$(mktemp)
  "$@" >"$out" || rc=$?
  if ((rc != 0)); then
    echo "-- failed (exit $rc): $*; the last lines of its output:"
    tail -n 60 "$out"
  fi
  rm -f "$out"
  return "$rc"
}
stage "setup: Debian packages and PyPI's torch (scripts/setup.sh)"
bash scripts/setup.sh
# Compile jobs: every CPU this run may use. Not `nproc` once OMP_NUM_THREADS=1 is set below:
# nproc honours it and would say 1. Tests: as many at a time under a sanitizer (the CPUs
# were 90% busy), twice as many in the g++ trees (68% busy at one per CPU; two per CPU
# took the suite from 305 to 245 s). The network-namespace tests take the whole machine
# (CTest's RUN_SERIAL, tests/launcher/CMakeLists.txt).
jobs=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
test_jobs=${TDIST_TEST_JOBS:-$jobs}
plain_test_jobs=${TDIST_TEST_JOBS:-$((2 * jobs))}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
# ccache (scripts/build.sh): paths relative to the checkout and the build folder left out of
# the hash, so build-torch2/ reuses build/'s objects; the sources that use a precompiled
# header cached too (every test's gtest one, tests/CMakeLists.txt), as build.sh says.
export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
export CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
status=0
# A failed stage is recorded with, for a ctest run, the tests that failed (ctest's own list),
# and all of it is repeated at the end: the run's last lines say what failed, even where
# only its tail is kept.
failures=()
failed() {
  local rc=$1 name=$2 log=${3:-}/Testing/Temporary/LastTestsFailed.log
  status=$rc
  failures+=("$name (exit $rc)")
  if [ -n "${3:-}" ] && [ -f "$log" ]; then
    while IFS= read -r line; do failures+=("  test $line"); done <"$log"
  fi
}

# The sanitizers' runtime options, inherited by every process a test starts: the first
# finding ends the process with an error (a worker's fails the test that started it).
# Suppressions: only the sanitizers' own false positives, each explained in its file.
supp="$PWD/tests/sanitizers"
asan_env=(ASAN_OPTIONS=detect_leaks=1:halt_on_error=1
          UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp)
tsan_env=(TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$supp/tsan.supp)
# Sanitized trees leave LibTorch out (its tests run in the g++ trees).
# -O1 and line tables only: what the sanitizers' reports need (file:line in every frame),
# compiled in about two thirds of -O2 -g's time; libtdist and tdistrun's as unity builds.
san_flags="-O1 -gline-tables-only -DNDEBUG"
san_cmake=(-DTDIST_WERROR=ON -DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON -DTDIST_BUILD_BENCHMARKS=OFF
           -DTDIST_BUILD_EXAMPLES=OFF "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=$san_flags"
           "-DCMAKE_C_FLAGS_RELWITHDEBINFO=$san_flags" -DTDIST_UNITY_BUILD=ON)
if command -v ccache >/dev/null; then san_cmake+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
# Ninja where present (scripts/build.sh says why); a tree made with another generator keeps it.
generator() {
  if [ ! -f "$1/CMakeCache.txt" ] && command -v ninja >/dev/null; then echo "-GNinja"; fi
}

if [ "${TDIST_SKIP_CLANG:-0}" != 1 ]; then
  stage "clang ASan+UBSan build (warnings are errors)"
  CXX=clang++ CC=clang quiet cmake $(generator build-clang) -S . -B build-clang \
    "${san_cmake[@]}" -DTDIST_SANITIZE=address,undefined -DTDIST_FUZZ=ON -DTDIST_FUZZ_SECONDS=10
  quiet cmake --build build-clang -j"$jobs" \
    --target tests_core tests_store tests_collectives tests_pg fuzzers
  stage "ASan+UBSan tests: core, store, collectives, pg; fuzz targets"
  env "${asan_env[@]}" ctest --test-dir build-clang -L '^(core|store|collectives|pg|fuzz)$' \
    -E '^pg_[a-z0-9_]+_auto[.]' -j"$test_jobs" --output-on-failure ||
    failed $? "ASan+UBSan tests" build-clang
fi

stage "g++ build (warnings are errors)"
# The LibTorch lock checks (thread_safety_torch) need one LibTorch: the 2.x tree's below.
plain_cmake=()
if [ "${TDIST_SKIP_TORCH2:-0}" != 1 ]; then plain_cmake+=(-DTDIST_THREAD_SAFETY_TORCH=OFF); fi
bash scripts/build.sh "${plain_cmake[@]}"
stage "tests"
ctest --test-dir build -j"$plain_test_jobs" --output-on-failure || failed $? "tests" build

if [ "${TDIST_SKIP_TORCH2:-0}" != 1 ]; then
  stage "LibTorch 2.x (PyPI's torch): g++ build of the LibTorch part (warnings are errors)"
  quiet bash scripts/build.sh --torch2
  stage "LibTorch 2.x tests"
  ctest --test-dir build-torch2 -L '^torch$' -j"$plain_test_jobs" --output-on-failure ||
    failed $? "LibTorch 2.x tests" build-torch2
  stage "Python package on torch 2.x"
  bash scripts/test_python.sh torch2 || failed $? "Python package on torch 2.x"
fi
stage "Python package on torch 1.13"
bash scripts/test_python.sh torch1 || failed $? "Python package on torch 1.13"

if [ "${TDIST_SKIP_TSAN:-0}" != 1 ]; then
  stage "clang TSan build of the store, transport and pg suites"
  CXX=clang++ CC=clang quiet cmake $(generator build-tsan) -S . -B build-tsan "${san_cmake[@]}" \
    -DTDIST_SANITIZE=thread -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON
  quiet cmake --build build-tsan -j"$jobs" --target tests_store tests_transport tests_pg
  stage "TSan tests: store, transport, pg"
  # Left out: the pg suites' auto and shm copies, and the transport conformance suite's
  # plain tcp and mixed entries, whose code the tcp_lazy, tcp_tls and mixed_context
  # entries run here too (the g++ tree runs them all).
  env "${tsan_env[@]}" ctest --test-dir build-tsan -L '^(store|transport|pg)$' \
    -E '^pg_[a-z0-9_]+_(auto|shm)[.]|/(tcp|mixed)(_world[0-9]+)?( |$)' -j"$test_jobs" \
    --output-on-failure ||
    failed $? "TSan tests" build-tsan
fi
stage "GPU checks (scripts/gpu_check.sh: build-gpu/; skipped where no GPU is visible)"
bash scripts/gpu_check.sh || failed $? "GPU checks" build-gpu

stage "done (status $status)"
stage_table
for f in "${failures[@]}"; do echo "failed: $f"; done
exit "$status"
