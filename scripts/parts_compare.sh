#!/usr/bin/env bash
# Compares two directories written by scripts/parts_baseline.sh (before and after a refactor):
#
#   scripts/parts_compare.sh BASE_DIR NEW_DIR
#
# 1. the manifests: every case in both, with the same cpbench exit code;
# 2. every report against its namesake with `scripts/compare_reports.py --exact` (bytes per phase
#    and rank, tier bytes, FLOPs, status, verification and every tensor's error, the config; not
#    timings), every difference printed, then one line per report pair and a summary.
# Exit 0 when everything is identical, 1 on any difference, 2 when a directory has no manifest or a
# report cannot be read or is not valid.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
(($# == 2)) || { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0" >&2; exit 2; }
base="$1" new="$2"
for d in "$base" "$new"; do
  [[ -f "$d/manifest.tsv" ]] || { echo "parts_compare.sh: $d/manifest.tsv not found (not a parts_baseline.sh directory)" >&2; exit 2; }
done

# Case name and exit code of each manifest line (the command lines differ by BIN_DIR and OUT_DIR).
codes() { cut -f1,2 "$1" | sort; }
manifest_status=0
if ! diff_out=$(diff <(codes "$base/manifest.tsv") <(codes "$new/manifest.tsv")); then
  manifest_status=1
  echo "Cases or cpbench exit codes differ (< BASE, > NEW; case<TAB>exit code):"
  echo "$diff_out" | grep '^[<>]'
  echo
fi

python3 "$root/scripts/compare_reports.py" --exact "$base" "$new"
reports_status=$?

ncases=$(wc -l < "$base/manifest.tsv")
if ((reports_status == 2)); then
  echo "parts_compare: INVALID reports (above)"
  exit 2
elif ((reports_status != 0 || manifest_status != 0)); then
  echo "parts_compare: DIFFERENT ($ncases case(s) in BASE)"
  exit 1
fi
echo "parts_compare: IDENTICAL ($ncases case(s): same exit codes, every report equal in --exact's fields)"
exit 0
