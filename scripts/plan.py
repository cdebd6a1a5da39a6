#!/usr/bin/env python3
"""The planner view of cpbench reports (simulated or measured): for each sequence length, the
strategies and meshes ranked by step time, with MFU, tokens/s per GPU, bytes per network tier,
peak memory against the device's memory and the longest sequence that would fit; Markdown (for a
PR comment) on stdout and, with --plot, a figure of the best strategy per N and node count.

  scripts/plan.py REPORT.json [REPORT2.json ...] [--plot plan.png] [--hbm-gib 80] [--gpus-per-node 8]

Several reports (e.g. the same sweep on 8, 64 and 256 simulated GPUs) are ranked separately and
drawn together. Simulated reports carry their platform (context.simulated: HBM size); for
measured ones give --hbm-gib. Network tiers: a group whose ranks all sit on one node (by
--gpus-per-node, default: the report's ranks per node) counts as node-local, else as cross-node
(a ring over several nodes counts whole, although only its node-boundary hops cross).
"""
import argparse
import json
import sys


def fmt_bytes(b):
    for unit, div in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= div:
            return "%.1f %s" % (b / div, unit)
    return "%d B" % b


def group_spans_nodes(group, size, P, U, R, placement, g):
    """Whether a communication group of `size` ranks crosses a node boundary (ranks by node)."""
    if size <= 1:
        return False
    if group == "ulysses":
        contiguous = placement == "ulysses-inner"
    elif group == "ring":
        contiguous = placement == "ring-inner"
    else:  # cp / tp / world: all P ranks, contiguous
        contiguous = True
    if contiguous:
        return size > g or g % size != 0
    # strided group (stride = the other mesh dimension): spans size * stride ranks
    stride = U if group == "ring" else R
    return size * stride > g


def tier_bytes(r, P, g):
    mesh = r.get("mesh", {})
    U, R, pl = mesh.get("ulysses", 1), mesh.get("ring", 1), mesh.get("placement", "ulysses-inner")
    out = {"intra": 0, "inter": 0}
    for phase in ("fwd", "bwd"):
        for op in r["comm"][phase].get("ops", []):
            group = op.get("group", "cp")
            size = op.get("group_size", P)
            sent = op.get("bytes_sent", 0)
            out["inter" if group_spans_nodes(group, size, P, U, R, pl, g) else "intra"] += sent
    return out


def fits_up_to(rows, hbm):
    """Longest N whose peak memory stays under hbm, from a line through the two largest N run
    (memory = a + b*N); None when it cannot be estimated."""
    pts = sorted((r["seq"], r["memory"]["peak_bytes"]) for r in rows)
    if not hbm or not pts:
        return None
    if len(pts) == 1:
        n, m = pts[0]
        w = rows[0]["memory"].get("weights", 0)
        b = (m - w) / n if n else 0
        a = w
    else:
        (n0, m0), (n1, m1) = pts[-2], pts[-1]
        b = (m1 - m0) / (n1 - n0) if n1 != n0 else 0
        a = m1 - b * n1
    if b <= 0:
        return None
    return int((hbm - a) / b)


def one_report(path, a):
    rep = json.load(open(path))
    ctx = rep["context"]
    P = ctx["world_size"]
    sim = ctx.get("simulated")
    g = a.gpus_per_node or ctx.get("ranks_per_node", P)
    if sim and not a.gpus_per_node:
        g = min(P, a.sim_gpus_per_node)
    hbm = sim["hbm_bytes"] if sim else (a.hbm_gib * 2**30 if a.hbm_gib else None)
    cfg = rep["config"]
    batch = cfg.get("batch", 1)
    oks = [r for r in rep["results"] if r["status"] == "ok"]
    nodes = max(1, -(-P // g))
    where = ("simulated on %s" % sim["platform"]) if sim else ("measured on %s" % ", ".join(ctx["hosts"]))
    lines = ["## %s: %d GPUs (%d node%s), %s" % (cfg.get("model", "?"), P, nodes, "s" if nodes > 1 else "", where), ""]
    best = {}
    by_label = {}
    for r in oks:
        by_label.setdefault(r["label"], []).append(r)
    for n in sorted({r["seq"] for r in oks}):
        rows = sorted([r for r in oks if r["seq"] == n], key=lambda r: r["timing"]["step_ms"]["median"])
        lines += ["### N = %d" % n, "",
                  "| rank | strategy | step ms | MFU | tokens/s/GPU | bytes in node-local groups | bytes in cross-node groups | peak memory | fits HBM | longest N that fits |",
                  "|---:|---|---:|---:|---:|---:|---:|---:|:---:|---:|"]
        for i, r in enumerate(rows, 1):
            step = r["timing"]["step_ms"]["median"]
            tb = tier_bytes(r, P, g)
            mem = r["memory"]["peak_bytes"]
            fits = "-" if not hbm else ("yes" if mem <= hbm else "**no**")
            nmax = fits_up_to(by_label[r["label"]], hbm)
            lines.append("| %d | %s | %.3f | %.1f%% | %.0f | %s | %s | %s | %s | %s |" % (
                i, r["label"], step, 100 * r["mfu"], batch * n / P / (step * 1e-3),
                fmt_bytes(tb["intra"]), fmt_bytes(tb["inter"]), fmt_bytes(mem), fits,
                "-" if nmax is None else "{:,}".format(nmax)))
        fit_rows = [r for r in rows if not hbm or r["memory"]["peak_bytes"] <= hbm]
        if fit_rows:
            best[n] = (fit_rows[0]["label"], fit_rows[0]["timing"]["step_ms"]["median"], fit_rows[0]["mfu"])
        lines.append("")
    skipped = [r for r in rep["results"] if r["status"] == "skipped"]
    if skipped:
        lines.append("Skipped: " + "; ".join("%s N=%d (%s)" % (r["label"], r["seq"], r.get("reason", "")) for r in skipped))
        lines.append("")
    return "\n".join(lines), best, nodes, P


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("reports", nargs="+")
    ap.add_argument("--plot", help="write a figure (PNG/SVG) of the best strategy per N and node count")
    ap.add_argument("--hbm-gib", type=float, help="device memory for measured reports")
    ap.add_argument("--gpus-per-node", type=int, help="ranks per node for the tiers (default: the report's)")
    ap.add_argument("--sim-gpus-per-node", type=int, default=8, help="for simulated reports (default 8)")
    a = ap.parse_args()
    curves = []
    for path in a.reports:
        md, best, nodes, P = one_report(path, a)
        print(md)
        if best:
            print("Best per N (%d GPUs): " % P + ", ".join("N=%d: %s" % (n, best[n][0]) for n in sorted(best)))
            print()
        curves.append((nodes, P, best))
    if a.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for nodes, P, best in sorted(curves):
            ns = sorted(best)
            ax.plot(ns, [100 * best[n][2] for n in ns], marker="o", label="%d GPUs (%d node%s)" % (P, nodes, "s" if nodes > 1 else ""))
            for n in ns:
                ax.annotate(best[n][0], (n, 100 * best[n][2]), textcoords="offset points", xytext=(0, 6),
                            ha="center", fontsize=7)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length N")
        ax.set_ylabel("MFU of the fastest strategy (%)")
        ax.set_title("Best strategy per sequence length and node count")
        ax.legend()
        fig.tight_layout()
        fig.savefig(a.plot, dpi=120)
        print("plot: %s" % a.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
