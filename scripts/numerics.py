#!/usr/bin/env python3
"""Error against float64 as the CP degree, the strategy and the precision of what travels grow
(issue 42; docs/NUMERICS.md).

For every P, precision variant, mask and seed this runs `cpbench verify --dump` in a 16-bit dtype
(the CPU backend emulates bf16 at the GPU kernels' rounding points, DESIGN "Rounding points"),
recomputes the layer in float64 from the dumped inputs (scripts/layer_reference.py, the reference
check_dump.py uses) and measures, per strategy and tensor, the relative Frobenius error
||x - x64|| / ||x64|| and the largest absolute error. `single` (the whole layer on one rank, no CP)
at the same dtype is the baseline: `ratio` is a strategy's error over single's from the same run.
Seeds give the median and the spread (min, max).

Variants (what travels, --partial-dtype / --acc-dtype):
  f32          the defaults: the ring's running output and its dK,dV accumulators in float32
  bf16-partial --partial-dtype bf16: the running output rounded to bf16 at every merge
  bf16-acc     --acc-dtype bf16: the accumulators rounded to bf16 at every hop (s_acc = 2)
  fp8-block    --dtype fp8 --fp8-scaling block --pass prefill: FlashAttention-3's fp8 forward (q, k, v
               in e4m3 with a power-of-two scale per 32 elements, P in e4m3); o only
  fp8-tensor   the same with one scale per tensor a rank holds (its shard's amax)
  comm-fp8     --comm-dtype fp8: the K,V ring blocks travel as e4m3 with a scale per 32 values (the
               owner computes on its own block as formed, the others on the decoded one); train
  comm-fp8-tensor  the same with one scale per block in transit

Engines (what "against float64" means):
  dump    (default) `verify --dump`, the whole layer recomputed in float64 NumPy from the dumped
          inputs x and weights: every rounding from x on, the inputs' included
  verify  `cpbench verify --numerics S` (one run per P, variant and mask for the S consecutive
          seeds): float64 attention of single's stored q, k, v, do in C++ (bench/numerics.h): what
          the attention and what travels lose, the gradients as the block hands them on
--from-reports R.json ... makes the tables from `verify --numerics` reports already written (P, the
variant and the mask read from each report's config) instead of running anything.

usage: numerics.py --cpbench build/bench/cpbench [--engine dump|verify] [--P 1,2,4,8,16] [--seq 1024]
                   [--seeds 1,2,3] [--variants f32,bf16-partial,bf16-acc] [--masks causal,window,docs]
                   [--strategies ring,...] [--out numerics.json] [--markdown numerics.md] [--plot numerics.png]
       numerics.py --from-reports R.json [R.json ...] [--markdown ...] [--plot ...]
Exit 0 when every run produced its dump, 1 otherwise (a verify failure against single is
recorded, not fatal: the error is what this measures).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from layer_reference import reference  # noqa: E402
import cpmodel  # noqa: E402

TENSORS = ("o", "dq", "dk", "dv")
VARIANTS = {
    "f32": [],
    "bf16-partial": ["--partial-dtype", "bf16"],
    "bf16-acc": ["--acc-dtype", "bf16"],
    "fp8-block": ["--dtype", "fp8", "--fp8-scaling", "block", "--pass", "prefill"],
    "fp8-tensor": ["--dtype", "fp8", "--fp8-scaling", "tensor", "--pass", "prefill"],
    "comm-fp8": ["--comm-dtype", "fp8"],
    "comm-fp8-tensor": ["--comm-dtype", "fp8", "--fp8-scaling", "tensor"],
}
# The strategies each variant changes (ulysses has no ring running output or accumulator; the
# running output of allgather-kv's one attention never merges).
STRATEGIES = {
    "f32": ["ring", "ring-zigzag", "double-ring", "usp", "ulysses", "allgather-kv"],
    "bf16-partial": ["ring", "ring-zigzag", "double-ring", "usp"],
    "bf16-acc": ["ring", "ring-zigzag", "double-ring", "usp", "allgather-kv"],
    "fp8-block": ["ring", "ring-zigzag", "double-ring", "usp", "ulysses", "allgather-kv"],
    "fp8-tensor": ["ring", "ring-zigzag", "double-ring", "usp", "ulysses", "allgather-kv"],
    "comm-fp8": ["ring", "ring-zigzag"],  # (--comm-dtype: a single K,V ring of the ring family)
    "comm-fp8-tensor": ["ring", "ring-zigzag"],
}
# What the ring's K,V blocks and accumulators travel as under each variant, for the bytes table:
# (acc_dtype, comm_dtype, fp8_scaling).
TRAVEL = {"f32": ("f32", None, "block"), "bf16-partial": ("f32", None, "block"), "bf16-acc": ("bf16", None, "block"),
          "comm-fp8": ("f32", "fp8", "block"), "comm-fp8-tensor": ("f32", "fp8", "tensor")}


def mask_args(mask, N):
    if mask == "causal":
        return []
    if mask == "window":
        return ["--window", str(N // 8)]
    if mask == "docs":
        return ["--docs", "equal:4"]
    raise SystemExit(f"numerics: unknown mask {mask!r} (causal, window, docs)")


def runnable(strategies, P, H):
    """The strategies the shape runs at P (ulysses needs P | H; usp's Ulysses degree 2 needs an
    even P; the double ring's inner ring of 2 needs P >= 4)."""
    out = []
    for s in strategies:
        if s == "ulysses" and (H % P != 0 or P == 1):
            continue
        if s == "usp" and P % 2 != 0:
            continue
        if s == "double-ring" and (P < 4 or P % 2 != 0):
            continue
        out.append(s)
    return out


def variant_of(cfg):
    """The variant (VARIANTS) a report's config ran."""
    if cfg["dtype"] == "fp8":
        return "fp8-" + (cfg.get("fp8_scaling") or "block")
    if cfg.get("comm_dtype") == "fp8":
        return "comm-fp8" + ("-tensor" if cfg.get("fp8_scaling") == "tensor" else "")
    if cfg.get("acc_dtype") == "bf16":
        return "bf16-acc"
    if cfg.get("partial_dtype") == "bf16":
        return "bf16-partial"
    return "f32"


def mask_of(cfg):
    m = cfg["mask"]
    return "docs" if m.get("docs") else "window" if m.get("window") else "causal"


def report_rows(rep):
    """The rows (as `measure` gives them, single's included) of a `verify --numerics` report."""
    cfg = rep["config"]
    P, variant, mask = cfg["world_size"], variant_of(cfg), mask_of(cfg)
    rows, single = [], {}
    for r in rep["results"]:
        num = r.get("numerics")
        if not num:
            continue
        for tensor, f in num["tensors"].items():
            if tensor not in TENSORS:
                continue
            for i, seed in enumerate(num["seeds"]):
                rows.append({"P": P, "variant": variant, "mask": mask, "seed": seed, "label": r["label"], "tensor": tensor,
                             "rel_fro": f["rel_fro"]["per_seed"][i], "max_abs": f["max_abs"]["per_seed"][i], "note": ""})
                single[(seed, tensor)] = f["single_rel_fro"]["per_seed"][i]
    rows += [{"P": P, "variant": variant, "mask": mask, "seed": seed, "label": "single", "tensor": tensor,
              "rel_fro": e, "max_abs": None, "note": ""} for (seed, tensor), e in sorted(single.items())]
    return rows


def run_verify(args, P, variant, mask, work):
    """One `verify --numerics S` run (the seeds args.seeds, consecutive) and its rows; (None, why)
    when it wrote no report."""
    strategies = runnable([s for s in STRATEGIES[variant] if not args.strategies or s in args.strategies], P, args.heads)
    if not strategies:
        return None, "no strategy runs at this P"
    out = os.path.join(work, f"p{P}_{variant}_{mask}.json")
    p = run_cpbench_verify(args, P, variant, mask, strategies, args.seeds[0],
                           ["--numerics", str(len(args.seeds)), "--out", out])
    if not os.path.isfile(out):
        return None, f"no report (exit {p.returncode}): {(p.stderr or p.stdout).strip()[-300:]}"
    return report_rows(json.load(open(out))), "" if p.returncode == 0 else f"verify exit {p.returncode}"


def run_cpbench_verify(args, P, variant, mask, strategies, seed, extra):
    """`cpbench verify` of `strategies` at P ranks for the variant and mask, from `seed`, with the
    engine's own flags `extra` (its output: --dump or --numerics and --out)."""
    cmd = [args.mpirun, "--oversubscribe", "-np", str(P), args.cpbench, "verify", "--no-progress",
           "--seq", str(args.seq), "--heads", str(args.heads), "--kv-heads", str(args.kv_heads),
           "--head-dim", str(args.head_dim), "--dim", str(args.dim), "--seed", str(seed),
           "--strategies", ",".join(strategies)] + extra + VARIANTS[variant] + mask_args(mask, args.seq)
    if "--dtype" not in VARIANTS[variant]:
        cmd += ["--dtype", args.dtype]
    if "usp" in strategies:
        cmd += ["--ulysses", "2"]
    if "double-ring" in strategies:
        cmd += ["--inner-ring", "2"]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_mpi_yield_when_idle="1")
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)


