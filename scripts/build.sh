#!/usr/bin/env bash
# Configures and builds tdist in build/ (release with debug info, warnings as errors).
# Usage: bash scripts/build.sh [extra cmake args]
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTDIST_WERROR=ON "$@" >/dev/null
cmake --build build -j"$(nproc)"
