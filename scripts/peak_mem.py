#!/usr/bin/env python3
"""Runs a command and reports the machine's peak memory use above what it used before the start.

    scripts/peak_mem.py [--interval S] -- COMMAND ...

Why not the command's maximum RSS: under SimGrid SMPI every simulated rank maps the same shared
file (smpi/shared-malloc) and its own copy of the binary, and RSS counts a shared page once per
mapping: a 256-rank simulation that uses 2 GiB reports 79 GB. What the machine must have is what
/proc/meminfo says is no longer available (MemTotal - MemAvailable, which includes the tmpfs files
SMPI keeps in /dev/shm). The figure is machine-wide: run it on an otherwise idle machine, and
read it as an upper bound of the command's own use.

Prints one line to stderr at the end:
    peak_mem: 2.31 GiB above the 0.95 GiB in use at the start (shmem +0.66 GiB), 311.2 s, exit 0
and exits with the command's exit code.
"""
import subprocess
import sys
import time

GIB = float(1 << 30)


def meminfo():
    vals = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, rest = line.split(":", 1)
            vals[key] = int(rest.split()[0]) * 1024  # kB
    return vals["MemTotal"] - vals["MemAvailable"], vals.get("Shmem", 0)


def main(argv):
    interval = 0.5
    if argv[:1] == ["--interval"]:
        interval = float(argv[1])
        argv = argv[2:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        sys.stderr.write("usage: peak_mem.py [--interval S] -- COMMAND ...\n")
        return 2
    used0, shm0 = meminfo()
    peak_used, peak_shm = used0, shm0
    t0 = time.time()
    proc = subprocess.Popen(argv)
    while True:
        try:
            rc = proc.wait(timeout=interval)
            break
        except subprocess.TimeoutExpired:
            pass
        used, shm = meminfo()
        peak_used = max(peak_used, used)
        peak_shm = max(peak_shm, shm)
    sys.stderr.write("peak_mem: %.2f GiB above the %.2f GiB in use at the start (shmem %+.2f GiB), "
                     "%.1f s, exit %d\n" % ((peak_used - used0) / GIB, used0 / GIB,
                                           (peak_shm - shm0) / GIB, time.time() - t0, rc))
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
