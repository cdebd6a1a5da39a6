#!/usr/bin/env python3
"""Writes a platform's GEMM shape grid from OpenXLA's measured matmul table.

  scripts/xla_gemm_table.py matmul_interpolator_data.h --arch sm_90 --peak 989.4 [--dtype BF16xBF16->BF16]

OpenXLA keeps, per GPU architecture, the FLOP/s it measured for batched GEMMs over a grid of
(b, m, n, k) (xla/service/gpu/model/matmul_interpolator_data.h, a text proto). This prints the
batch-1 entries of one architecture and dtype as the platform form the simulator reads
(kernels/sim/sim_platform.h, GemmGrid): {"shapes": [[m, n, k, efficiency], ...]}, efficiency =
FLOP/s / (peak TFLOP/s x 1e12), to 4 significant digits, sorted by (m, n, k). Exit 2 when the
architecture or dtype is absent, the shapes do not form a complete grid, or a rate exceeds the peak.
The caller adds the "source" (file, commit, what the numbers are).
"""
import argparse
import json
import re
import sys


def die(msg):
    print("xla_gemm_table.py: " + msg, file=sys.stderr)
    sys.exit(2)


def entries(text, arch, dtype):
    """{(b, m, n, k): FLOP/s} of one architecture's block for one dtype key (case-insensitive)."""
    parts = re.split(r'key:\s*"((?:sm_|gfx)\w+)"\s*value\s*\{', text)
    out = {}
    for i in range(1, len(parts), 2):
        if parts[i] != arch:
            continue
        for e in re.finditer(r"entries\s*\{\s*b:\s*(\d+)\s*m:\s*(\d+)\s*n:\s*(\d+)\s*k:\s*(\d+)(.*?)\n\s*\}",
                             parts[i + 1], re.S):
            b, m, n, k = (int(x) for x in e.groups()[:4])
            f = re.search(r'key:\s*"%s"\s*value:\s*(\d+)' % re.escape(dtype), e.group(5), re.I)
            if f:
                out[(b, m, n, k)] = float(f.group(1))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("table", help="OpenXLA's matmul_interpolator_data.h")
    ap.add_argument("--arch", required=True, help="the table's architecture key, e.g. sm_90")
    ap.add_argument("--peak", type=float, required=True, help="the device's peak TFLOP/s for the dtype")
    ap.add_argument("--dtype", default="BF16xBF16->BF16")
    a = ap.parse_args()
    rates = {key[1:]: v for key, v in entries(open(a.table).read(), a.arch, a.dtype).items() if key[0] == 1}
    if not rates:
        die("no batch-1 %s entries for %s in %s" % (a.dtype, a.arch, a.table))
    axes = [sorted({s[i] for s in rates}) for i in range(3)]
    if len(rates) != len(axes[0]) * len(axes[1]) * len(axes[2]):
        die("%d shapes do not form the complete grid of %s" % (len(rates), axes))
    rows = []
    for (m, n, k) in sorted(rates):
        e = rates[(m, n, k)] / (a.peak * 1e12)
        if not 0 < e <= 1:
            die("%dx%dx%d: %.1f TFLOP/s is above the peak %.1f" % (m, n, k, rates[(m, n, k)] / 1e12, a.peak))
        rows.append([m, n, k, float("%.4g" % e)])
    print(json.dumps({"shapes": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