def rel_fro(a, b):
    n = float(np.linalg.norm(b))
    return float(np.linalg.norm(a - b)) / n if n > 0 else float(np.linalg.norm(a - b))


def measure(dump):
    """{label: {tensor: (rel_fro, max_abs)}} of every strategy in a dump against float64."""
    labels = sorted(d for d in os.listdir(dump) if os.path.isdir(os.path.join(dump, d)))
    out, ref = {}, None
    for lab in labels:
        sd = os.path.join(dump, lab)
        meta = json.load(open(os.path.join(sd, "meta.json")))
        t = {f[:-4]: np.load(os.path.join(sd, f)) for f in os.listdir(sd) if f.endswith(".npy")}
        if ref is None:  # every strategy saw the same inputs (check_dump.py checks it)
            ref = reference(t, meta)
        out[lab] = {n: (rel_fro(t[n].astype(np.float64), ref[n]), float(np.abs(t[n] - ref[n]).max()))
                    for n in TENSORS if n in t}  # (a forward-only variant dumps o, no gradient)
    return out


def run(args, P, variant, mask, seed, work):
    strategies = runnable([s for s in STRATEGIES[variant] if not args.strategies or s in args.strategies], P, args.heads)
    if not strategies:
        return None, "no strategy runs at this P"
    dump = os.path.join(work, f"p{P}_{variant}_{mask}_{seed}")
    p = run_cpbench_verify(args, P, variant, mask, strategies, seed, ["--dump", dump])
    if not os.path.isdir(dump):
        return None, f"exit {p.returncode}: {(p.stdout + p.stderr)[-400:]}"
    try:
        return measure(dump), ("" if p.returncode == 0 else f"verify exit {p.returncode}")
    finally:
        shutil.rmtree(dump, ignore_errors=True)


