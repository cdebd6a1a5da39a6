#!/usr/bin/env bash
# expect_fail.sh NP REGEX REPORT -- COMMAND...
# Runs COMMAND under mpirun with NP ranks and passes only if it exits non-zero (not by the 120 s
# timeout), prints a line matching REGEX on every rank (NP times), and leaves no report at REPORT
# (use - for none). The first two checks are expect_fail_cmd.sh's.
set -u
np=$1 regex=$2 report=$3
shift 4
rm -f "$report"
"$(dirname "$0")/expect_fail_cmd.sh" "$regex" "$np" -- mpirun --oversubscribe --allow-run-as-root -np "$np" "$@" || exit 1
if [[ "$report" != "-" && -e "$report" ]]; then echo "expect_fail: a report was left at $report"; exit 1; fi
echo "expect_fail: ok (message on all $np ranks, no report)"
