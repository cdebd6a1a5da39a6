#!/usr/bin/env python3
"""Turns the CUDA kernel benchmark's measurements into a simulated platform's efficiency tables.

  scripts/kernel_table.py cuda_attn_bench.json --platform configs/platforms/dgx-h100.json \
      [--out kernel_table.json] [--write-platform measured-h100.json]

cuda_attn_bench.json is what `cpbench_cuda_bench --json` writes (scripts/gpu_check.sh, step
kernel_bench: causal and non-causal blocks of each --seqs length, one head dim). The platform
gives the peak (peak_tflops of the benchmark's dtype: the device's datasheet figure, which the
measured rates are divided by) and, with --write-platform, the rest of the platform file.

The tables follow the sim backend's lookup (kernels/sim/sim_platform.h, attention_block_size):
  attn_fwd, attn_bwd               non-causal blocks of N tokens (every pair visible) at size N;
  attn_fwd_masked, attn_bwd_masked causal blocks of N at size (N + 1) / 2, their visible extent;
  gemm                             the cuBLAS GEMM of the same run at (m n k)^(1/3) (when measured).
Rates are hardware FLOPs (backward 2.5x forward), as the sim backend charges them. An efficiency
above 1 means the peak is not this device's: exit 2, naming the row. The attention tables are
written by head dim ({"by_head_dim": {"128": points}, "source": ...}: the benchmark's head dim,
with its source, device, date and shape, beside the numbers); --write-platform puts them in the
platform in place of that head dim's tables (a platform's tables for other head dims stay, their
source kept beside), replaces its gemm table, and says so in its comment.
"""
import argparse
import datetime
import json
import sys


def die(msg):
    print("kernel_table.py: " + msg, file=sys.stderr)
    sys.exit(2)


def tables(bench, peak):
    rows = bench.get("results") or []
    if not rows:
        die("no results in the benchmark file (was it run with --seqs?)")
    eff = {}
    for r in rows:
        for kind in ("fwd", "bwd"):
            cls = "attn_%s%s" % (kind, "_masked" if r["causal"] else "")
            e = r["%s_tflops" % kind] / peak
            if not (e > 0) or e > 1:
                die("%s at seq %d: %.1f TFLOP/s is %.3f of the peak %.1f: not in (0, 1] (wrong --platform or dtype?)"
                    % (cls, r["seq"], r["%s_tflops" % kind], e, peak))
            size = (r["seq"] + 1) / 2 if r["causal"] else float(r["seq"])
            eff.setdefault(cls, {})[size] = round(e, 4)
    g = bench.get("gemm") or {}
    if g.get("tflops", 0) > 0:
        e = g["tflops"] / peak
        if e > 1:
            die("gemm %d^3: %.1f TFLOP/s is above the peak %.1f" % (g["m"], g["tflops"], peak))
        # at the shape's geometric mean, where the sim reads a square table (SimPlatform::gemm_efficiency)
        eff["gemm"] = {round((g["m"] * g["n"] * g["k"]) ** (1.0 / 3), 2): round(e, 4)}
    for need in ("attn_fwd", "attn_bwd"):
        if need not in eff:
            die("no non-causal rows: run the benchmark with --causal both (the %s table needs them)" % need)
    return {cls: [[s, pts[s]] for s in sorted(pts)] for cls, pts in eff.items()}


def by_head_dim(eff, head_dim, source):
    """The attention classes as tables of one head dim with their source; gemm as one table for
    any head dim ({points, source}), so every table written names where it came from."""
    return {cls: {"points": pts, "source": source} if cls == "gemm"
            else {"by_head_dim": {str(head_dim): pts}, "source": source}
            for cls, pts in eff.items()}


def merged(old, new):
    """new's head dim in place of old's; old's other head dims kept, with their source."""
    if not isinstance(old, dict) or "by_head_dim" not in old or "by_head_dim" not in new:
        return new
    keep = {d: pts for d, pts in old["by_head_dim"].items() if d not in new["by_head_dim"]}
    if not keep:
        return new
    src = new["source"] + "; head dim %s: %s" % (", ".join(sorted(keep, key=int)), old["source"])
    return {"by_head_dim": dict(keep, **new["by_head_dim"]), "source": src}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bench", help="cpbench_cuda_bench --json output")
    ap.add_argument("--platform", required=True, help="platform JSON whose peak_tflops[dtype] is this device's")
    ap.add_argument("--out", help="write the tables and their source here (default: stdout)")
    ap.add_argument("--write-platform", help="write a copy of --platform with these tables")
    a = ap.parse_args()
    try:
        bench = json.load(open(a.bench))
        plat = json.load(open(a.platform))
    except (OSError, ValueError) as e:
        die(str(e))
    dtype = bench.get("dtype", "bf16")
    peak = (plat.get("peak_tflops") or {}).get(dtype)
    if not peak:
        die("platform %s has no peak_tflops for %s" % (a.platform, dtype))
    if bench.get("check_passed") is False:
        die("the benchmark's kernel check failed: its timings are of wrong kernels")
    head_dim = bench.get("head_dim")
    if not isinstance(head_dim, int) or head_dim <= 0:
        die("the benchmark file has no head_dim (a positive integer): the tables are by head dim")
    eff = tables(bench, peak)
    today = datetime.date.today().isoformat()
    source = ("measured %s by cpbench_cuda_bench on %s (scripts/gpu_check.sh kernel_bench): %s, B = %s, H = %s, "
              "G = %s, d = %s, median of %s iterations; rates / the %s peak %s TFLOP/s of %s; attn_*: non-causal "
              "blocks at N, attn_*_masked: causal blocks at (N + 1) / 2, gemm: cuBLAS %s^3"
              % (today, bench.get("device", "?"), dtype, bench.get("batch"), bench.get("heads"), bench.get("kv_heads"),
                 bench.get("head_dim"), bench.get("iters"), dtype, peak, a.platform, (bench.get("gemm") or {}).get("m")))
    eff = by_head_dim(eff, head_dim, source)
    out = {"device": bench.get("device"), "dtype": dtype, "head_dim": head_dim,
           "heads": bench.get("heads"), "kv_heads": bench.get("kv_heads"), "source": source, "efficiency": eff}
    text = json.dumps(out, indent=1) + "\n"
    if a.out:
        open(a.out, "w").write(text)
    else:
        sys.stdout.write(text)
    if a.write_platform:
        p = dict(plat)
        old = plat.get("efficiency") or {}
        p["efficiency"] = dict(old, **{cls: merged(old.get(cls), t) for cls, t in eff.items()})
        p["comment"] = list(plat.get("comment") or []) + [
            "Efficiency tables %s (attention: head dim %d) replaced by scripts/kernel_table.py: %s"
            % (sorted(eff), head_dim, source)]
        open(a.write_platform, "w").write(json.dumps(p, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