def summarize(rows):
    """Median and spread over seeds of each (P, variant, mask, label, tensor), and the ratio to
    single's error of the same run (median over seeds)."""
    groups = {}
    for r in rows:
        groups.setdefault((r["P"], r["variant"], r["mask"], r["label"], r["tensor"]), []).append(r)
    single = {(r["P"], r["variant"], r["mask"], r["seed"], r["tensor"]): r["rel_fro"] for r in rows if r["label"] == "single"}
    out = []
    for (P, variant, mask, label, tensor), rs in sorted(groups.items()):
        errs = [r["rel_fro"] for r in rs]
        ratios = [r["rel_fro"] / single[(P, variant, mask, r["seed"], tensor)] for r in rs
                  if single.get((P, variant, mask, r["seed"], tensor))]
        out.append({"P": P, "variant": variant, "mask": mask, "label": label, "tensor": tensor, "seeds": len(rs),
                    "rel_fro_median": statistics.median(errs), "rel_fro_min": min(errs), "rel_fro_max": max(errs),
                    # (a verify report gives single's relative error only: no max_abs for it)
                    "max_abs_median": (statistics.median(r["max_abs"] for r in rs)
                                       if all(r["max_abs"] is not None for r in rs) else None),
                    "ratio_to_single_median": statistics.median(ratios) if ratios else None})
    return out


def family(label):
    return label.split("[")[0].split("_")[0]


