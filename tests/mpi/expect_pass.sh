#!/usr/bin/env bash
# expect_pass.sh REGEX -- COMMAND...
# Runs COMMAND and passes only if it exits 0 AND prints a line matching REGEX (extended regex).
# ctest's PASS_REGULAR_EXPRESSION alone ignores the exit code: a crash, a leak report or an abort
# after "VERIFY PASSED" would pass. Prints the command's output, then why it failed.
set -u
regex=$1
if [[ $# -lt 3 || $2 != "--" ]]; then echo "usage: expect_pass.sh REGEX -- COMMAND..." >&2; exit 2; fi
shift 2
out=$("$@" 2>&1)
rc=$?
echo "$out"
if ! grep -qE -- "$regex" <<<"$out"; then echo "expect_pass: /$regex/ not printed (exit $rc)"; exit 1; fi
if [[ $rc -ne 0 ]]; then echo "expect_pass: exit code $rc after printing /$regex/, expected 0"; exit 1; fi
echo "expect_pass: ok (exit 0, /$regex/ printed)"
