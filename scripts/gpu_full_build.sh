#!/usr/bin/env bash
# gpu_full_build.sh: the full CMake build of cpbench with the CUDA backend on a GPU machine that has
# the CUDA toolkit and CMake but no MPI, OpenBLAS, JSON, CLI11 or Catch2 and no network (the
# `device` machine). Called by scripts/gpu_check.sh (in the background); usable alone.
#
#   scripts/gpu_full_build.sh WORKDIR [ARCH=90] [JOBS=nproc]
#
# Dependencies: what the system has, else the Debian packages carried in third_party_debs/
# (scripts/fetch_openmpi_debs.sh), unpacked with dpkg-deb -x into WORKDIR/debroot (nothing is
# installed system-wide; Open MPI relocated with OPAL_PREFIX). When the carried Open MPI does not
# run here (glibc too old for the packages), the build goes on without MPI (one rank, no NCCL).
# NCCL: the toolkit's, else the pip package nvidia-nccl-* (libnccl.so.2 and nccl.h; the missing
# libnccl.so link is made in WORKDIR/nccl). Writes WORKDIR/env.sh (PATH, LD_LIBRARY_PATH,
# OPAL_PREFIX to source before running the binaries) and builds WORKDIR/build: cpbench and
# test_cuda_kernels, -DCPBENCH_WERROR=OFF (a compiler the project has not met may warn).
# Environment: GPU_FULL_BUILD_DEPS=auto|system|debs (auto: the system's when it has MPI and
#   nlohmann-json, else the carried packages), GPU_FULL_BUILD_CMAKE_ARGS (appended to the
#   configure), GPU_FULL_BUILD_TARGETS (default "cpbench test_cuda_kernels", and
#   nccl_one_rank_check when NCCL was found).
# Exit status: 0 built, 1 otherwise.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
WD=${1:?usage: gpu_full_build.sh WORKDIR [ARCH] [JOBS]}
ARCH=${2:-90}
JOBS=${3:-$(nproc 2>/dev/null || echo 4)}
mkdir -p "$WD" && WD=$(cd "$WD" && pwd)
ENVSH=$WD/env.sh
: >"$ENVSH"
CMAKE_EXTRA=()
MPI_FLAG=ON
MPI_MODE=off

unpack_debs() {
  local pre=$WD/debroot debs=("$ROOT"/third_party_debs/*.deb)
  [[ -e ${debs[0]} ]] || { echo "no third_party_debs/*.deb"; return 1; }
  command -v dpkg-deb >/dev/null || { echo "no dpkg-deb to unpack third_party_debs"; return 1; }
  rm -rf "$pre" && mkdir -p "$pre"
  local f
  for f in "${debs[@]}"; do dpkg-deb -x "$f" "$pre" || { echo "dpkg-deb -x $f failed"; return 1; }; done
  local lib=$pre/usr/lib/x86_64-linux-gnu
  # dpkg -x runs no maintainer scripts: make the alternatives links the build uses.
  ln -sf mpirun.openmpi "$pre/usr/bin/mpirun"
  ln -sf mpicxx.openmpi "$pre/usr/bin/mpicxx"
  ln -sf mpicc.openmpi "$pre/usr/bin/mpicc"
  if [[ -e $lib/openblas-pthread/libopenblas.so ]]; then
    ln -sf openblas-pthread/libopenblas.so "$lib/libopenblas.so"
    ln -sf openblas-pthread/libblas.so "$lib/libblas.so"
    ln -sf openblas-pthread/libblas.so.3 "$lib/libblas.so.3"
  fi
  cat >"$ENVSH" <<EOF
export OPAL_PREFIX=$pre/usr
export PATH=$pre/usr/bin:\$PATH
export LD_LIBRARY_PATH=$lib:$lib/openmpi/lib:$lib/openblas-pthread\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
EOF
  . "$ENVSH"
  CMAKE_EXTRA+=(-DCMAKE_PREFIX_PATH="$pre/usr" -DCMAKE_INCLUDE_PATH="$pre/usr/include"
                -DCMAKE_LIBRARY_PATH="$lib")
  if "$pre/usr/bin/mpirun.openmpi" --version >"$WD/mpirun_version.log" 2>&1; then
    CMAKE_EXTRA+=(-DMPI_CXX_COMPILER="$pre/usr/bin/mpicxx.openmpi" -DMPIEXEC_EXECUTABLE="$pre/usr/bin/mpirun.openmpi")
    MPI_MODE="carried ($(head -1 "$WD/mpirun_version.log"))"
  else
    echo "the carried Open MPI does not run here: $(tail -2 "$WD/mpirun_version.log" | tr '\n' ' ')"
    MPI_FLAG=OFF MPI_MODE="off (carried Open MPI does not run)"
  fi
  return 0
}

DEPS=${GPU_FULL_BUILD_DEPS:-auto}
if [[ $DEPS != debs ]] && command -v mpicxx >/dev/null && command -v mpirun >/dev/null &&
   [[ -f /usr/include/nlohmann/json.hpp ]]; then
  MPI_MODE="system ($(mpirun --version 2>&1 | head -1))"
elif [[ $DEPS == system ]] || ! unpack_debs; then
  echo "no system dependencies and no usable third_party_debs: the CMake build cannot find OpenBLAS, JSON, CLI11, Catch2"
  exit 1
fi

# NCCL: the toolkit's, else the pip package's (no libnccl.so link there: make one).
if ! ls /usr/local/cuda/include/nccl.h /usr/local/cuda/lib64/libnccl.so >/dev/null 2>&1; then
  pipdir=$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null)
  if [[ -n $pipdir && -f $pipdir/include/nccl.h ]]; then
    mkdir -p "$WD/nccl/lib"
    ln -sfn "$pipdir/include" "$WD/nccl/include"
    so=$(ls "$pipdir"/lib/libnccl.so* 2>/dev/null | head -1)
    ln -sf "$so" "$WD/nccl/lib/libnccl.so"
    export NCCL_HOME=$WD/nccl
    echo "export LD_LIBRARY_PATH=$pipdir/lib:\${LD_LIBRARY_PATH:-}" >>"$ENVSH"
    export LD_LIBRARY_PATH=$pipdir/lib:${LD_LIBRARY_PATH:-}
    echo "NCCL: pip package $pipdir"
  else
    echo "NCCL: none found (toolkit or pip): --comm nccl will not be built"
  fi
fi

echo "MPI: $MPI_MODE"
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
rm -rf "$WD/build"
set -x
cmake -S "$ROOT" -B "$WD/build" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DCPBENCH_CUDA=ON -DCPBENCH_WERROR=OFF \
  -DCPBENCH_MPI=$MPI_FLAG -DCPBENCH_MICRO=OFF -DCMAKE_CUDA_ARCHITECTURES="$ARCH" "${CMAKE_EXTRA[@]}" \
  ${GPU_FULL_BUILD_CMAKE_ARGS:-} || exit 1
# shellcheck disable=SC2086
cmake --build "$WD/build" -j "$JOBS" --target ${GPU_FULL_BUILD_TARGETS:-cpbench test_cuda_kernels} || exit 1
# The one-GPU NCCL check exists only when configure found NCCL (and MPI).
if [[ -z ${GPU_FULL_BUILD_TARGETS:-} ]] && grep -q "^CPBENCH_NCCL_LIBRARY:.*nccl" "$WD/build/CMakeCache.txt"; then
  cmake --build "$WD/build" -j "$JOBS" --target nccl_one_rank_check || exit 1
fi
