#!/usr/bin/env bash
# The Python package's tests (tests/python, pytest) against both PyTorches:
#   torch 2.x (the `python3` on PATH, PyPI's torch): `pip install .` of this repository,
#     built in the existing CMake tree build-torch2/ (scripts/build.sh --torch2) so that
#     nothing built there is compiled again, then pytest with that python;
#   torch 1.13 (/usr/bin/python3, Debian's python3-torch): Debian marks its python
#     externally managed, so the extension is built in the 1.13 tree build/ and the
#     package is run from there (PYTHONPATH), then pytest with /usr/bin/python3.
# Usage: bash scripts/test_python.sh [torch2|torch1|all]   (after scripts/build.sh and
#        scripts/build.sh --torch2; default all)
set -euo pipefail
cd "$(dirname "$0")/.."
# Every CPU this may use (plain nproc honours OMP_NUM_THREADS, which test runs set to 1).
jobs=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
which=${1:-all}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=1
export TDIST_TDISTRUN=$PWD/build/tools/tdistrun
status=0
# pytest_args PYTHON: one test per CPU at a time where pytest-xdist is there (each test's
# ranks meet through a file:// rendezvous of its own, or tdistrun on port 0).
pytest_args() {
  printf '%s\n' -q -p no:cacheprovider
  if "$1" -c 'import xdist' 2>/dev/null; then printf '%s\n' -n "$jobs"; fi
}

if [[ $which == all || $which == torch2 ]]; then
  echo "== Python package on torch $(python3 -c 'import torch; print(torch.__version__)'): pip install ."
  TDIST_CMAKE_BUILD_DIR=$PWD/build-torch2 python3 -m pip install -q --root-user-action=ignore .
  (cd tests/python && python3 -m pytest $(pytest_args python3)) || status=$?
fi

if [[ $which == all || $which == torch1 ]]; then
  py=/usr/bin/python3
  echo "== Python package on torch $($py -c 'import torch; print(torch.__version__)') (Debian's)"
  abi=$($py -c 'import torch._C as c; print(";".join(f"{k[1:]}=\"{getattr(c, k)}\"" for k in
        ("_PYBIND11_COMPILER_TYPE", "_PYBIND11_STDLIB", "_PYBIND11_BUILD_ABI")))')
  cmake -S . -B build -DTDIST_BUILD_PYTHON=ON -DPython3_EXECUTABLE=$py \
    "-DTDIST_PYBIND11_ABI_DEFINITIONS=$abi" >/dev/null
  cmake --build build -j"$jobs" --target tdist_python >/dev/null
  pkg=build/python-package
  rm -rf "$pkg" && mkdir -p "$pkg/tdist"
  cp python/tdist/*.py "$pkg/tdist/" && cp build/src/python/_C*.so "$pkg/tdist/"
  (cd tests/python && PYTHONPATH=$PWD/../../$pkg $py -m pytest $(pytest_args $py)) || status=$?
fi
exit "$status"
