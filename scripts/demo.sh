#!/usr/bin/env bash
# Installs what is missing, builds, runs the default comparison on 4 MPI ranks, prints the
# results table and writes a JSON report (out/demo_report.json) and plots (out/plots/).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
mkdir -p out
mpirun --oversubscribe -np 4 "${BUILD_DIR:-build}"/bench/cpbench run --out out/demo_report.json --trace out/demo_trace.json "$@"
if [[ -x scripts/validate_report.py ]]; then python3 scripts/validate_report.py out/demo_report.json; fi
if [[ -x scripts/plot_report.py ]]; then python3 scripts/plot_report.py out/demo_report.json -o out/plots; fi