def markdown(summary, args):
    """One table per (mask, tensor): rows strategy x variant, columns P; cells the median relative
    error (x 1e-3) and, in brackets, the ratio to single's."""
    Ps = sorted({s["P"] for s in summary})
    lines = [f"Relative Frobenius error against float64, x 1e-3 (median of {len(args.seeds)} seeds), and in "
             f"parentheses the ratio to `single`'s error in the same run (median over the seeds)"
             + ("; in brackets the smallest and largest error over the seeds" if args.spread else "")
             + f"; {args.dtype}, N = {args.seq}, B = 1, H = {args.heads}, G = {args.kv_heads}, d = {args.head_dim}, D = {args.dim}.", ""]
    for mask in args.masks:
        for tensor in TENSORS:
            rows = {}
            for s in summary:
                if s["mask"] == mask and s["tensor"] == tensor and s["label"] != "single":
                    rows.setdefault((family(s["label"]), s["variant"]), {})[s["P"]] = s
            if not rows:
                continue
            lines += [f"**{tensor}, {mask}**", "", "| strategy | variant | " + " | ".join(f"P={p}" for p in Ps) + " |",
                      "|---|---|" + "---|" * len(Ps)]
            for variant in ("f32", "fp8-block", "fp8-tensor"):  # (bf16-partial, bf16-acc: single's is f32's)
                single_row = {s["P"]: s for s in summary if s["mask"] == mask and s["tensor"] == tensor
                              and s["label"] == "single" and s["variant"] == variant}
                if single_row:
                    lines.append(f"| single | {variant} | " + " | ".join(
                        (f"{single_row[p]['rel_fro_median'] * 1e3:.3f}" +
                         (f" [{single_row[p]['rel_fro_min'] * 1e3:.3f}-{single_row[p]['rel_fro_max'] * 1e3:.3f}]"
                          if args.spread and single_row[p]["seeds"] > 1 else ""))
                        if p in single_row else "" for p in Ps) + " |")
            for (fam, variant), by_p in sorted(rows.items()):
                cells = []
                for p in Ps:
                    s = by_p.get(p)
                    r = s and s["ratio_to_single_median"]
                    spread = (f" [{s['rel_fro_min'] * 1e3:.3f}-{s['rel_fro_max'] * 1e3:.3f}]"
                              if args.spread and s and s["seeds"] > 1 else "")
                    cells.append(f"{s['rel_fro_median'] * 1e3:.3f} ({r:.2f}){spread}" if s else "")
                lines.append(f"| {fam} | {variant} | " + " | ".join(cells) + " |")
            lines.append("")
    # Bytes beside the error: what one rank of the full ring (ring, ring-zigzag) sends per layer,
    # forward + backward, under each training variant (cpmodel.ring_kv_bytes, the report's model).
    train = [v for v in TRAVEL if any(s["variant"] == v for s in summary)]
    if train:
        lines += [f"**K,V ring bytes per rank per layer (fwd + bwd, KiB), ring at N = {args.seq}, {args.dtype}**", "",
                  "| variant | " + " | ".join(f"P={p}" for p in Ps) + " |", "|---|" + "---|" * len(Ps)]
        for v in train:
            acc, comm, scaling = TRAVEL[v]
            cells = []
            for p in Ps:
                f, b = cpmodel.ring_kv_bytes(args.seq // p, args.kv_heads * args.head_dim, p - 1,
                                             cpmodel.elem_bytes(args.dtype), acc=cpmodel.acc_bytes(acc),
                                             comm_dtype=comm, scaling=scaling)
                cells.append(f"{(f + b) / 1024:.1f}")
            lines.append(f"| {v} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def plot(summary, args, path):
    """Error against P per tensor measured (the first mask; a forward-only variant has o alone), one
    colour per strategy, one line style per variant."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    tensors = [t for t in TENSORS if any(s["tensor"] == t for s in summary)]
    fig, axes = plt.subplots(1, len(tensors), figsize=(4.2 * len(tensors) + (2 if len(tensors) == 1 else 0), 4),
                             sharey=False, squeeze=False)
    axes = axes[0]
    styles = {"f32": "-", "bf16-partial": "--", "bf16-acc": ":", "fp8-block": "-.", "fp8-tensor": (0, (1, 3)),
              "comm-fp8": (0, (5, 1)), "comm-fp8-tensor": (0, (3, 1, 1, 1))}  # the variant by line style,
    colors = {"single": "black", "ring": "tab:blue", "ring-zigzag": "tab:orange", "double-ring": "tab:green",
              "usp": "tab:red", "ulysses": "tab:purple", "allgather-kv": "tab:brown"}  # the strategy by colour
    mask = args.masks[0]
    for ax, tensor in zip(axes, tensors):
        lines = {}
        for s in summary:
            if s["mask"] == mask and s["tensor"] == tensor:
                lines.setdefault((family(s["label"]), s["variant"]), []).append((s["P"], s["rel_fro_median"]))
        for (fam, variant), pts in sorted(lines.items()):
            if fam == "single" and variant in ("bf16-partial", "bf16-acc", "comm-fp8", "comm-fp8-tensor"):
                continue  # (single has no ring to round and sends nothing: its f32 line)
            pts.sort()
            ax.plot([p for p, _ in pts], [e for _, e in pts], linestyle=styles.get(variant, "-"), marker="o", ms=3,
                    color=colors.get(fam, "gray"), label=f"{fam} {variant}" if variant != "f32" or fam != "single" else "single")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"{tensor} ({mask})")
        ax.set_xlabel("P (CP degree)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("relative error vs float64")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100, bbox_inches="tight")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpbench")
    ap.add_argument("--engine", default="dump", choices=["dump", "verify"])
    ap.add_argument("--from-reports", nargs="+", metavar="REPORT", help="verify --numerics reports: tables only")
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--P", default="1,2,4,8,16")
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--variants", default="f32,bf16-partial,bf16-acc")
    ap.add_argument("--masks", default="causal")
    ap.add_argument("--strategies", default="", help="only these (comma-separated), of each variant's")
    ap.add_argument("--timeout", type=int, default=3600)
    ap.add_argument("--out", help="JSON: every measurement and the summary")
    ap.add_argument("--markdown", help="the tables (docs/NUMERICS.md's)")
    ap.add_argument("--plot", help="PNG: error against P per tensor, first mask")
    ap.add_argument("--spread", action="store_true", help="tables: each cell's min-max over the seeds too")
    args = ap.parse_args()
    Ps = [int(x) for x in args.P.split(",")]
    args.seeds = [int(x) for x in args.seeds.split(",")]
    args.masks = args.masks.split(",")
    args.strategies = [s for s in args.strategies.split(",") if s]
    variants = args.variants.split(",")
    for v in variants:
        if v not in VARIANTS:
            sys.exit(f"numerics: unknown variant {v!r} ({', '.join(VARIANTS)})")
    rows, problems = [], []
    if args.from_reports:
        for path in args.from_reports:
            rows += report_rows(json.load(open(path)))
        if not rows:
            sys.exit("numerics: the reports hold no numerics block (cpbench verify --numerics S)")
        first = json.load(open(args.from_reports[0]))["config"]
        args.seq, args.dtype = first["seqs"][0], first["dtype"]
        args.heads, args.kv_heads, args.head_dim, args.dim = first["heads"], first["kv_heads"], first["head_dim"], first["dim"]
        args.seeds = sorted({r["seed"] for r in rows})
        args.masks = sorted({r["mask"] for r in rows})
    elif not args.cpbench:
        sys.exit("numerics: --cpbench (or --from-reports) is required")
    if args.engine == "verify" and args.seeds != list(range(args.seeds[0], args.seeds[0] + len(args.seeds))):
        sys.exit(f"numerics: --engine verify runs consecutive seeds (--seed S --numerics n), got {args.seeds}")
    work = tempfile.mkdtemp(prefix="cpbench-numerics-")
    try:
        for mask in ([] if args.from_reports else args.masks):
            for variant in variants:
                for P in Ps:
                    if args.engine == "verify":
                        got, note = run_verify(args, P, variant, mask, work)
                        print(f"P={P} {variant} {mask} seeds={args.seeds}: " + (note or "ok"), flush=True)
                        if got is None:
                            if note != "no strategy runs at this P":
                                problems.append(f"P={P} {variant} {mask}: {note}")
                            continue
                        rows += got
                        continue
                    for seed in args.seeds:
                        got, note = run(args, P, variant, mask, seed, work)
                        print(f"P={P} {variant} {mask} seed={seed}: " + (note or "ok"), flush=True)
                        if got is None:
                            if note != "no strategy runs at this P":
                                problems.append(f"P={P} {variant} {mask} seed={seed}: {note}")
                            continue
                        for label, errs in got.items():
                            for tensor, (e, m) in errs.items():
                                rows.append({"P": P, "variant": variant, "mask": mask, "seed": seed, "label": label,
                                             "tensor": tensor, "rel_fro": e, "max_abs": m, "note": note})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summary = summarize(rows)
    if args.out:
        json.dump({"config": {k: v for k, v in vars(args).items()}, "rows": rows, "summary": summary},
                  open(args.out, "w"), indent=1)
    md = markdown(summary, args)
    if args.markdown:
        open(args.markdown, "w").write(md + "\n")
    else:
        print(md)
    if args.plot:
        plot(summary, args, args.plot)
    for p in problems:
        print("problem:", p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
