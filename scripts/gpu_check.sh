#!/usr/bin/env bash
# gpu_check.sh: one command that builds cpbench with the CUDA backend on a GPU machine and checks
# it: CUDA unit tests, `cpbench verify --backend cuda` on 1 rank (and 2 and 4 ranks sharing the
# GPU with --comm mpi when MPI is available), then the attention kernel benchmark. Prints a
# summary table last and writes ${OUT:-out}/gpu_check.json (+ logs under ${OUT}/gpu_check_logs/).
#
# Needs: the CUDA toolkit (nvcc, cuBLAS; NCCL optional) and CMake. No network.
# MPI: a system MPI (mpicxx + mpirun on PATH) is used if present. Otherwise, if
# ./third_party_debs/*.deb exist (scripts/fetch_openmpi_debs.sh, run on a machine with network),
# Open MPI and the build dependencies are unpacked from them into $BUILD/_debroot with dpkg -x
# (nothing is installed system-wide). Otherwise the build is CPBENCH_MPI=OFF (one rank).
# CAVEAT: .debs built for another distribution/glibc may not load (e.g. Debian 12 packages need
# glibc >= 2.36); the script tests `mpirun --version` and falls back to the MPI-less build.
#
# Environment: OUT (out), BUILD (build-gpu), JOBS (nproc), CUDA_ARCH (auto: from nvidia-smi),
#   BUDGET_S (480: the bench shrinks to fit what is left), GPU_CHECK_MPI=auto|system|debs|off,
#   BENCH_SEQS (4096,16384,65536).
# Exit status: 0 when every step that ran passed, 1 otherwise.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LOGS=$OUT/gpu_check_logs
mkdir -p "$LOGS"
BUILD=${BUILD:-$ROOT/build-gpu}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 4)}
BUDGET_S=${BUDGET_S:-480}
MPI_CHOICE=${GPU_CHECK_MPI:-auto}
BENCH_SEQS=${BENCH_SEQS:-4096,16384,65536}
T0=$SECONDS

names=() states=() secs=() details=()
record() { names+=("$1"); states+=("$2"); secs+=("$3"); details+=("$4"); }
elapsed() { echo $((SECONDS - T0)); }
say() { echo "[gpu_check $(elapsed)s] $*"; }

# run NAME TIMEOUT CMD...: output to $LOGS/NAME.log; records ok / FAIL / TIMEOUT.
run() {
  local name=$1 limit=$2
  shift 2
  local t=$SECONDS rc
  say "$name: $*"
  timeout --kill-after=10 "$limit" "$@" >"$LOGS/$name.log" 2>&1
  rc=$?
  local dt=$((SECONDS - t)) st=ok detail=""
  if ((rc == 124 || rc == 137)); then
    st=TIMEOUT detail="killed after ${limit}s"
  elif ((rc != 0)); then
    local line
    line=$(grep -m1 -E "error|FAILED|Error" "$LOGS/$name.log" || grep -v '^[[:space:]-]*$' "$LOGS/$name.log" | tail -1)
    st=FAIL detail="exit $rc: $(echo "$line" | cut -c1-110)"
  fi
  record "$name" "$st" "$dt" "$detail"
  [[ $st == ok ]] || say "$name: $st ($detail) -- see $LOGS/$name.log"
  return $rc
}
skip() { record "$1" skipped 0 "$2"; say "$1: skipped ($2)"; }

# ---- toolchain ------------------------------------------------------------------------------------
command -v nvcc >/dev/null || { [[ -x /usr/local/cuda/bin/nvcc ]] && export PATH=/usr/local/cuda/bin:$PATH; }
for tool in cmake nvcc; do
  command -v $tool >/dev/null || { echo "gpu_check: $tool not found" >&2; exit 1; }
