#!/usr/bin/env bash
# gpu_check.sh: the first minutes on a GPU machine, arranged so that they cannot come back empty.
#
#   OUT=/path scripts/gpu_check.sh         (the `device` tool sets OUT; default ./out)
#
# One overall deadline (GPU_CHECK_DEADLINE_S, default 480 s); each step has an estimate of what it
# needs and is skipped ("does not fit") when less is left; every step runs under `timeout` bounded
# by the deadline. The summary $OUT/gpu_check.json is rewritten after every step (state "running"
# until the end), and every log goes into ONE archive, $OUT/gpu_check_logs.tar.gz, rewritten too,
# so a run killed at any point still returns what it did. Files under $OUT (at most 7):
#   gpu_check.json  gpu_check_logs.tar.gz  ptxas.md  cuda_attn_bench.json  sdpa_bench.json
#   layer_check.json  kernel_table.json
# Steps, in order (docs/GPU.md has the details):
#   facts           device, driver, toolkit, compilers, OS, runtime, python/torch, sanitizer, NCCL,
#                   MPI: collected before anything that can fail; then "no device" ends the check
#                   with exit 0 (state no_device) on a machine without a visible GPU
#   nvcc_build      scripts/build_cuda_only.sh: the kernel benchmark with nvcc alone; ptxas figures
#   kernel_check    cpbench_cuda_bench --check-only (d = 64, 128; MHA, GQA; causal or not; odd sizes),
#                   bf16; kernel_check_fp16 the same in fp16
#   memcheck, racecheck, synccheck   compute-sanitizer on that check (bf16), failing on any finding
#   cmake_build     started in the background here: the full build against the carried Debian
#                   packages (third_party_debs/, scripts/fetch_openmpi_debs.sh; scripts/gpu_full_build.sh), -DCPBENCH_WERROR=OFF
#   kernel_bench    forward/backward TFLOP/s beside the cuBLAS GEMM rate of the same run
#   kernel_table    scripts/kernel_table.py: those rates as a simulated platform's efficiency tables
#                   (attn_fwd/bwd non-causal at N, attn_*_masked causal at (N + 1) / 2, gemm), divided
#                   by the peak of GPU_CHECK_PLATFORM (default dgx-h100: the H100/H200 SXM dense peak)
#   torch_sdpa      scripts/sdpa_bench.py on the same shapes; ratios cpbench/torch
#   large_n         forward + backward at N = 266240, H = 64, G = 8, d = 128 (tensors > 2^31
#                   elements), last rows checked against a float64 reference
#   layer_check     cpbench verify --dump: CPU fp32 against CUDA fp32 (1e-5), bf16, fp16 (2e-2),
#                   every tensor (scripts/compare_dumps.py)
#   nccl_ops        tests/gpu/nccl_one_rank_check: every NCCL operation on one GPU, values checked
#                   (nccl_ops, nccl_1rank, verify_*: cpbench's own wait bound, --timeout and
#                   CPBENCH_NCCL_TIMEOUT_S, is 2/3 of the step's cap, so a hang is named in its log)
#   nccl_1rank      cpbench verify --comm nccl on one rank with CPBENCH_NCCL_ONE_RANK=1 (NCCL runs)
#   verify_2ranks, verify_4ranks   every strategy, ranks sharing the GPU, --comm mpi
#   cuda_unit_tests test_cuda_kernels (a "no CUDA device" skip counts as a failure)
# No emulator test here: CI runs test_cuda_emu.
#
# Environment: OUT, GPU_CHECK_DEADLINE_S (480), GPU_CHECK_WORK (/tmp/cpbench_gpu_check: builds and
#   logs), CUDA_ARCH (from the device, else 90), JOBS (nproc), BENCH_SEQS (4096,16384,65536),
#   LARGE_N (266240), GPU_CHECK_SKIP (comma-separated step names to skip), GPU_CHECK_ASSUME_DEVICE=1
#   (runs every step as if a GPU were there: to test this script's flow on a machine without one).
# A failed step's "detail" in gpu_check.json is "exit N: " and the tail of its output (failure_reason).
# Exit status: 0 when no step failed (also: no device); 1 when one did.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
WORK=${GPU_CHECK_WORK:-/tmp/cpbench_gpu_check}
LOGS=$WORK/logs
rm -rf "$LOGS" && mkdir -p "$LOGS"
(cd "$OUT" && rm -f gpu_check.json gpu_check_logs.tar.gz ptxas.md cuda_attn_bench.json sdpa_bench.json layer_check.json kernel_table.json)
DEADLINE_S=${GPU_CHECK_DEADLINE_S:-480}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 4)}
BENCH_SEQS=${BENCH_SEQS:-4096,16384,65536}
LARGE_N=${LARGE_N:-266240}
SKIP=",${GPU_CHECK_SKIP:-},"
STARTED=$(date -u +%Y-%m-%dT%H:%M:%SZ)
T0=$SECONDS
STATE=running
command -v nvcc >/dev/null || { [[ -x /usr/local/cuda/bin/nvcc ]] && export PATH=/usr/local/cuda/bin:$PATH; }

