#!/usr/bin/env python3
"""The planner view of cpbench reports (simulated or measured): for each sequence length, the
strategies and meshes ranked by median step time, with each one's band, the ones tied with the
fastest, MFU, tokens/s per GPU, bytes per network tier, peak memory against the device's memory
and the longest sequence that would fit; Markdown (for a PR comment) on stdout and, with --plot,
a figure of every strategy's step time and band per N, one panel per report.

  scripts/plan.py REPORT.json [REPORT2.json ...] [--plot plan.png] [--hbm-gib 80]

Several reports (e.g. the same sweep on 8, 64 and 256 simulated GPUs) are ranked separately and
drawn side by side. Simulated reports carry their platform (context.simulated: HBM size); for
measured ones give --hbm-gib.

Bands and ties: a result's band is timing.step_ms.band {lo, hi} (relative factors around the
median, from the simulation's validation residuals) when the report has one, else [p10, p90] of
its timed steps. The fastest strategy that fits in HBM is the best; every other one that fits and
whose band overlaps the best's is tied with it (tie column "=1"), and the verdict under the table
gives each margin and the two bands. A single winner is named only when the best's band is
disjoint from every other's; when a band has zero width (one timed step, or a simulation without
timing.step_ms.band) the verdict says its margin's significance is unknown.

Memory: "fits HBM" and "longest N that fits" use memory.model_estimate.total where a result has
one (--block full: an ESTIMATE of the whole model per rank, L layers with embedding, output head and
mixed-precision Adam; the cells say "est."), else the measured peak of the one block that ran
(peak_bytes, which ignores the other layers and the optimizer). The "peak memory" column is always
the measured peak.

Tiers: the bytes columns are the report's own comm.{fwd,bwd}.tiers: per rank, intra_node_bytes
(to ranks on its node) and inter_node_bytes (to other nodes) of fwd + bwd, the maximum over ranks
of each (the rank that sends most, as cpbench's console prints inter_node). A report without
tiers (written before they existed) shows "n/a"; nothing is recomputed from the mesh.
"""
import argparse
import json
import sys


def fmt_bytes(b):
    for unit, div in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= div:
            return "%.2f %s" % (b / div, unit)
    return "%d B" % b


def tier_bytes(r):
    """{'intra', 'inter'}: the busiest rank's bytes per step (fwd + bwd) by destination tier, from
    the report's comm.*.tiers.per_rank; None when the report has no tiers."""
    try:
        fwd, bwd = (r["comm"][ph]["tiers"]["per_rank"] for ph in ("fwd", "bwd"))
    except KeyError:
        return None
    out = {}
    for short, key in (("intra", "intra_node_bytes"), ("inter", "inter_node_bytes")):
        out[short] = max(f[key] + b[key] for f, b in zip(fwd, bwd))
    return out


def step_band(r):
    """(lo_ms, hi_ms, source) of a result's step time: timing.step_ms.band x median when present,
    else p10..p90 of the timed steps."""
    st = r["timing"]["step_ms"]
    band = st.get("band")
    if band is None:
        return st["p10"], st["p90"], "p10-p90"
    lo, hi = band["lo"], band["hi"]
    if not 0 < lo <= 1 <= hi:
        print("plan.py: %s N=%d: timing.step_ms.band {lo: %g, hi: %g} must satisfy 0 < lo <= 1 <= hi"
              % (r["label"], r["seq"], lo, hi), file=sys.stderr)
        sys.exit(2)
    return st["median"] * lo, st["median"] * hi, "band"


def overlaps(a, b):
    return a[0] <= b[1] and b[0] <= a[1]


def model_estimate(r):
    """The result's memory.model_estimate (the whole model per rank, an estimate), or None."""
    return r["memory"].get("model_estimate")


def fit_memory(r):
    """The bytes that must fit in HBM: the whole-model estimate's total when the result has one,
    else the measured peak of the block that ran."""
    e = model_estimate(r)
    return e["total"] if e else r["memory"]["peak_bytes"]


def fits_up_to(rows, hbm):
    """Longest N whose memory (fit_memory) stays under hbm, from a line through the two largest N
    run (memory = a + b*N); None when it cannot be estimated."""
    pts = sorted(((r["seq"], fit_memory(r), r) for r in rows), key=lambda p: p[:2])
    if not hbm or not pts:
        return None
    if len(pts) == 1:
        n, m, r = pts[0]
        e = model_estimate(r)
        # One N: what does not grow with N (the estimate's weights, grads and optimizer state;
        # else the measured weights) stays, the rest grows linearly.
        w = (m - e["activations"]) if e else r["memory"].get("weights", 0)
        b = (m - w) / n if n else 0
        a = w
    else:
        (n0, m0, _), (n1, m1, _) = pts[-2], pts[-1]
        b = (m1 - m0) / (n1 - n0) if n1 != n0 else 0
        a = m1 - b * n1
    if b <= 0:
        return None
    return max(0, int((hbm - a) / b))  # 0: what does not grow with N alone exceeds hbm


