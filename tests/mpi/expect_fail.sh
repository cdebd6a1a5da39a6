#!/usr/bin/env bash
# expect_fail.sh NP REGEX REPORT -- COMMAND...
# Runs COMMAND under mpirun with NP ranks and passes only if it exits non-zero, prints a line
# matching REGEX on every rank (NP times), and leaves no report at REPORT (use - for none).
set -u
np=$1 regex=$2 report=$3
shift 4
rm -f "$report"
out=$(timeout 120 mpirun --oversubscribe --allow-run-as-root -np "$np" "$@" 2>&1)
rc=$?
echo "$out"
if [[ $rc -eq 0 ]]; then echo "expect_fail: exit code 0, expected failure"; exit 1; fi
if [[ $rc -eq 124 ]]; then echo "expect_fail: timed out (hang?)"; exit 1; fi
count=$(grep -cE -- "$regex" <<<"$out")
if [[ $count -lt $np ]]; then echo "expect_fail: message /$regex/ printed $count times, expected $np (one per rank)"; exit 1; fi
if [[ "$report" != "-" && -e "$report" ]]; then echo "expect_fail: a report was left at $report"; exit 1; fi
echo "expect_fail: ok (exit $rc, message on all $np ranks)"