done
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
CUDA_VER=$(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')
say "GPU: ${GPU_NAME:-none found} (driver ${DRIVER:-?}), CUDA toolkit $CUDA_VER, $JOBS jobs"

ARCH=${CUDA_ARCH:-auto}
if [[ $ARCH == auto ]]; then
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
  ARCH=${cap:-"80;90"}
fi

# ---- MPI: system, carried .debs, or none -----------------------------------------------------------
MPI_MODE=off MPIRUN="" CMAKE_EXTRA=()
use_debs() {
  local pre=$BUILD/_debroot
  local debs=("$ROOT"/third_party_debs/*.deb)
  [[ -e ${debs[0]} ]] || return 1
  command -v dpkg-deb >/dev/null || { say "no dpkg-deb to unpack third_party_debs"; return 1; }
  rm -rf "$pre" && mkdir -p "$pre"
  for f in "${debs[@]}"; do dpkg-deb -x "$f" "$pre" || return 1; done
  local lib=$pre/usr/lib/x86_64-linux-gnu
  # dpkg -x does not run maintainer scripts: recreate the alternatives links we need.
  ln -sf mpirun.openmpi "$pre/usr/bin/mpirun"
  ln -sf mpicxx.openmpi "$pre/usr/bin/mpicxx"
  ln -sf mpicc.openmpi "$pre/usr/bin/mpicc"
  if [[ -e $lib/openblas-pthread/libopenblas.so ]]; then
    ln -sf openblas-pthread/libopenblas.so "$lib/libopenblas.so"
    ln -sf openblas-pthread/libblas.so "$lib/libblas.so"
  fi
  export OPAL_PREFIX=$pre/usr  # relocates Open MPI (wrapper data, components, help files)
  export PATH=$pre/usr/bin:$PATH
  export LD_LIBRARY_PATH=$lib:$lib/openmpi/lib:$lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  if ! "$pre/usr/bin/mpirun.openmpi" --version >"$LOGS/mpi_debs.log" 2>&1; then
    say "the carried Open MPI does not run here (glibc or library mismatch?): $(tail -1 "$LOGS/mpi_debs.log")"
    return 1
  fi
  MPIRUN=$pre/usr/bin/mpirun.openmpi
  CMAKE_EXTRA+=(-DCMAKE_PREFIX_PATH="$pre/usr" -DMPI_CXX_COMPILER="$pre/usr/bin/mpicxx.openmpi"
                -DMPIEXEC_EXECUTABLE="$MPIRUN")
  return 0
}
case $MPI_CHOICE in
  system|auto)
    if command -v mpicxx >/dev/null && command -v mpirun >/dev/null; then
      MPI_MODE=system MPIRUN=$(command -v mpirun)
    elif [[ $MPI_CHOICE == auto ]] && use_debs; then
      MPI_MODE=debs
    fi ;;
  debs) use_debs && MPI_MODE=debs ;;
  off) ;;
esac
say "MPI: $MPI_MODE${MPIRUN:+ ($MPIRUN)}"
# Open MPI on one node, possibly as root in a container: no ssh, no CMA, oversubscription allowed.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_plm_rsh_agent=false

# ---- build -------------------------------------------------------------------------------------------
MPI_FLAG=ON
[[ $MPI_MODE == off ]] && MPI_FLAG=OFF
BUILD_OK=0
if run configure 120 cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCPBENCH_CUDA=ON \
     -DCPBENCH_MPI=$MPI_FLAG -DCPBENCH_MICRO=OFF -DCMAKE_CUDA_ARCHITECTURES="$ARCH" "${CMAKE_EXTRA[@]}"; then
  if run build 330 cmake --build "$BUILD" -j "$JOBS" --target cpbench test_cuda_kernels test_cuda_emu cpbench_cuda_bench; then
    BUILD_OK=1
  fi
fi
NCCL_BUILT=0
grep -q "NCCL .*--comm nccl available" "$LOGS/configure.log" 2>/dev/null && NCCL_BUILT=1

CPBENCH=$(find "$BUILD" -maxdepth 3 -type f -name cpbench -perm -u+x 2>/dev/null | head -1)
UNIT=$BUILD/tests/unit/test_cuda_kernels
EMU=$BUILD/tests/unit/test_cuda_emu
BENCH=$BUILD/kernels/cuda/cpbench_cuda_bench
SHAPE=(--dtype bf16 --seq 1024 --heads 8 --kv-heads 4 --head-dim 128 --dim 1024 --no-progress)

if ((BUILD_OK)); then
  # ---- unit tests: on a GPU machine a skip is a failure ----------------------------------------
  run emulated_kernels 120 "$EMU"
  if run cuda_unit_tests 180 "$UNIT"; then
    if grep -q "SKIPPED: no CUDA device" "$LOGS/cuda_unit_tests.log"; then
      states[${#states[@]} - 1]=FAIL
      details[${#details[@]} - 1]="the tests saw no CUDA device"
    fi
  fi
  # ---- verify ---------------------------------------------------------------------------------
  if [[ -z $CPBENCH ]]; then
    skip verify_1rank "no cpbench binary in $BUILD"
  elif [[ $MPI_MODE == off ]]; then
    run verify_1rank 150 "$CPBENCH" verify --backend cuda --comm mpi "${SHAPE[@]}"
    skip verify_nccl_1rank "no MPI (NCCL bootstraps over MPI)"
    skip verify_2ranks_mpi "no MPI"
    skip verify_4ranks_mpi "no MPI"
  else
    run verify_1rank 150 "$MPIRUN" -np 1 "$CPBENCH" verify --backend cuda --comm mpi "${SHAPE[@]}"
    if ((NCCL_BUILT)); then
      run verify_nccl_1rank 150 "$MPIRUN" -np 1 "$CPBENCH" verify --backend cuda --comm nccl "${SHAPE[@]}"
    else
      skip verify_nccl_1rank "NCCL not found at configure time"
    fi
    for np in 2 4; do
      run verify_${np}ranks_mpi 200 "$MPIRUN" -np $np --bind-to none "$CPBENCH" verify --backend cuda --comm mpi "${SHAPE[@]}"
    done
  fi
  # ---- kernel benchmark: fit it into what is left of the budget ------------------------------
  left=$((BUDGET_S - $(elapsed) - 15))
  seqs=$BENCH_SEQS
  ((left < 150)) && seqs=4096,16384
  ((left < 60)) && seqs=4096
  if ((left < 25)); then
    skip kernel_bench "out of time budget (${BUDGET_S}s)"
  else
    run kernel_bench $((left > 300 ? 300 : left)) "$BENCH" --seqs "$seqs" --warmup 1 --iters 3 --json "$OUT/cuda_attn_bench.json"
  fi
else
  for s in emulated_kernels cuda_unit_tests verify_1rank verify_nccl_1rank verify_2ranks_mpi verify_4ranks_mpi kernel_bench; do
    skip $s "build failed"
  done
fi

# ---- summary ------------------------------------------------------------------------------------------
bench_lines=""
[[ -f $LOGS/kernel_bench.log ]] && bench_lines=$(sed -n '/^attention /,/^targets/p' "$LOGS/kernel_bench.log")
json_escape() { printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g' | tr -d '\000-\037'; }
failed=0
{
  printf '{\n  "tool": "gpu_check.sh",\n  "git_sha": "%s",\n' "$(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
  printf '  "gpu": "%s", "driver": "%s", "cuda_toolkit": "%s", "cuda_arch": "%s",\n' \
    "$(json_escape "${GPU_NAME:-none}")" "$(json_escape "${DRIVER:-}")" "$CUDA_VER" "$ARCH"
  printf '  "mpi": "%s", "nccl_built": %s, "total_s": %d,\n  "steps": [\n' "$MPI_MODE" \
    "$( ((NCCL_BUILT)) && echo true || echo false)" "$(elapsed)"
  for i in "${!names[@]}"; do
    printf '    {"name": "%s", "status": "%s", "seconds": %d, "detail": "%s", "log": "%s"}%s\n' \
      "${names[$i]}" "${states[$i]}" "${secs[$i]}" "$(json_escape "${details[$i]}")" \
      "gpu_check_logs/${names[$i]}.log" "$([[ $i -lt $((${#names[@]} - 1)) ]] && echo ,)"
  done
  printf '  ],\n  "kernel_bench": "%s"\n}\n' "$([[ -f $OUT/cuda_attn_bench.json ]] && echo cuda_attn_bench.json)"
} >"$OUT/gpu_check.json"

echo
echo "================ gpu_check summary ($(elapsed)s) ================"
echo "GPU ${GPU_NAME:-none} | CUDA $CUDA_VER | arch $ARCH | MPI $MPI_MODE | NCCL $( ((NCCL_BUILT)) && echo built || echo no)"
[[ -n $bench_lines ]] && echo "$bench_lines"
printf '%-20s %-8s %6s  %s\n' step status seconds detail
for i in "${!names[@]}"; do
  printf '%-20s %-8s %6d  %s\n' "${names[$i]}" "${states[$i]}" "${secs[$i]}" "${details[$i]}"
  [[ ${states[$i]} == ok || ${states[$i]} == skipped ]] || failed=1
done
echo "JSON: $OUT/gpu_check.json   logs: $LOGS/"
exit $failed