def node_count(ctx, P):
    """Nodes from context.nodes (every report since tiers), else from ranks_per_node."""
    nodes = ctx.get("nodes")
    if nodes:
        return len(set(nodes["node_of_rank"]))
    rpn = ctx.get("ranks_per_node") or P
    return max(1, -(-P // rpn))


def verdict(n, fit_rows, bands, tied):
    """The sentence under a table: who wins at N, or who is tied and why."""
    if not fit_rows:
        return "No strategy fits in HBM at N = %d." % n
    best = fit_rows[0]
    bm = best["timing"]["step_ms"]["median"]

    def band_text(r):
        lo, hi, src = bands[r["label"]]
        return "%s %.3f-%.3f ms (%s)" % (r["label"], lo, hi, "timing.step_ms.band" if src == "band" else "p10-p90")

    def margin(r):
        return 100 * (r["timing"]["step_ms"]["median"] / bm - 1)

    if len(fit_rows) == 1:
        return "Winner at N = %d: **%s**, the only strategy that ran and fits." % (n, best["label"])
    if tied:
        return ("Tie at N = %d: **%s** is fastest by median, but %s: their bands overlap the best's (%s), "
                "so these runs cannot rank them." % (
                    n, best["label"],
                    ", ".join("%s is %.1f%% slower" % (r["label"], margin(r)) for r in tied),
                    "; ".join(band_text(r) for r in [best] + tied)))
    nxt = fit_rows[1]
    text = ("Winner at N = %d: **%s**; the next, %s, is %.1f%% slower, and the best's band lies below every "
            "other's (%s; %s)." % (n, best["label"], nxt["label"], margin(nxt), band_text(best), band_text(nxt)))
    if any(bands[r["label"]][0] == bands[r["label"]][1] for r in (best, nxt)):
        text += (" Caution: a band of zero width (one timed step, or a simulation without timing.step_ms.band) "
                 "cannot show a tie; this margin's significance is unknown.")
    return text


def one_report(path, a):
    with open(path, encoding="utf-8") as f:
        rep = json.load(f)
    if rep["config"].get("command") != "run":
        print("plan.py: %s is a '%s' report: it has no step times to rank (give a 'run' report)"
              % (path, rep["config"].get("command")), file=sys.stderr)
        sys.exit(2)
    ctx = rep["context"]
    P = ctx["world_size"]
    sim = ctx.get("simulated")
    hbm = sim["hbm_bytes"] if sim else (a.hbm_gib * 2**30 if a.hbm_gib else None)
    cfg = rep["config"]
    batch = cfg.get("batch", 1)
    oks = [r for r in rep["results"] if r["status"] == "ok"]
    nodes = node_count(ctx, P)
    where = ("simulated on %s" % sim["platform"]) if sim else ("measured on %s" % ", ".join(ctx["hosts"]))
    lines = ["## %s: %d GPUs (%d node%s), %s" % (cfg.get("model", "?"), P, nodes, "s" if nodes > 1 else "", where), "",
             "Bytes per step (fwd + bwd) from the report's comm.*.tiers, each column the maximum over ranks; "
             "band: timing.step_ms.band x median where present, else p10-p90 of the timed steps; "
             "tie \"=1\": the band overlaps the best's.", ""]
    estimated = [r for r in oks if model_estimate(r)]
    if estimated:
        e = model_estimate(estimated[0])
        lines += ["Fits HBM and longest N: memory.model_estimate.total, an **estimate** of the whole model per "
                  "rank (%d layers, embedding and output head, mixed-precision Adam at 16 B/param, activations "
                  "with recompute %s), not a measurement; peak memory: the measured block." % (
                      e["layers"], cfg.get("recompute") or "none"), ""]
    best = {}      # N -> (label, [tied labels])
    curves = {}    # label -> [(N, median, lo, hi)]
    by_label = {}
    for r in oks:
        by_label.setdefault(r["label"], []).append(r)
    for n in sorted({r["seq"] for r in oks}):
        rows = sorted([r for r in oks if r["seq"] == n], key=lambda r: r["timing"]["step_ms"]["median"])
        bands = {r["label"]: step_band(r) for r in rows}
        fit_rows = [r for r in rows if not hbm or fit_memory(r) <= hbm]
        tied = []
        if fit_rows:
            b0 = bands[fit_rows[0]["label"]]
            tied = [r for r in fit_rows[1:] if overlaps(bands[r["label"]], b0)]
            best[n] = (fit_rows[0]["label"], [r["label"] for r in tied])
        tie_set = {r["label"] for r in tied} | ({fit_rows[0]["label"]} if fit_rows and tied else set())
        lines += ["### N = %d" % n, "",
                  "| rank | strategy | step ms | band ms | vs best | tie | MFU | tokens/s/GPU "
                  "| bytes to own node | bytes to other nodes | peak memory | fits HBM | longest N that fits |",
                  "|---:|---|---:|---:|---:|:---:|---:|---:|---:|---:|---:|:---:|---:|"]
        bm = fit_rows[0]["timing"]["step_ms"]["median"] if fit_rows else None
        for i, r in enumerate(rows, 1):
            step = r["timing"]["step_ms"]["median"]
            lo, hi, _ = bands[r["label"]]
            curves.setdefault(r["label"], []).append((n, step, lo, hi))
            tb = tier_bytes(r)
            mem = r["memory"]["peak_bytes"]
            est = model_estimate(r)
            fits = "-" if not hbm else ("yes" if fit_memory(r) <= hbm else "**no**")
            if hbm and est:
                fits += " (est. %s)" % fmt_bytes(est["total"])
            nmax = fits_up_to(by_label[r["label"]], hbm)
            if bm is None:
                vs = "-"
            elif r is fit_rows[0]:
                vs = "best"
            else:
                vs = "%+.1f%%" % (100 * (step / bm - 1))
            mfu = "-" if r["mfu"] is None else "%.1f%%" % (100 * r["mfu"])  # null: no peak known
            lines.append("| %d | %s | %.3f | %.3f-%.3f | %s | %s | %s | %.0f | %s | %s | %s | %s | %s |" % (
                i, r["label"], step, lo, hi, vs, "=1" if r["label"] in tie_set else "",
                mfu, batch * n / P / (step * 1e-3),
                "n/a" if tb is None else fmt_bytes(tb["intra"]), "n/a" if tb is None else fmt_bytes(tb["inter"]),
                fmt_bytes(mem), fits,
                "-" if nmax is None else ("{:,}".format(nmax) if nmax else "none") + (" (est.)" if est else "")))
        lines += ["", verdict(n, fit_rows, bands, tied), ""]
    meshes = {}  # label -> its mesh levels, innermost first (size-1 levels left out)
    for r in oks:
        meshes.setdefault(r["label"], " x ".join("%s %d" % (lv["name"], lv["size"])
                                                 for lv in r["mesh"].get("levels", []) if lv["size"] > 1) or "one rank")
    if meshes:
        lines.append("Mesh levels, innermost first: " + "; ".join("%s = %s" % kv for kv in meshes.items()))
        lines.append("")
    skipped = [r for r in rep["results"] if r["status"] == "skipped"]
    if skipped:
        lines.append("Skipped: " + "; ".join("%s N=%d (%s)" % (r["label"], r["seq"], r.get("reason", "")) for r in skipped))
        lines.append("")
    return "\n".join(lines), best, curves, nodes, P


def plot(a, panels):
    """One panel per report (sorted by node count), one errorbar series per strategy."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(panels), figsize=(7 * len(panels), 4.5), squeeze=False)
    for ax, (nodes, P, curves) in zip(axes[0], sorted(panels, key=lambda p: (p[0], p[1]))):
        labels = sorted(curves)
        for k, label in enumerate(labels):
            pts = sorted(curves[label])
            # Each strategy a little apart on the log N axis, so that equal bands stay visible.
            dodge = 2 ** (0.03 * (k - (len(labels) - 1) / 2))
            ns = [p[0] * dodge for p in pts]
            med = [p[1] for p in pts]
            err = [[p[1] - p[2] for p in pts], [p[3] - p[1] for p in pts]]
            ax.errorbar(ns, med, yerr=err, marker="o", markersize=3, capsize=3, label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length N")
        ax.set_ylabel("step time (ms), bars: band")
        ax.set_title("%d GPUs (%d node%s)" % (P, nodes, "s" if nodes > 1 else ""))
        ax.legend(fontsize=7)
    fig.suptitle("Every strategy's step time per sequence length, with its band")
    fig.tight_layout()
    fig.savefig(a.plot, dpi=120)
    print("plot: %s" % a.plot)
    return fig


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("reports", nargs="+")
    ap.add_argument("--plot", help="write a figure (PNG/SVG) of every strategy's step time and band per N")
    ap.add_argument("--hbm-gib", type=float, help="device memory for measured reports")
    a = ap.parse_args()
    panels = []
    for path in a.reports:
        md, best, curves, nodes, P = one_report(path, a)
        print(md)
        if best:
            print("Best per N (%d GPUs): " % P + ", ".join(
                "N=%d: %s" % (n, best[n][0]) + (" (tied: %s)" % ", ".join(best[n][1]) if best[n][1] else "")
                for n in sorted(best)))
            print()
        panels.append((nodes, P, curves))
    if a.plot:
        plot(a, panels)
    return 0


if __name__ == "__main__":
    sys.exit(main())
