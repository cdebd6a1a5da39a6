#!/usr/bin/env bash
# Runs a fixed matrix of cpbench command lines and writes one report per case, so that a refactor
# that must not change behaviour can be checked byte for byte (scripts/parts_compare.sh, then
# docs/CONTRIBUTING.md "Refactoring without changing a byte").
#
#   scripts/parts_baseline.sh BIN_DIR OUT_DIR
#
# BIN_DIR holds the binaries under test: cpbench, and cpbench-sim for the simulated cases (those
# are left out, and said so, when BIN_DIR has no cpbench-sim or smpirun is missing). OUT_DIR gets
#   CASE.json        one report per case (run: bytes, tiers, FLOPs; verify: every tensor's error)
#   logs/CASE.log    the command line and its output
#   manifest.tsv     CASE, cpbench's exit code, the command line (parts_compare.sh compares codes)
#
# The matrix (names: p{P}-{block}-{pass}-{balance}.{run|verify}):
#   - default.run: `cpbench run` with no options at P = 4 (the embedded default sweep);
#   - P = 4 (--ranks-per-node 2) and 8 (--ranks-per-node 4), so every mesh level has traffic on both
#     tiers; --block attn and full; every strategy (none named: one that cannot run is skipped and
#     compared as skipped), --mesh all; passes train, prefill, prefill --cached, prefill --ring-pass
#     q (with and without --cached) and decode; balances plain (causal, one sequence), docs (packed
#     documents, no scheme), doc-zigzag, greedy, dynamic; each both as `run` (--iters 1 --warmup 0)
#     and as `verify`. Left out: --cached or decode with --docs/--balance (cpbench rejects them,
#     exit 2: one sequence whose prefix is cached) and pass-Q with dynamic (every job skipped).
#   - simulated: cpbench-sim via scripts/simulate.sh on dgx-h100 (SIM_CASES below).
# Shapes are tiny (H = 8, G = 4, d = 16, N = 32 tokens per rank) and --threads 1, so a case takes
# seconds on 2 cores and the verify errors are reproducible bit for bit: 139 cases in about 8
# minutes on the shared 2-core machine, and two runs of the same binaries compare identical.
#
# A case whose exit code is 2 (rejected), 3 (aborted) or 124 (watchdog), or that wrote no report,
# is listed at the end and makes the exit status 1: with the baseline binaries that means the
# matrix is wrong; with new binaries, that behaviour changed (parts_compare.sh also reports it).
# Exit code 1 from cpbench (a failed job or verification) is recorded: the report says what failed.
#
# Environment: MPIRUN (default mpirun), PARTS_ONLY=REGEX (run only the matching cases, for
# debugging; the manifest then holds only those), PARTS_SIM256=1 (add README's 256-GPU sweep:
# 3.5-4.5 minutes alone on an idle 2-core machine).
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
(($# == 2)) || { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0" >&2; exit 2; }
bin="$(cd "$1" 2>/dev/null && pwd)" || { echo "parts_baseline.sh: no directory $1" >&2; exit 2; }
out="$2"
[[ -x "$bin/cpbench" ]] || { echo "parts_baseline.sh: $bin/cpbench not found" >&2; exit 2; }
mkdir -p "$out/logs" || exit 2
out="$(cd "$out" && pwd)"
: > "$out/manifest.tsv"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# More ranks than cores: waiting ranks yield the CPU instead of spinning (as scripts/test.sh).
export OMPI_MCA_mpi_yield_when_idle=1
mpirun="${MPIRUN:-mpirun}"

problems=()
ncases=0
start=$SECONDS

# run_case NAME -- COMMAND...: runs it, keeps the report NAME.json, records the exit code.
run_case() {
  local name="$1"; shift 2
  [[ -z "${PARTS_ONLY:-}" || "$name" =~ $PARTS_ONLY ]] || return 0
  local report="$out/$name.json" log="$out/logs/$name.log" t0=$SECONDS rc
  rm -f "$report"
  printf '%s\n' "$*" > "$log"
  "$@" --out "$report" >> "$log" 2>&1
  rc=$?
  ncases=$((ncases + 1))
  printf '%s\t%d\t%s\n' "$name" "$rc" "$*" >> "$out/manifest.tsv"
  printf '%-44s exit %d  %3ds\n' "$name" "$rc" $((SECONDS - t0))
  if ((rc == 2 || rc == 3 || rc >= 124)) || [[ ! -s "$report" ]]; then
    problems+=("$name: exit $rc$([[ -s "$report" ]] || echo ', no report') (log: $log)")
    rm -f "$report"  # a rejected or aborted case is not part of the matrix
  fi
}

# The default sweep, as `cpbench run` runs it with no options (its own iterations and peak).
run_case default.run -- "$mpirun" -np 4 --oversubscribe "$bin/cpbench" run --no-progress

# Per P: ranks per node (two nodes), sequence length (N/P = 32 tokens a rank), the cached prefix,
# and packed documents. Document lengths are multiples of 2P, so doc-zigzag's 2R chunks are whole at
# every ring size, and some exceed the dynamic scheme's cap N/P = 32 by different factors, so its CP
# groups have 1, 2 and 4 ranks at both P.
declare -A RPN=([4]=2 [8]=4) SEQ=([4]=128 [8]=256) CACHED=([4]=64 [8]=128) DOCS=([4]=72,40,8,8 [8]=112,16,80,48)
SHAPE=(--model tiny --heads 8 --kv-heads 4 --threads 1 --seed 7 --mesh all)
PASSES=(train prefill prefill-cached prefill-q prefill-cached-q decode)
BALANCES=(plain docs doc-zigzag greedy dynamic)

for P in 4 8; do
  for block in attn full; do
    for pass in "${PASSES[@]}"; do
      for bal in "${BALANCES[@]}"; do
        case "$pass" in
          train) pflags=(--seq "${SEQ[$P]}") ;;
          prefill) pflags=(--seq "${SEQ[$P]}" --pass prefill) ;;
          prefill-cached) pflags=(--seq "${SEQ[$P]}" --pass prefill --cached "${CACHED[$P]}") ;;
          prefill-q) pflags=(--seq "${SEQ[$P]}" --pass prefill --ring-pass q) ;;
          prefill-cached-q) pflags=(--seq "${SEQ[$P]}" --pass prefill --cached "${CACHED[$P]}" --ring-pass q) ;;
          decode) pflags=(--pass decode --cached "${CACHED[$P]}" --decode-steps 3) ;;
        esac
        # A cached prefix belongs to one sequence: --docs/--balance are rejected with --cached.
        if [[ "$pass" == *cached* || "$pass" == decode ]] && [[ "$bal" != plain ]]; then continue; fi
        # Only ring runs --balance dynamic, and not with pass-Q: every job would be skipped.
        if [[ "$pass" == prefill-q && "$bal" == dynamic ]]; then continue; fi
        case "$bal" in
          plain) bflags=() ;;
          docs) bflags=(--docs "${DOCS[$P]}") ;;
          *) bflags=(--docs "${DOCS[$P]}" --balance "$bal") ;;
        esac
        base=(--block "$block" --ranks-per-node "${RPN[$P]}" "${SHAPE[@]}" "${pflags[@]}" "${bflags[@]}")
        name="p$P-$block-$pass-$bal"
        run_case "$name.run" -- "$mpirun" -np "$P" --oversubscribe "$bin/cpbench" run --no-progress \
          --iters 1 --warmup 0 --peak-tflops 1 "${base[@]}"
        run_case "$name.verify" -- "$mpirun" -np "$P" --oversubscribe "$bin/cpbench" verify --no-progress "${base[@]}"
      done
    done
  done
