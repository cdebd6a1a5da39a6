#!/usr/bin/env python3
"""Writes configs/platforms/local.json: this machine as a simulated platform, from its own
micro-benchmarks (bench/micro cpbench_micro), so that simulated runs can be checked against
measured ones (docs/SIMULATION.md, "local").

  scripts/calibrate_platform.py [--build build] [--threads 1] [--out configs/platforms/local.json]

Measured, with --threads kernel threads per rank (one rank = one core by default):
  - GEMM rates (BM_backend_gemm): the best is the fp32 peak, the others give the GEMM
    efficiency at their geometric mean (M N K)^(1/3), where the sim backend reads a square table;
  - attention forward and backward rates (BM_attn_fwd/bwd, d = --head-dim, N = 1024 and 4096,
    hardware FLOPs): non-causal blocks (every pair visible) are the attn_fwd/attn_bwd tables at
    size N, causal ones the attn_fwd_masked/attn_bwd_masked tables at the size the sim backend
    looks a causal N x N block up at, its mean visible extent (N + 1) / 2
    (kernels/sim/sim_platform.h, attention_block_size);
  - memory bandwidth: the best of the memory-bound kernels (rmsnorm, rope, merge) in GB/s;
  - MPI between two ranks (BM_CommRingShiftRaw at 1 to 64 MiB under mpirun -np 2): the
    per-direction bandwidth and the latency of a least-squares line through the points.
  - overlap interference (BM_GemmDuringRingShift/MiB:64 under mpirun -np 2, 3 runs): how much a
    GEMM on one thread slows while the comm layer's ring shift is in flight (its comm thread
    copies on the same cores); the median of the runs' medians is compute_slowdown.
The local platform is one node of --gpus-per-node "GPUs" (ranks), all behind that link.
"""
import argparse
import datetime
import json
import os
import platform as pyplatform
import subprocess
import sys


