#!/usr/bin/env python3
"""Checks the CPU attention performance targets from cpbench_micro's Google Benchmark JSON.

Targets (N=4096, d=128, H=8, B=1, same thread count as the sgemm baseline):
  fwd/sgemm          attention forward GFLOP/s  >= 0.75 x OpenBLAS sgemm GFLOP/s
  bwd/sgemm          attention backward model GFLOP/s (2x forward FLOPs) >= 0.60 x sgemm
  fwd causal/non     causal forward FLOP rate >= 0.90 x non-causal (FLOPs of unmasked pairs only)
  bwd causal/non     the same for the backward
The sgemm baseline is the rate of running both attention-shaped products once each,
S = Q K^T (4096x4096x128) and O = P V (4096x128x4096): equal FLOPs, so the harmonic mean of
their rates. Each rate is the median over the repetitions (--stat max: the best, on a shared
machine where other jobs come and go). BM_attn_vs_sgemm, which times all cases back to
back in each iteration, is shown beside them as a cross-check on a shared (noisy) machine.

Usage:
  scripts/perf_ratios.py [--binary build/bench/micro/cpbench_micro] [--repetitions 5] [--threads T]
  scripts/perf_ratios.py --json results.json      # a file written with --benchmark_format=json
Exit status: 0 all targets met, 1 a target missed, 2 the needed benchmarks are missing.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

N, D = 4096, 128
SGEMM_QK = "BM_sgemm/M:4096/N:4096/K:128/tb:1/real_time"
SGEMM_PV = "BM_sgemm/M:4096/N:128/K:4096/tb:0/real_time"
FWD = "BM_attn_fwd/N:%d/d:%d/causal:%d/real_time"
BWD = "BM_attn_bwd/N:%d/d:%d/causal:%d/real_time"
PAIRED = "BM_attn_vs_sgemm/N:4096/d:128/"  # a prefix: the name goes on with iterations:, manual_time
FILTER = ("BM_sgemm/M:4096/(N:4096/K:128|N:128/K:4096)/|BM_attn_(fwd|bwd)/N:4096/d:128/"
          "|BM_attn_vs_sgemm/N:4096/d:128")
TARGETS = [  # (label, numerator, denominator, threshold, counter of the paired benchmark)
    ("fwd/sgemm", ("fwd", 0), "sgemm", 0.75, "fwd_over_sgemm"),
    ("bwd/sgemm", ("bwd", 0), "sgemm", 0.60, "bwd_over_sgemm"),
    ("fwd causal/non-causal", ("fwd", 1), ("fwd", 0), 0.90, "fwd_causal_over_noncausal"),
    ("bwd causal/non-causal", ("bwd", 1), ("bwd", 0), 0.90, "bwd_causal_over_noncausal"),
]


def default_binary():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for build in ("build", "build-release", "out"):
        p = os.path.join(root, build, "bench", "micro", "cpbench_micro")
        if os.path.exists(p):
            return p
    return os.path.join(root, "build", "bench", "micro", "cpbench_micro")


def run_binary(binary, reps, threads):
    cmd = [binary, "--benchmark_filter=" + FILTER, "--benchmark_format=json",
           "--benchmark_repetitions=%d" % reps]
    if threads:
        cmd.append("--threads=%d" % threads)
    print("running: " + " ".join(cmd), file=sys.stderr)
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out)


def rates(data):
    """run name -> list of GFLOP/s samples (iterations); falls back to the median aggregate."""
    samples, medians = {}, {}
    for b in data.get("benchmarks", []):
        name = b.get("run_name", b.get("name"))
        if "GFLOP/s" not in b:
            continue
        if b.get("run_type", "iteration") == "iteration":
            samples.setdefault(name, []).append(float(b["GFLOP/s"]))
        elif b.get("aggregate_name") == "median":
            medians[name] = float(b["GFLOP/s"])
    out = {n: v for n, v in samples.items()}
    for n, m in medians.items():
        out.setdefault(n, [m])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", help="read this Google Benchmark JSON instead of running the binary")
    ap.add_argument("--binary", default=None, help="cpbench_micro to run (default: build/bench/micro/cpbench_micro)")
    ap.add_argument("--repetitions", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="kernel threads (default: the binary's default)")
    ap.add_argument("--stat", choices=("median", "max"), default="median",
                    help="statistic over repetitions (max: best of N, for a shared, noisy machine)")
    args = ap.parse_args()

    if args.json:
        with open(args.json) as f:
            data = json.load(f)
    else:
        data = run_binary(args.binary or default_binary(), args.repetitions, args.threads)
    r = rates(data)
    ctx = data.get("context", {})
    print("host %s, %s CPUs, cpbench_threads %s" % (ctx.get("host_name", "?"), ctx.get("num_cpus", "?"),
                                                   ctx.get("cpbench_threads", "?")))

    stat = statistics.median if args.stat == "median" else max

    def med(name):
        if name not in r:
            print("missing benchmark: " + name, file=sys.stderr)
            sys.exit(2)
        return stat(r[name])

    qk, pv = med(SGEMM_QK), med(SGEMM_PV)
    values = {"sgemm": 2.0 / (1.0 / qk + 1.0 / pv)}
    for kind, pattern in (("fwd", FWD), ("bwd", BWD)):
        for causal in (0, 1):
            values[(kind, causal)] = med(pattern % (N, D, causal))

    def label(key):
        return key if isinstance(key, str) else "%s %s" % (key[0], "causal" if key[1] else "non-causal")

    print("%s GFLOP/s (n = samples):" % args.stat)
    print("  sgemm 4096x4096x128 (QK^T) %8.1f  (n=%d)" % (qk, len(r[SGEMM_QK])))
    print("  sgemm 4096x128x4096 (PV)   %8.1f  (n=%d)" % (pv, len(r[SGEMM_PV])))
    print("  sgemm baseline (harmonic)  %8.1f" % values["sgemm"])
    for kind, pattern in (("fwd", FWD), ("bwd", BWD)):
        for causal in (0, 1):
            n = len(r[pattern % (N, D, causal)])
            print("  attn %-22s %8.1f  (n=%d)" % (label((kind, causal)), values[(kind, causal)], n))
    paired = [b for b in data.get("benchmarks", [])
              if b.get("run_name", b.get("name", "")).startswith(PAIRED)
              and b.get("run_type", "iteration") == "iteration"]
    missed = 0
    print("targets at N=%d d=%d (the %s rates of the separate benchmarks decide PASS/MISS;" % (N, D, args.stat))
    print("  'paired' is the median ratio when all cases run back to back in each iteration):")
    for name, num, den, thr, counter in TARGETS:
        ratio = values[num] / values[den]
        ok = ratio >= thr
        missed += not ok
        extra = ""
        if paired and all(counter in b for b in paired):
            extra = "   paired %.3f (n=%d)" % (statistics.median(float(b[counter]) for b in paired), len(paired))
        print("  %-24s %.3f  (>= %.2f)  %s%s" % (name, ratio, thr, "PASS" if ok else "MISS", extra))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