elapsed() { echo $((SECONDS - T0)); }
left() { echo $((DEADLINE_S - (SECONDS - T0))); }
say() { echo "[gpu_check $(elapsed)s] $*"; }
json_str() {  # a JSON string literal
  local s=${1//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\n'/\\n}
  s=${s//$'\t'/ }
  printf '"%s"' "$(printf '%s' "$s" | tr -d '\000-\011\013-\037')"
}

# ---- the summary: facts (key/value) and steps, rewritten after each step -----------------------
fact_keys=() fact_vals=()
fact() { fact_keys+=("$1"); fact_vals+=("$2"); }
names=() states=() secs=() details=()
record() {
  names+=("$1"); states+=("$2"); secs+=("$3"); details+=("$4")
  write_summary
}
write_summary() {
  local failed=0 i tmp=$OUT/.gpu_check.json.tmp
  for i in "${!states[@]}"; do [[ ${states[$i]} == FAIL || ${states[$i]} == TIMEOUT ]] && failed=$((failed + 1)); done
  {
    printf '{\n  "tool": "gpu_check.sh",\n  "summary_version": 2,\n'
    printf '  "git_sha": %s,\n' "$(json_str "$(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)")"
    printf '  "started_utc": "%s",\n  "deadline_s": %d,\n  "elapsed_s": %d,\n' "$STARTED" "$DEADLINE_S" "$(elapsed)"
    printf '  "state": "%s",\n  "failed_steps": %d,\n  "facts": {' "$STATE" "$failed"
    for i in "${!fact_keys[@]}"; do
      printf '%s\n    %s: %s' "$([[ $i -gt 0 ]] && echo ,)" "$(json_str "${fact_keys[$i]}")" "$(json_str "${fact_vals[$i]}")"
    done
    printf '\n  },\n  "steps": ['
    for i in "${!names[@]}"; do
      printf '%s\n    {"name": %s, "status": %s, "seconds": %d, "detail": %s}' "$([[ $i -gt 0 ]] && echo ,)" \
        "$(json_str "${names[$i]}")" "$(json_str "${states[$i]}")" "${secs[$i]}" "$(json_str "${details[$i]}")"
    done
    printf '\n  ],\n  "files": ['
    local first=1 f
    for f in gpu_check_logs.tar.gz ptxas.md cuda_attn_bench.json sdpa_bench.json layer_check.json kernel_table.json; do
      [[ -e $OUT/$f || $f == gpu_check_logs.tar.gz ]] || continue
      printf '%s%s' "$([[ $first == 1 ]] || echo ', ')" "$(json_str "$f")"
      first=0
    done
    printf ']\n}\n'
  } >"$tmp" && mv -f "$tmp" "$OUT/gpu_check.json"
  # tar exits 1 when a log grows while it reads it (the background build's): keep the archive.
  tar -czf "$OUT/.logs.tmp" -C "$WORK" logs 2>/dev/null
  [[ -s $OUT/.logs.tmp ]] && mv -f "$OUT/.logs.tmp" "$OUT/gpu_check_logs.tar.gz"
}

skip() { record "$1" skipped 0 "$2"; say "$1: skipped ($2)"; }

# The reason a step failed, for its JSON detail: the first line that names an error (when the
# tail does not show it) and the last 6 non-blank lines of its output, " | "-joined, at most 800
# characters (the end kept); "no output" for an empty log. The whole log is in the archive.
failure_reason() {
  local log=$1 tail first
  tail=$(grep -v '^[[:space:]-]*$' "$log" 2>/dev/null | tail -6)
  [[ -n $tail ]] || { echo "no output"; return; }
  first=$(grep -m1 -iE "error|FAIL|illegal|refused|not supported|abort" "$log" 2>/dev/null)
  local out=$tail
  [[ -n $first && $tail != *"$first"* ]] && out="$first"$'\n'"..."$'\n'"$tail"
  out=$(printf '%s' "$out" | tr '\n' '\036' | sed $'s/\x1e/ | /g')
  ((${#out} > 800)) && out="...${out: -797}"
  printf '%s' "$out"
}

# The bound for cpbench's own waits (--timeout, CPBENCH_NCCL_TIMEOUT_S: NCCL and CUDA host waits)
# in a step of cap CAP: two thirds of what the step may run, so a hang ends in cpbench's message
# naming the call (in the step's log and detail) before `timeout` kills the step silently.
inner_timeout() {
  local cap=$1 avail=$(($(left) - 10))
  ((avail > cap)) && avail=$cap
  local t=$((avail * 2 / 3))
  ((t < 5)) && t=5
  echo $t
}

# run NAME NEED_S MAX_S CMD...: skipped when asked to or when less than NEED_S is left; otherwise
# CMD runs under timeout (MAX_S, or what is left less a 10 s margin for the summary, if smaller),
# output to logs/NAME.log. Sets RC (the command's exit status; 125 when not run). Returns 0 when
# it passed.
RC=125
run() {
  local name=$1 need=$2 cap=$3
  shift 3
  RC=125
  if [[ $SKIP == *",$name,"* ]]; then skip "$name" "GPU_CHECK_SKIP"; return 1; fi
  local avail=$(($(left) - 10))
  if ((avail < need)); then skip "$name" "does not fit: needs ~${need}s, ${avail}s left of ${DEADLINE_S}s"; return 1; fi
  ((avail > cap)) && avail=$cap
  say "$name (up to ${avail}s): $*"
  local t=$SECONDS
  timeout --kill-after=5 "$avail" "$@" >"$LOGS/$name.log" 2>&1
  RC=$?
  local dt=$((SECONDS - t)) st=ok detail=""
  if ((RC == 124 || RC == 137)); then
    st=TIMEOUT detail="killed at the deadline after ${dt}s"
  elif ((RC != 0)); then
    st=FAIL detail="exit $RC: $(failure_reason "$LOGS/$name.log")"
  fi
  record "$name" "$st" "$dt" "$detail"
  [[ $st == ok ]] || say "$name: $st ($detail)"
  [[ $st == ok ]]
}
# Replaces the last step's status and detail (for checks made on its output).
amend() { states[${#states[@]} - 1]=$1; details[${#details[@]} - 1]=$2; write_summary; }

# ---- facts: nothing here may stop the script ---------------------------------------------------
q() { timeout 30 "$@" 2>&1 | head -c 2000; }
collect_facts() {
  fact host "$(hostname 2>/dev/null)"
  fact os "$(. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-unknown}")"
  fact kernel "$(uname -r 2>/dev/null)"
  local runtime=unknown
  case $(uname -r 2>/dev/null) in
    4.4.0*) runtime="gVisor (kernel 4.4.0)" ;;
    *-fc-*) runtime="Firecracker" ;;
  esac
  fact runtime_guess "$runtime"
  fact glibc "$(ldd --version 2>/dev/null | head -1 | awk '{print $NF}')"
  fact cpus "$(nproc 2>/dev/null) x $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//')"
  fact memory "$(free -g 2>/dev/null | awk '/^Mem:/ {print $2 " GiB"}')"
  fact nvidia_smi "$(q nvidia-smi --query-gpu=index,name,driver_version,memory.total,compute_cap,clocks.max.sm --format=csv,noheader)"
  fact cuda_driver_api "$(q nvidia-smi | grep -o 'CUDA Version: [0-9.]*' | head -1)"
  fact device_query "$(q /usr/local/cuda/bin/__nvcc_device_query)"
  fact cuda_visible_devices "${CUDA_VISIBLE_DEVICES-<unset>}"
  fact nvcc "$(q nvcc --version | tail -2 | tr '\n' ' ')"
  fact host_cxx "$(q g++ --version | head -1)"
  fact cmake "$(q cmake --version | head -1)"
  fact ninja "$(q ninja --version)"
  fact python "$(q python3 --version)"
  fact torch "$(q python3 -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' | tail -1)"
  fact compute_sanitizer "$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || echo none) $(q compute-sanitizer --version | tail -1)"
  fact nccl_toolkit "$(ls /usr/local/cuda/include/nccl.h /usr/local/cuda/lib64/libnccl.so* 2>/dev/null | tr '\n' ' ')"
  fact nccl_pip "$(q python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' | tail -1)"
  fact mpi "$(command -v mpirun >/dev/null && q mpirun --version | head -1 || echo none)"
  fact third_party_debs "$(ls "$ROOT"/third_party_debs/*.deb 2>/dev/null | wc -l) .deb files"
}

# The GPU the CUDA runtime would use: nvidia-smi lists one, or the toolkit's device query answers;
# CUDA_VISIBLE_DEVICES set to "", -1 or none hides every GPU.
device_present() {
  # For testing this script's flow on a machine without a GPU (every GPU step then fails).
  [[ ${GPU_CHECK_ASSUME_DEVICE:-0} == 1 ]] && return 0
  case ${CUDA_VISIBLE_DEVICES-unset} in ""|-1|none|NoDevFiles) NO_DEVICE_WHY="CUDA_VISIBLE_DEVICES='${CUDA_VISIBLE_DEVICES}' hides every GPU"; return 1 ;; esac
  if timeout 30 nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then return 0; fi
  if timeout 30 /usr/local/cuda/bin/__nvcc_device_query 2>/dev/null | grep -qE '^[0-9]+'; then return 0; fi
  NO_DEVICE_WHY="no GPU: nvidia-smi lists none and the CUDA driver answers no device query"
  return 1
}

write_summary  # something comes back even if a fact hangs past the tool's limit
t=$SECONDS
collect_facts
record facts ok $((SECONDS - t)) ""
NO_DEVICE_WHY=""
STEPS_AFTER=(nvcc_build kernel_check kernel_check_fp16 memcheck racecheck synccheck cmake_build kernel_bench kernel_table torch_sdpa large_n
             layer_check nccl_ops nccl_1rank verify_2ranks verify_4ranks cuda_unit_tests)
if ! device_present; then
  STATE=no_device
  fact device "none: $NO_DEVICE_WHY"
  for s in "${STEPS_AFTER[@]}"; do names+=("$s"); states+=(skipped); secs+=(0); details+=("no device"); done
  write_summary
  say "no device ($NO_DEVICE_WHY): facts recorded in $OUT/gpu_check.json; nothing else to check here"
  exit 0
fi
fact device "$([[ ${GPU_CHECK_ASSUME_DEVICE:-0} == 1 ]] && echo "assumed (GPU_CHECK_ASSUME_DEVICE=1)" || echo present)"

ARCH=${CUDA_ARCH:-$(timeout 30 nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')}
ARCH=${ARCH:-90}
fact cuda_arch "$ARCH"
write_summary

# ---- nvcc-only build and the kernels' own checks ---------------------------------------------
NV=$WORK/nvcc
BENCH=$NV/cpbench_cuda_bench
if run nvcc_build 60 300 "$ROOT/scripts/build_cuda_only.sh" --out "$NV" --arch "$ARCH" --jobs "$JOBS"; then
  [[ -s $NV/ptxas.txt ]] && { echo "# ptxas -v, sm_$ARCH, $(date -u +%F), $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)"; cat "$NV/ptxas.txt"; } >"$OUT/ptxas.md"
  cp -f "$NV"/logs/*.log "$LOGS/" 2>/dev/null
fi
# ---- the full CMake build, in the background while the GPU steps run (JOBS-2 cores) -------------------------
CM=$WORK/cmake
CMAKE_PID=""
if [[ $SKIP == *",cmake_build,"* ]]; then
  skip cmake_build "GPU_CHECK_SKIP"
elif (($(left) < 150)); then
  skip cmake_build "does not fit: $(left)s left"
else
  say "cmake_build: started in the background (log logs/cmake_build.log)"
  CMAKE_T0=$SECONDS
  ( timeout --kill-after=5 $(($(left) - 40)) "$ROOT/scripts/gpu_full_build.sh" "$CM" "$ARCH" "$((JOBS > 4 ? JOBS - 2 : JOBS))" ) \
    >"$LOGS/cmake_build.log" 2>&1 &
  CMAKE_PID=$!
fi

if [[ -x $BENCH ]]; then
  run kernel_check 20 90 "$BENCH" --check-only --check-dims 64,128 --dtype bf16
  run kernel_check_fp16 20 90 "$BENCH" --check-only --check-dims 64,128 --dtype fp16
  SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  for tool in memcheck racecheck synccheck; do
    if [[ ! -x $SAN ]]; then skip $tool "compute-sanitizer not found"; continue; fi
    run $tool 45 150 "$SAN" --tool $tool --error-exitcode 3 --print-limit 50 \
        "$BENCH" --check-only --check-dims 64,128 --dtype bf16
    log=$LOGS/$tool.log
    if grep -qiE "device not supported|Error: Target application terminated before first instrumented API call|error 999" "$log" 2>/dev/null; then
      amend REFUSED "compute-sanitizer refused the device on this runtime ($(grep -m1 -iE 'not supported|999' "$log" | cut -c1-120))"
    elif [[ -s $log ]]; then
      summary=$(grep -m1 "ERROR SUMMARY" "$log")
      [[ -n $summary ]] && details[${#details[@]} - 1]="${details[${#details[@]} - 1]:+${details[${#details[@]} - 1]}; }$summary" && write_summary
    fi
  done
else
  for s in kernel_check kernel_check_fp16 memcheck racecheck synccheck; do skip $s "no kernel benchmark binary (nvcc_build did not build it)"; done
fi

# ---- speed: the kernel benchmark, torch SDPA on the same shapes, then large N ----------------
SHAPE_ARGS=(--heads 16 --kv-heads 16 --head-dim 128 --batch 1 --dtype bf16 --causal both)
if [[ -x $BENCH ]]; then
  run kernel_bench 40 150 "$BENCH" --seqs "$BENCH_SEQS" "${SHAPE_ARGS[@]}" --warmup 1 --iters 3 --json "$OUT/cuda_attn_bench.json"
  grep -q "targets NOT met" "$LOGS/kernel_bench.log" 2>/dev/null &&
    details[${#details[@]} - 1]="${details[${#details[@]} - 1]:+${details[${#details[@]} - 1]}; }speed targets not met" && write_summary
else
  skip kernel_bench "no kernel benchmark binary (nvcc_build did not build it)"
fi
if [[ -s $OUT/cuda_attn_bench.json ]]; then
  run kernel_table 5 30 python3 "$ROOT/scripts/kernel_table.py" "$OUT/cuda_attn_bench.json" \
    --platform "$ROOT/configs/platforms/${GPU_CHECK_PLATFORM:-dgx-h100}.json" --out "$OUT/kernel_table.json"
else
  skip kernel_table "no cuda_attn_bench.json (kernel_bench did not write it)"
fi
run torch_sdpa 40 120 python3 "$ROOT/scripts/sdpa_bench.py" --seqs "$BENCH_SEQS" "${SHAPE_ARGS[@]}" --warmup 1 --iters 3 \
  --json "$OUT/sdpa_bench.json" --cpbench-json "$OUT/cuda_attn_bench.json"
if [[ -x $BENCH ]]; then
  run large_n 90 200 "$BENCH" --seqs "$LARGE_N" --heads 64 --kv-heads 8 --head-dim 128 --dtype bf16 --causal yes \
    --warmup 0 --iters 1 --gemm 0
else
  skip large_n "no kernel benchmark binary (nvcc_build did not build it)"
fi

# ---- the whole program: wait for the build, then layer check, NCCL, ranks, unit tests --------
CPB=$CM/build/bench/cpbench
if [[ -n $CMAKE_PID ]]; then
  wait "$CMAKE_PID"
  rc=$?
  if ((rc == 0)); then record cmake_build ok $((SECONDS - CMAKE_T0)) "$(grep -m1 '^MPI:' "$LOGS/cmake_build.log")"
  else record cmake_build FAIL $((SECONDS - CMAKE_T0)) "exit $rc: $(grep -m1 -iE 'error' "$LOGS/cmake_build.log" | cut -c1-200)"; fi
fi
[[ -f $CM/env.sh ]] && . "$CM/env.sh"  # PATH/LD_LIBRARY_PATH/OPAL_PREFIX of the unpacked packages
MPIRUN=()
command -v mpirun >/dev/null && MPIRUN=(mpirun --oversubscribe --bind-to none -np)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm_rsh_agent=false
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_btl_sm_single_copy_mechanism=none
LSHAPE=(--seq 512 --heads 8 --kv-heads 4 --head-dim 64 --dim 512 --batch 1)
ONE_RANK=()
((${#MPIRUN[@]})) && ONE_RANK=("${MPIRUN[@]}" 1)
if [[ -x $CPB ]]; then
  run layer_check 40 120 "$ROOT/scripts/gpu_layer_check.sh" "$CPB" "$WORK/dumps" "$OUT/layer_check.json" "${ONE_RANK[@]}"
  if ((${#MPIRUN[@]})); then
    NOPS=$CM/build/tests/gpu/nccl_one_rank_check
    if [[ -x $NOPS ]]; then
      # Without a device it exits 77 (a FAIL here, the "SKIPPED: no CUDA device" line in the detail).
      CPBENCH_NCCL_TIMEOUT_S=$(inner_timeout 90) run nccl_ops 15 90 "${MPIRUN[@]}" 1 -x CPBENCH_NCCL_TIMEOUT_S "$NOPS"
    else
      skip nccl_ops "nccl_one_rank_check not built (no NCCL found at configure)"
    fi
    export CPBENCH_NCCL_ONE_RANK=1  # every strategy at one rank, through a real one-rank NCCL communicator
    T_IN=$(inner_timeout 120)
    CPBENCH_NCCL_TIMEOUT_S=$T_IN run nccl_1rank 20 120 "${MPIRUN[@]}" 1 -x CPBENCH_NCCL_ONE_RANK -x CPBENCH_NCCL_TIMEOUT_S \
      "$CPB" verify --backend cuda --comm nccl --dtype bf16 --timeout "$T_IN" "${LSHAPE[@]}"
    calls=$(grep "NCCL calls" "$LOGS/nccl_1rank.log" 2>/dev/null | tail -1 | sed 's/.*NCCL calls/NCCL calls/')
    [[ -n $calls ]] && details[${#details[@]} - 1]="${details[${#details[@]} - 1]:+${details[${#details[@]} - 1]}; }$calls" && write_summary
    unset CPBENCH_NCCL_ONE_RANK
    for np in 2 4; do
      T_IN=$(inner_timeout 150)
      CPBENCH_NCCL_TIMEOUT_S=$T_IN run verify_${np}ranks 40 150 "${MPIRUN[@]}" $np -x CPBENCH_NCCL_TIMEOUT_S "$CPB" verify \
        --backend cuda --comm mpi --dtype bf16 --timeout "$T_IN" "${LSHAPE[@]}"
    done
  else
    for s in nccl_ops nccl_1rank verify_2ranks verify_4ranks; do skip $s "no MPI (neither system nor carried)"; done
  fi
  UNIT=$CM/build/tests/unit/test_cuda_kernels
  # Without a device the binary exits 77 (a FAIL here, its "SKIPPED: no CUDA device" in the detail).
  if [[ -x $UNIT ]]; then
    run cuda_unit_tests 30 150 "$UNIT"
  else
    skip cuda_unit_tests "not built"
  fi
else
  for s in layer_check nccl_ops nccl_1rank verify_2ranks verify_4ranks cuda_unit_tests; do skip $s "no cpbench binary (cmake_build)"; done
fi

STATE=done
write_summary
echo
echo "================ gpu_check summary ($(elapsed)s of ${DEADLINE_S}s) ================"
printf '%-18s %-8s %6s  %s\n' step status seconds detail
failed=0
for i in "${!names[@]}"; do
  printf '%-18s %-8s %6d  %s\n' "${names[$i]}" "${states[$i]}" "${secs[$i]}" "${details[$i]}"
  [[ ${states[$i]} == FAIL || ${states[$i]} == TIMEOUT ]] && failed=1
done
echo "summary: $OUT/gpu_check.json   logs: $OUT/gpu_check_logs.tar.gz"
exit $failed