done

# Simulated cases: the same strategies' bytes and FLOPs under cpbench-sim's sim backend.
SIM_CASES=(
  "sim-p32-usp|-np 32 -- run --model llama3-8b --seq 131072 --strategies usp --mesh all --dtype bf16 --warmup 0 --iters 1"
  "sim-p16-all|-np 16 -- run --model llama3-8b --seq 65536 --mesh all --dtype bf16 --warmup 0 --iters 1"
)
if [[ "${PARTS_SIM256:-0}" == 1 ]]; then
  SIM_CASES+=("sim-p256-usp-readme|-np 256 -- run --model llama3-70b --seq 1048576 --strategies usp --mesh all --dtype bf16 --warmup 0 --iters 1")
fi
if [[ -x "$bin/cpbench-sim" ]] && command -v smpirun > /dev/null; then
  for c in "${SIM_CASES[@]}"; do
    read -r -a args <<< "${c#*|}"
    run_case "${c%%|*}" -- "$root/scripts/simulate.sh" --exe "$bin/cpbench-sim" --platform dgx-h100 "${args[@]}"
  done
else
  echo "parts_baseline.sh: no $bin/cpbench-sim or no smpirun: the simulated cases are left out" >&2
  problems+=("simulated cases left out (no cpbench-sim in $bin or no smpirun)")
fi

echo "$ncases case(s) in $((SECONDS - start)) s; reports in $out"
if ((${#problems[@]})); then
  printf 'PROBLEM: %s\n' "${problems[@]}"
  exit 1
fi
exit 0