def run_micro(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    start = out.find("{")
    return json.loads(out[start:])["benchmarks"]


def rate(benches, prefix, counter):
    vals = [b[counter] for b in benches if b["name"].startswith(prefix) and counter in b]
    if not vals:
        sys.exit("calibrate_platform.py: no %s result for %s" % (counter, prefix))
    return max(vals)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=64, choices=(64, 128),
                    help="attention benchmarks' head dim (the 'small' preset's is 64)")
    ap.add_argument("--min-time", default="0.3")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "configs", "platforms", "local.json"))
    a = ap.parse_args()
    micro = os.path.join(a.build, "bench", "micro", "cpbench_micro")
    if not os.access(micro, os.X_OK):
        sys.exit("calibrate_platform.py: %s not found (build with CPBENCH_MICRO=ON)" % micro)

    common = ["--benchmark_format=json", "--benchmark_min_time=%s" % a.min_time]
    k = run_micro([micro, "--threads=%d" % a.threads,
                   ("--benchmark_filter=^BM_backend_gemm/|^BM_attn_(fwd|bwd)/N:(1024|4096)/d:%d/causal:[01]/|"
                    "^BM_(rmsnorm_fwd|rmsnorm_bwd|rope|attn_merge)/") % a.head_dim] + common)
    gemm = {}
    for b in k:
        if b["name"].startswith("BM_backend_gemm/"):
            parts = dict(p.split(":") for p in b["name"].split("/")[1:] if ":" in p)
            # keyed by the shape's geometric mean, where the sim backend reads a square table
            # (SimPlatform::gemm_efficiency): a square GEMM of the same FLOPs
            size = round((int(parts["M"]) * int(parts["N"]) * int(parts["K"])) ** (1.0 / 3), 2)
            gemm[size] = max(b["GFLOP/s"], gemm.get(size, 0))
    peak_gflops = max(gemm.values())
    # (shapes of the same geometric mean were merged above, the best kept)
    today = datetime.date.today().isoformat()
    # one table for any head dim, with where it came from (every table names its source)
    eff = {"gemm": {"points": [[s, round(gemm[s] / peak_gflops, 4)] for s in sorted(gemm)],
                   "source": "measured on %s by scripts/calibrate_platform.py: BM_backend_gemm (every M, N, K "
                             "it runs, keyed by (M N K)^(1/3), where the sim reads a square table, the best of "
                             "each), %d thread(s), GFLOP/s over the fp32 peak (the best of them)" % (today, a.threads)}}
    for kind in ("fwd", "bwd"):
        for causal, cls in ((0, "attn_" + kind), (1, "attn_%s_masked" % kind)):
            pts = []
            for n in (1024, 4096):
                r = rate(k, "BM_attn_%s/N:%d/d:%d/causal:%d/" % (kind, n, a.head_dim, causal), "hw_GFLOP/s")
                size = (n + 1) / 2 if causal else n  # n (n + 1) / 2 visible pairs over n queries
                pts.append([size, round(min(1.0, r / peak_gflops), 4)])
            # a table for the head dim it was measured at (a run at another head dim is charged at
            # the nearest, and its report's context.simulated.efficiency_tables says so)
            eff[cls] = {"by_head_dim": {str(a.head_dim): pts},
                        "source": "measured on %s by scripts/calibrate_platform.py: BM_attn_%s/N:1024,4096/d:%d/causal:%d, "
                                  "%d thread(s), hardware GFLOP/s over the fp32 peak (best BM_backend_gemm)"
                                  % (today, kind, a.head_dim, causal, a.threads)}
    mem_bw = max(b["GB/s"] for b in k if "GB/s" in b)

    c = run_micro(["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", "2", micro,
                   "--benchmark_filter=^BM_CommRingShiftRaw/"] + common)
    t = {int(b["name"].split("MiB:")[1].split("/")[0]): b["p50_ms"] * 1e-3 for b in c if "p50_ms" in b}
    # least-squares line time = lat + bytes / bw through every size (a loaded machine is noisy)
    xs = [m * 1048576.0 for m in sorted(t)]
    ys = [t[m] for m in sorted(t)]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    bw = 1.0 / slope  # bytes/s, per direction (both directions move at once)
    lat = max(1e-6, my - slope * mx)

    runs = [run_micro(["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", "2", micro,
                       "--benchmark_filter=^BM_GemmDuringRingShift/"] + common) for _ in range(3)]
    slow = sorted(rate(r, "BM_GemmDuringRingShift/", "gemm_slowdown") for r in runs)

    cpu = "unknown CPU"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    plat = {
        "name": "local",
        "comment": [
            "This machine (%s, %s), written by scripts/calibrate_platform.py on %s from its micro-benchmarks"
            % (cpu, pyplatform.node(), today),
            "with %d kernel thread(s) per rank: fp32 peak = best BM_backend_gemm rate; efficiencies = measured"
            % a.threads,
            "rates / peak (attention: d=%d, hardware FLOPs; attn_*: non-causal blocks at N, attn_*_masked: causal" % a.head_dim,
            "blocks at (N + 1) / 2); memory_bw = best memory-bound kernel;",
            "intra = MPI ring shift between 2 ranks (BM_CommRingShiftRaw 1-64 MiB: bandwidth per direction and",
            "latency of a least-squares line). One node; a 'GPU' is one rank. Re-run the script to refresh.",
            "cores_per_node = this machine's cores / threads per rank: more ranks than that share cores (as",
            "mpirun --oversubscribe runs them here), and the simulation shares each core's speed alike.",
        ],
        "device": "%s, %d thread(s) per rank" % (cpu, a.threads),
        "peak_tflops": {"fp32": round(peak_gflops / 1e3, 6)},
        "efficiency": eff,
        "memory_bw_gbs": round(mem_bw, 3),
        "hbm_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "kernel_launch_us": 1,
        "overlap_interference": {
            "compute_slowdown": round(max(0.0, slow[1]), 3),
            "source": "measured on %s by scripts/calibrate_platform.py: BM_GemmDuringRingShift/MiB:64, a 512^3 GEMM "
                      "while a 64 MiB ring shift is in flight (comm thread), median of 3 runs %s" % (today, [round(x, 3) for x in slow]),
            # the runs' spread is the input's uncertainty (docs/SIMULATION.md, "Each input's
            # uncertainty"): on this 2-core machine they are bimodal (the OS puts the comm thread on
            # the GEMM's core or the other one), so it can be many times the median
            "uncertainty": {"rel": round((max(slow) - min(slow)) / max(slow[1], 1e-3), 2),
                            "reason": "the spread of the 3 runs, %s, relative to their median (bimodal: the OS runs the "
                                      "comm thread on the GEMM's core or the other one)" % [round(x, 3) for x in slow]}},
        "cores_per_node": max(1, (os.cpu_count() or 1) // a.threads),
        "network": {
            "gpus_per_node": a.gpus_per_node,
            "max_nodes": 1,
            "intra": {"what": "MPI between ranks of this machine (shared memory)",
                      "bw_gbs": round(bw / 1e9, 4), "lat_us": round(lat * 1e6, 3)},
        },
        "measured": {"gemm_gflops": gemm, "ring_shift_p50_s": t, "date": today},
    }
    # The band comes from docs/SIMULATION.md Validation 1 (simulated vs measured), not from the
    # micro-benchmarks: keep the one the file had; after a recalibration, re-run that section and
    # update it from the new residuals.
    try:
        band = json.load(open(a.out)).get("band")
    except (OSError, ValueError):
        band = None
    if band is None:
        sys.exit("calibrate_platform.py: %s has no 'band' to keep: copy one from configs/platforms/local.json "
                 "and re-derive it from docs/SIMULATION.md Validation 1" % a.out)
    plat["band"] = band
    with open(a.out, "w") as f:
        json.dump(plat, f, indent=2)
        f.write("\n")
    print("calibrate_platform.py: wrote %s (peak %.1f GFLOP/s, memory %.1f GB/s, MPI %.2f GB/s, %.1f us)"
          % (a.out, peak_gflops, mem_bw, bw / 1e9, lat * 1e6))


if __name__ == "__main__":
    main()
