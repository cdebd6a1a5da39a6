#!/usr/bin/env python3
"""A sweep stopped by SIGTERM keeps what it measured.

usage: check_interrupt.py REPORT -- LAUNCH... (the cpbench run command, without --out)

Starts the sweep with --out REPORT, waits until the report on disk holds a finished job (it is
rewritten after every job), sends SIGTERM to the launcher, and asserts: a non-zero exit within
120 s, a report that passes validate_report.py with complete == false, interrupted_by_signal 15
(when the ranks got to write it) and at least the job seen before the signal.
"""
import signal
import subprocess
import sys
from pathlib import Path

from sweep_runner import check_kept_report, start_and_wait_for_a_job  # noqa: E402  (this folder)


def main():
    argv = sys.argv[1:]
    if "--" not in argv or argv.index("--") != 1:
        print(__doc__, file=sys.stderr)
        return 2
    report = Path(argv[0])
    proc, seen = start_and_wait_for_a_job(argv[2:], report)
    if proc.poll() is not None:
        print(f"FAIL: the sweep ended (rc {proc.returncode}) before a job was seen; make it longer", file=sys.stderr)
        return 1
    if seen < 1:
        proc.kill()
        print("FAIL: no finished job appeared in the report within 300 s", file=sys.stderr)
        return 1
    proc.send_signal(signal.SIGTERM)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        print("FAIL: no exit within 120 s of SIGTERM", file=sys.stderr)
        return 1
    problems = []
    if proc.returncode == 0:
        problems.append("exit code 0 after SIGTERM")
    rep = check_kept_report(report, seen, problems)
    if rep is not None:
        if "interrupted_by_signal" in rep and rep["interrupted_by_signal"] != signal.SIGTERM:
            problems.append(f"interrupted_by_signal {rep['interrupted_by_signal']}")
    print(f"rc {proc.returncode}; results before the signal {seen}, on disk "
          f"{len(rep['results']) if rep else '?'}; stderr tail: {err.strip().splitlines()[-1:]}")
    for p in problems:
        print("FAIL:", p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
