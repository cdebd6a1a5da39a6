#!/usr/bin/env bash
# gpu_layer_check.sh: the cross-backend layer check of scripts/gpu_check.sh. The whole layer
# (`single`, one rank) is dumped on the CPU in fp32 (the reference) and on CUDA in fp32, bf16 and
# fp16; scripts/compare_dumps.py compares every tensor of each with the reference: fp32 within
# 1e-5, bf16/fp16 within 2e-2 (DESIGN's bounds), NaN/-inf at the same places. CUDA is never
# compared only with CUDA.
#
#   scripts/gpu_layer_check.sh CPBENCH DUMPDIR OUT_JSON [LAUNCHER...]
#
# LAUNCHER: e.g. `mpirun -np 1` when cpbench was built with MPI (empty: run it directly).
# Exit status: 0 all three within their bounds, 1 otherwise.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CPB=${1:?usage: gpu_layer_check.sh CPBENCH DUMPDIR OUT_JSON [LAUNCHER...]}
D=${2:?}
OUT_JSON=${3:?}
shift 3
LAUNCH=("$@")
SHAPE=(--strategies single --seq 512 --heads 8 --kv-heads 4 --head-dim 64 --dim 512 --batch 1)
rm -rf "$D" && mkdir -p "$D"
echo "== CPU fp32 (reference)"
"${LAUNCH[@]}" "$CPB" verify --backend cpu --dtype fp32 "${SHAPE[@]}" --dump "$D/cpu_fp32" || exit 1
rc=0
res="{"
for dt in fp32 bf16 fp16; do
  bound=2e-2
  [[ $dt == fp32 ]] && bound=1e-5
  echo "== CUDA $dt against CPU fp32 (bound $bound)"
  if "${LAUNCH[@]}" "$CPB" verify --backend cuda --dtype $dt "${SHAPE[@]}" --dump "$D/cuda_$dt" &&
     python3 "$ROOT/scripts/compare_dumps.py" "$D/cpu_fp32/single" "$D/cuda_$dt/single" --bound $bound \
       --json "$D/$dt.json"; then :; else rc=1; fi
  [[ -f $D/$dt.json ]] && res+="\"$dt\": $(cat "$D/$dt.json"),"
done
echo "${res%,}}" >"$OUT_JSON"
exit $rc
