#!/usr/bin/env bash
# expect_fail_cmd.sh REGEX COUNT -- COMMAND...
# Runs COMMAND (a whole mpirun line, e.g. MPMD with ':') and passes only if it exits non-zero
# within 120 s, not by timeout, printing a line matching REGEX at least COUNT times (once per rank).
set -u
regex=$1 count_wanted=$2
shift 3
out=$(timeout 120 "$@" 2>&1)
rc=$?
echo "$out"
if [[ $rc -eq 0 ]]; then echo "expect_fail_cmd: exit code 0, expected failure"; exit 1; fi
if [[ $rc -eq 124 ]]; then echo "expect_fail_cmd: timed out (hang?)"; exit 1; fi
count=$(grep -cE -- "$regex" <<<"$out")
if [[ $count -lt $count_wanted ]]; then echo "expect_fail_cmd: /$regex/ printed $count times, expected $count_wanted"; exit 1; fi
echo "expect_fail_cmd: ok (exit $rc)"
