#!/usr/bin/env bash
# Installs the Debian packages tdist builds and tests with, only those that are missing,
# and PyPI's torch (pinned: 2.15.0) for the `python3` on PATH.
# Usage: bash scripts/setup.sh   (as root, or with sudo available)
set -euo pipefail

# iproute2: the multi-host launcher tests (network namespaces); python3-torch: the tests that
# run torch.distributed programs under tdistrun and read torch's error files.
# libtorch-dev: tdist_torch and train_fashion_mnist; libopenblas0-pthread: a fast BLAS for it
# (Debian's default is the slow reference one); dataset-fashion-mnist: the main job's data;
# libopenmpi-dev, openmpi-bin: the mpi backend and its tests under mpirun; pybind11-dev,
# python3-pytest: the Python package built and tested against Debian's torch 1.13.
# nlohmann-json3-dev: every JSON tdist writes or reads (flight records, timelines, error files,
# the status reply, tdistrun's failure records); header-only, needed to build only.
# libcli11-dev: the command lines of tdistrun, tdist-bench, tdist-status and the benchmarks.
# libclang-rt-14-dev: clang's sanitizer and libFuzzer runtimes (TDIST_FUZZ; only recommended).
# openssl: certificates for the multi-host TLS scenarios.
# ccache: the build trees share what they compile alike (scripts/build.sh uses it when present).
# lld: the linker the trees use where it is present (TDIST_USE_LLD): a third of ld.bfd's time.
# ninja-build: the generator of the scripts' build trees (it keeps both cores compiling).
# python3-pytest-xdist: the Python tests one per CPU at a time (scripts/test_python.sh).
# etcd-server: the EtcdStore and tdistrun --rdzv-backend etcd-v2 tests start a local etcd.
packages=(build-essential cmake pkg-config clang libgtest-dev libgmock-dev libbenchmark-dev
          libssl-dev iproute2 python3-torch zlib1g-dev libtorch-dev libopenblas0-pthread
          dataset-fashion-mnist libopenmpi-dev openmpi-bin pybind11-dev python3-pytest
          nlohmann-json3-dev libcli11-dev libclang-rt-14-dev ccache openssl lld ninja-build
          python3-pytest-xdist etcd-server)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi

# PyPI's torch for the `python3` on PATH, pinned to the version tdist is tested with: its
# wheel is also the LibTorch 2.x of the second build tree (scripts/build.sh --torch2).
# numpy only silences torch's warning that it is missing.
torch_version=2.15.0
if python3 -c "import torch; assert torch.__version__.startswith('$torch_version')" 2>/dev/null; then
  echo "setup: torch $torch_version present for $(command -v python3)"
else
  echo "setup: pip install torch==$torch_version numpy for $(command -v python3)"
  python3 -m pip install -q --root-user-action=ignore "torch==$torch_version" numpy
fi
python3 -c 'import numpy' 2>/dev/null || python3 -m pip install -q --root-user-action=ignore numpy
# pytest runs the Python package's tests (tests/python), pytest-xdist several at a time.
python3 -c 'import pytest' 2>/dev/null || python3 -m pip install -q --root-user-action=ignore pytest
python3 -c 'import xdist' 2>/dev/null ||
  python3 -m pip install -q --root-user-action=ignore pytest-xdist
# expecttest: torch's test utilities import it (tests/python/torch_suite runs torch's own
# distributed test suite).
python3 -c 'import expecttest' 2>/dev/null ||
  python3 -m pip install -q --root-user-action=ignore expecttest
# safetensors: PyTorch's HuggingFaceStorageReader/Writer read and write tdist's checkpoint
# format with it (tests/python's checkpoint interop).
python3 -c 'import safetensors' 2>/dev/null ||
  python3 -m pip install -q --root-user-action=ignore safetensors
