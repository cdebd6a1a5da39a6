#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test (unit, MPI integration, python tools),
# then the sanitizer stage: an AddressSanitizer + UndefinedBehaviorSanitizer build (build-asan,
# CUDA, micro-benchmarks and the cpbench-sim sub-build off) running the unit tests, a P=2 and P=4 subset of the MPI tests
# and the fuzzed bad input (docs/RELIABILITY.md).
# Usage: scripts/test.sh [ctest arguments, e.g. -L verify]
#   CPBENCH_SANITIZER_STAGE=0 skips the sanitizer stage (it is skipped too when ctest arguments
#   select a subset); ASAN_BUILD_DIR (default build-asan) is where it builds; CTEST_JOBS (default
#   2) tests run at once (the tests assert deterministic things, so a loaded machine only slows
#   them; the MPI ones oversubscribe and yield).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
scripts/deps.sh
scripts/build.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Oversubscribed ranks must yield the CPU instead of spinning.
export OMPI_MCA_mpi_yield_when_idle=1
jobs=${CTEST_JOBS:-2}
(cd "${BUILD_DIR:-build}" && ctest --output-on-failure --timeout 900 -j "$jobs" "$@")

if [[ "${CPBENCH_SANITIZER_STAGE:-1}" == 0 || $# -gt 0 ]]; then
  exit 0
fi
# ---- sanitizer stage ----------------------------------------------------------------------------
asan_dir=${ASAN_BUILD_DIR:-build-asan}
echo "== sanitizer stage: ASan + UBSan build in $asan_dir"
# No cpbench-sim sub-build: no test of the subset below runs it, and it is a second compile of the tree.
# -O1 -g1 (line tables: ASan's reports keep file:line) compiles in about half the time of -O2 -g
# (measured on ulysses_ring_layer.cpp here: 13 s against 27-37 s); -O1 is what ASan's own
# documentation suggests for a usable speed.
BUILD_DIR=$asan_dir scripts/build.sh -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
  -DCPBENCH_CUDA=OFF -DCPBENCH_MICRO=OFF \
  -DCPBENCH_SIMGRID=OFF -DCPBENCH_SANITIZE=address,undefined
source "$root/tests/sanitizers/env.sh"
# Unit tests; the communicator at P=2 and 4; verify at P=2 and 4 (plain and USP mesh); every
# bad-input test (mostly P=2, some P=4); the report model at P=2 and 4; Helix decode at P=4 (its
# all-to-all and merge by destination); the dry run; the fuzz.
subset='^test_|^comm_mpi_np[24]$|^verify_p2_|^verify_p4_causal_gqa$|^verify_p4_usp_2x2_b2$|^verify_p4_helix_decode$|^fail_|^report_model_p2$|^report_model_p4_mesh$|^dry_run_|^fuzz_cli$'
(cd "$asan_dir" && ctest --output-on-failure --timeout 900 -j "$jobs" -R "$subset")
