#!/usr/bin/env bash
# Configures and builds cpbench in ${BUILD_DIR:-build}. Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release "$@" >"$BUILD_DIR.configure.log" 2>&1 || { cat "$BUILD_DIR.configure.log"; exit 1; }
grep -E "^-- cpbench:" "$BUILD_DIR.configure.log" || true
cmake --build "$BUILD_DIR" -j "$JOBS"
