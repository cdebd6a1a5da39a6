#!/usr/bin/env python3
"""Fault injection on a running sweep: a rank killed (SIGKILL) or stopped (SIGSTOP) mid-job.

usage: check_faults.py kill|stop REPORT [--timeout S] -- LAUNCH...   (the mpirun command, without --out)

Waits until the report on disk holds a finished job, then sends the signal to world rank 1 (found
through OMPI_COMM_WORLD_RANK in the environment of mpirun's children) and asserts:
  kill: mpirun exits non-zero within 30 s; the report is valid and keeps the finished jobs.
  stop: the others' watchdog fires (--timeout S): mpirun exits non-zero within S + 30 s, stderr
        names rank 1 as the rank that did not answer, the report is valid, keeps the finished
        jobs and records the running job as failed with a timeout reason naming rank 1.
Prints the time from the signal to the exit.
"""
import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from sweep_runner import check_kept_report, start_and_wait_for_a_job  # noqa: E402  (this folder)


def world_rank_pid(launcher_pid, rank):
    """The pid of world rank `rank` among the launcher's descendants."""
    out = subprocess.run(["pgrep", "-P", str(launcher_pid)], capture_output=True, text=True).stdout.split()
    for pid in out:
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"OMPI_COMM_WORLD_RANK={rank}".encode() in env:
            return int(pid)
        deeper = world_rank_pid(int(pid), rank)  # a daemon in between
        if deeper:
            return deeper
    return None


def main():
    argv = sys.argv[1:]
    if "--" not in argv:
        print(__doc__, file=sys.stderr)
        return 2
    cut = argv.index("--")
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["kill", "stop"])
    ap.add_argument("report")
    ap.add_argument("--timeout", type=float, default=5)
    a = ap.parse_args(argv[:cut])
    report = Path(a.report)
    proc, seen = start_and_wait_for_a_job(argv[cut + 1:], report)
    victim = world_rank_pid(proc.pid, 1) if proc.poll() is None else None
    if victim is None:
        proc.kill()
        print(f"FAIL: no job finished, or rank 1 not found, before the sweep ended (rc {proc.poll()})", file=sys.stderr)
        return 1
    time.sleep(0.5)  # into the next job
    t0 = time.time()
    os.kill(victim, signal.SIGKILL if a.mode == "kill" else signal.SIGSTOP)
    bound = 30 if a.mode == "kill" else a.timeout + 30
    problems = []
    try:
        out, err = proc.communicate(timeout=bound)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        problems.append(f"no exit within {bound:.0f} s of the signal")
    elapsed = time.time() - t0
    try:  # never leave a stopped process behind
        os.kill(victim, signal.SIGKILL)
    except OSError:
        pass
    if proc.returncode == 0:
        problems.append("exit code 0")
    rep = check_kept_report(report, seen, problems)
    if a.mode == "stop":
        if "rank 1 did not answer" not in err:
            problems.append("stderr does not name rank 1 as the rank that did not answer")
        if rep is not None:
            failed = [r for r in rep["results"] if r["status"] == "failed"]
            if not any("timeout" in r["reason"] and "rank 1" in r["reason"] for r in failed):
                problems.append("no failed job with a timeout reason naming rank 1 in the report")
    print(f"{a.mode}: rc {proc.returncode}, exit {elapsed:.1f} s after the signal, {seen} job(s) finished before it")
    for line in err.splitlines():
        if "watchdog" in line:
            print("  " + line)
    for p in problems:
        print("FAIL:", p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
