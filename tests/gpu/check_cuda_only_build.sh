#!/usr/bin/env bash
# ctest cuda_only_build: scripts/build_cuda_only.sh must build the kernel benchmark with nvcc
# alone (2 jobs: CI machines are small), tabulate ptxas figures for the attention kernels, and the
# benchmark must stop cleanly at "no CUDA device" (exit 2) when no GPU is visible; the binary's run
# path holds the toolkit's library directory, so ldd finds its libraries without LD_LIBRARY_PATH.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUTDIR=${1:?usage: check_cuda_only_build.sh OUTDIR}
"$ROOT/scripts/build_cuda_only.sh" --out "$OUTDIR" --arch 90 --jobs "${JOBS:-2}" || { echo "FAIL: build"; exit 1; }
[[ -x $OUTDIR/cpbench_cuda_bench ]] || { echo "FAIL: no binary"; exit 1; }
# The toolkit's library directory is in the binary's run path (it starts without LD_LIBRARY_PATH).
NVCC_BIN=$(readlink -f "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")
CUDA_ROOT=$(cd "$(dirname "$NVCC_BIN")/.." && pwd)
runpath=$(readelf -d "$OUTDIR/cpbench_cuda_bench" | grep -E "\((RUNPATH|RPATH)\)")
want=""
for d in "$CUDA_ROOT/lib64" "$CUDA_ROOT/targets/$(uname -m)-linux/lib" "$CUDA_ROOT/lib"; do
  [[ -e $d/libcublas.so ]] && { want=$(readlink -f "$d"); break; }
done
[[ -n $want && $runpath == *"$want"* ]] || { echo "FAIL: run path '$runpath' lacks the toolkit's library directory '$want'"; exit 1; }
out=$(env -u LD_LIBRARY_PATH ldd "$OUTDIR/cpbench_cuda_bench" 2>&1)
[[ $out != *"not found"* ]] || { echo "FAIL: libraries not found without LD_LIBRARY_PATH: $out"; exit 1; }
for k in attn_fwd_kernel attn_bwd_kernel; do
  grep -q "$k" "$OUTDIR/ptxas.txt" || { echo "FAIL: $k missing from ptxas.txt"; cat "$OUTDIR/ptxas.txt"; exit 1; }
done
CUDA_VISIBLE_DEVICES=-1 "$OUTDIR/cpbench_cuda_bench" --check-only >"$OUTDIR/run.log" 2>&1
rc=$?
cat "$OUTDIR/run.log"
[[ $rc == 2 ]] || { echo "FAIL: expected exit 2 without a device, got $rc"; exit 1; }
grep -q "no CUDA device" "$OUTDIR/run.log" || { echo "FAIL: no 'no CUDA device' message"; exit 1; }
# Bad options are refused before any device call, with the constraint named.
out=$("$OUTDIR/cpbench_cuda_bench" --check-only --no-check 2>&1)
[[ $? == 1 && $out == *"--check-only and --no-check exclude each other"* ]] || { echo "FAIL: option conflict: $out"; exit 1; }
out=$("$OUTDIR/cpbench_cuda_bench" --gemm -1 2>&1)
[[ $? == 1 && $out == *"--gemm >= 0"* ]] || { echo "FAIL: --gemm -1: $out"; exit 1; }
echo "cuda_only_build: ok"
