#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test (unit, MPI integration, python tools).
# Usage: scripts/test.sh [ctest arguments, e.g. -L verify]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Oversubscribed ranks must yield the CPU instead of spinning.
export OMPI_MCA_mpi_yield_when_idle=1
cd "${BUILD_DIR:-build}"
ctest --output-on-failure --timeout 900 "$@"
