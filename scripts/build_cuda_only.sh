#!/usr/bin/env bash
# build_cuda_only.sh: builds the CUDA kernel benchmark (cpbench_cuda_bench, whose --check-only
# mode is the kernels' check against a host reference) with nvcc alone: no CMake, no MPI, no
# OpenBLAS, no Debian packages. For a GPU machine that has only the CUDA toolkit; the first thing
# scripts/gpu_check.sh builds.
#
#   scripts/build_cuda_only.sh [--out DIR] [--arch 90] [--jobs N] [--no-ptxas]
#
# One nvcc per source file, N at a time (default: nproc), then one link. Sources: the backend-
# independent kernels/*.cpp (not backend_factory.cpp, which needs the CPU backend), every
# kernels/cuda/*.cpp and *.cu, and bench/micro/cuda_attn_bench.cu, so new kernel files need no
# edit here. ccache is used when present (CPBENCH_CCACHE=0 turns it off).
# Output in DIR (default build-cuda-only): cpbench_cuda_bench, obj/, logs/<file>.log, and
# ptxas.txt (registers, spills, static shared memory of every kernel, from -Xptxas -v; and, when
# cuobjdump is found, each kernel's LDSM/HMMA/atomic instruction counts from its SASS).
# Environment: NVCC (nvcc on PATH, else /usr/local/cuda/bin/nvcc), NVCC_FLAGS (extra flags).
# Exit status: 0 built; 1 a compile or link failed (the failing file's log is printed); 2 usage.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUTDIR=$ROOT/build-cuda-only
ARCH=90
JOBS=$(nproc 2>/dev/null || echo 4)
PTXAS=1
while (($#)); do
  case $1 in
    --out) OUTDIR=$2; shift 2 ;;
    --arch) ARCH=$2; shift 2 ;;
    --jobs) JOBS=$2; shift 2 ;;
    --no-ptxas) PTXAS=0; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "build_cuda_only: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ $ARCH =~ ^[0-9]+a?$ ]] || { echo "build_cuda_only: --arch takes one compute capability like 90 or 90a, got '$ARCH'" >&2; exit 2; }
[[ $JOBS =~ ^[1-9][0-9]*$ ]] || { echo "build_cuda_only: --jobs must be a positive integer, got '$JOBS'" >&2; exit 2; }

NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[[ -x $NVCC ]] || { echo "build_cuda_only: nvcc not found (set NVCC or put it on PATH)" >&2; exit 1; }
LAUNCHER=()
[[ ${CPBENCH_CCACHE:-1} != 0 ]] && command -v ccache >/dev/null && LAUNCHER=(ccache)

mkdir -p "$OUTDIR/obj" "$OUTDIR/logs"
OUTDIR=$(cd "$OUTDIR" && pwd)

sources=()
for f in "$ROOT"/kernels/*.cpp; do
  [[ $(basename "$f") == backend_factory.cpp ]] || sources+=("$f")
done
sources+=("$ROOT"/kernels/cuda/*.cpp "$ROOT"/kernels/cuda/*.cu "$ROOT"/bench/micro/cuda_attn_bench.cu)

# The same language level and kernel flags as kernels/cuda/CMakeLists.txt; SASS for ARCH plus
# PTX so a newer device can JIT it.
common=(-std=c++17 -O3 -I"$ROOT" --expt-relaxed-constexpr -lineinfo
        -gencode "arch=compute_${ARCH},code=[sm_${ARCH},compute_${ARCH}]" -Xcompiler=-Wall)
((PTXAS)) && common+=(-Xptxas=-v)
# shellcheck disable=SC2206
extra=(${NVCC_FLAGS:-})

compile_one() {  # SRC: obj/<dir>_<name>.o, its compiler output in logs/
  local src=$1 rel=${1#"$ROOT"/}
  local stem=${rel//\//_}
  stem=${stem%.*}
  if "${LAUNCHER[@]}" "$NVCC" "${common[@]}" "${extra[@]}" -c "$src" -o "$OUTDIR/obj/$stem.o" \
       >"$OUTDIR/logs/$stem.log" 2>&1; then
    echo "ok   $rel"
  else
    echo "FAIL $rel (log: $OUTDIR/logs/$stem.log)"
    return 1
  fi
}

echo "build_cuda_only: ${#sources[@]} sources, sm_$ARCH, $JOBS jobs, $NVCC -> $OUTDIR"
rm -f "$OUTDIR"/obj/*.o "$OUTDIR"/logs/*.log "$OUTDIR/cpbench_cuda_bench"
for src in "${sources[@]}"; do
  while (($(jobs -rp | wc -l) >= JOBS)); do wait -n; done
  compile_one "$src" &
done
wait
# A missing object is a failed compile (exit statuses of reaped jobs are not relied upon).
failed=0
for src in "${sources[@]}"; do
  rel=${src#"$ROOT"/}
  stem=${rel//\//_}
  [[ -s $OUTDIR/obj/${stem%.*}.o ]] || failed=1
done
if ((failed)); then
  for log in "$OUTDIR"/logs/*.log; do
    grep -qiE "error" "$log" && { echo "---- $log"; head -40 "$log"; }
  done
  echo "build_cuda_only: compile failed" >&2
  exit 1
fi

# The toolkit's library directory (of this nvcc) goes into the binary's run path, so it starts
# without LD_LIBRARY_PATH on machines whose loader does not know the toolkit (libcublas*.so).
CUDA_ROOT=$(cd "$(dirname "$(readlink -f "$NVCC")")/.." && pwd)
CUDA_LIB=""
for d in "$CUDA_ROOT/lib64" "$CUDA_ROOT/targets/$(uname -m)-linux/lib" "$CUDA_ROOT/lib"; do
  [[ -e $d/libcublas.so ]] && { CUDA_LIB=$(readlink -f "$d"); break; }
done
[[ -n $CUDA_LIB ]] || { echo "build_cuda_only: no libcublas.so under $CUDA_ROOT (lib64, targets/*/lib, lib)" >&2; exit 1; }
if ! "$NVCC" -gencode "arch=compute_${ARCH},code=[sm_${ARCH},compute_${ARCH}]" "$OUTDIR"/obj/*.o \
     -o "$OUTDIR/cpbench_cuda_bench" -L"$CUDA_LIB" -Xlinker -rpath -Xlinker "$CUDA_LIB" -lcublas -lcublasLt \
     >"$OUTDIR/logs/link.log" 2>&1; then
  cat "$OUTDIR/logs/link.log"
  echo "build_cuda_only: link failed" >&2
  exit 1
fi

if ((PTXAS)); then
  # With the SASS counts (LDSM, HMMA, atomics per kernel) when cuobjdump is found.
  python3 "$ROOT/scripts/ptxas_table.py" "$OUTDIR"/logs/*.log --sass "$OUTDIR"/obj/*.o \
    >"$OUTDIR/ptxas.txt" 2>"$OUTDIR/logs/ptxas_table.err" ||
    echo "build_cuda_only: could not tabulate ptxas output (see $OUTDIR/logs/ptxas_table.err)"
fi
echo "build_cuda_only: built $OUTDIR/cpbench_cuda_bench (run path $CUDA_LIB)"
