#!/usr/bin/env bash
# Installs the built tdist into a temporary prefix, then builds a separate project against
# it twice: with find_package(tdist) and with pkg-config. Both programs must run. With
# PART=torch (the build has the LibTorch part) it also builds a LibTorch program that
# trains with tdist::torch::DistributedDataParallel twice (find_package(tdist) with
# tdist::torch, and pkg-config tdist-torch) and runs each under the installed tdistrun
# on 2 ranks: both ranks must end with the same parameters.
# Usage: test_install.sh BUILD_DIR SOURCE_DIR [torch|no-torch]
set -euo pipefail
build=$1 src=$2 part=${3:-no-torch}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

fail() {
  echo "FAILED: $*" >&2
  exit 1
}

prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
[[ -x $prefix/bin/tdistrun ]] || fail "tdistrun is not installed in $prefix/bin"
libdir=$(find "$prefix" -name tdist.pc -printf '%h\n' | head -n 1)
export PKG_CONFIG_PATH=$libdir

cmake -S "$src/tests/install/consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/consumer" >/dev/null
"$work/consumer/consumer"
c++ -o "$work/consumer_pc" "$src/tests/install/consumer/main.cc" \
  $(pkg-config --cflags --libs tdist)
"$work/consumer_pc"
[[ $part == torch ]] || exit 0

# The LibTorch consumers: the CMake one needs nothing but tdist's prefix (the package
# finds the LibTorch tdist was built with); the two builds run side by side.
[[ -f $libdir/tdist-torch.pc ]] || fail "no tdist-torch.pc in $libdir"
cmake -S "$src/tests/install/consumer_torch" -B "$work/consumer_torch" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >"$work/cmake.log" 2>&1 &&
  cmake --build "$work/consumer_torch" >>"$work/cmake.log" 2>&1 &
cmake_job=$!
c++ -O1 -o "$work/consumer_torch_pc" "$src/tests/install/consumer_torch/main.cc" \
  $(pkg-config --cflags --libs tdist-torch) || fail "pkg-config tdist-torch build"
wait "$cmake_job" || fail "find_package(tdist) + tdist::torch build: $(cat "$work/cmake.log")"
grep "consumer_torch: LibTorch" "$work/cmake.log"

# run PROGRAM: 2 ranks under the installed tdistrun; both print the same checksum.
run() {
  local out=$work/out
  timeout 120 "$prefix/bin/tdistrun" --standalone --nproc-per-node 2 "$1" >"$out" ||
    fail "$1 under tdistrun: exit status $?: $(cat "$out")"
  cat "$out"
  grep -q "consumer_torch ok" "$out" || fail "$1: rank 0 did not finish"
  local sums
  sums=$(sed -nE 's|.*rank [01]/2: checksum (.*)$|\1|p' "$out" | sort -u)
  [[ $(grep -c "/2: checksum" "$out") == 2 && $(wc -l <<<"$sums") == 1 ]] ||
    fail "$1: the ranks' checksums differ or are missing"
}
run "$work/consumer_torch/consumer_torch"
run "$work/consumer_torch_pc"
echo "PASSED: DDP under the installed tdistrun, find_package(tdist) and pkg-config tdist-torch"
