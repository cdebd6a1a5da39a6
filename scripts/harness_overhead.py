#!/usr/bin/env python3
"""Per-job overhead of the harness on a `--mesh all` sweep (a benchmark, not a test).

Runs the same tiny usp --mesh all sweep with 1 and with K sequence lengths under mpirun -np P,
REPS times each, for every binary given, and prints the median wall time per extra job:
(T_K - T_1) / ((K - 1) * jobs per seq). Start-up (MPI init, calibration) cancels out; what is
left is the job itself (tiny) plus the harness's own per-job work (group creation, agreement,
report writing). Compare binaries measured in one run: timings on shared machines are noisy.

usage: harness_overhead.py [--np 8] [--k 5] [--reps 3] NAME=BINARY [NAME=BINARY ...]
"""
import argparse
import os
import statistics
import subprocess
import time


def sweep_time(binary, np_, seqs, out):
    cmd = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", str(np_), binary, "run", "--model", "tiny",
           "--heads", "8", "--kv-heads", "8", "--strategies", "usp", "--mesh", "all", "--seq", ",".join(map(str, seqs)),
           "--warmup", "0", "--iters", "1", "--threads", "1", "--no-progress", "--peak-tflops", "1", "--out", out]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--np", type=int, default=8)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("binaries", nargs="+", metavar="NAME=BINARY")
    a = ap.parse_args()
    os.environ.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")
    meshes = sum(1 for u in range(1, a.np + 1) if a.np % u == 0)
    seqs = [16 * a.np * (i + 1) for i in range(a.k)]
    rows = {}
    for rep in range(a.reps):  # interleave binaries so load drifts hit both alike
        for spec in a.binaries:
            name, binary = spec.split("=", 1)
            t1 = sweep_time(binary, a.np, seqs[:1], "/tmp/overhead_1.json")
            tk = sweep_time(binary, a.np, seqs, "/tmp/overhead_k.json")
            rows.setdefault(name, []).append((tk - t1) / ((a.k - 1) * meshes) * 1e3)
    print(f"per-job wall time, P={a.np}, usp --mesh all ({meshes} meshes), {a.k} vs 1 seqs, {a.reps} reps:")
    for name, v in rows.items():
        print(f"  {name:12s} median {statistics.median(v):8.1f} ms/job   samples {['%.1f' % x for x in v]}")


if __name__ == "__main__":
    main()
