#!/usr/bin/env bash
# Installs the built tdist into a temporary prefix, then builds a separate project against
# it twice: with find_package(tdist) and with pkg-config. Both programs must run.
# Usage: test_install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S "$src/tests/install/consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/consumer" >/dev/null
"$work/consumer/consumer"
libdir=$(find "$work/prefix" -name tdist.pc -printf '%h\n' | head -n 1)
PKG_CONFIG_PATH=$libdir c++ -o "$work/consumer_pc" "$src/tests/install/consumer/main.cc" \
  $(PKG_CONFIG_PATH=$libdir pkg-config --cflags --libs tdist)
"$work/consumer_pc"
