#!/usr/bin/env python3
"""Plot cpbench reports: six figures, each as PNG and SVG, in the output folder.

  step_time    step time per strategy label, one panel per sequence length, each bar split into
               compute (step - exposed communication) and exposed communication; whiskers p10..p90
  mfu_vs_seq   MFU against sequence length, one line per label (across all given reports)
  comm_bytes   measured against predicted bytes (forward and backward), with the y = x line
  peak_memory  peak memory per rank: bar = maximum over ranks, dots = each rank; one panel per seq
  comm_tiers   bytes per layer step by network tier: intra-node and inter-node (maximum over ranks
               of each), forward + backward; one panel per seq
  balance      work balance per label: flops_imbalance (exact visible pairs) beside the time-based
               imbalance; one panel per seq. When the results hold more than one --balance scheme
               (results[].balance.scheme; 'none' when absent), the bars are grouped per label with
               one pair per scheme side by side (hatched by scheme), and each pair is annotated
               with its step time relative to the same label's 'none' at that seq (e.g. '0.86x')
               where that reference is unique (see step_vs_none)

Only results with status 'ok' and metrics are plotted; skipped and failed ones (and results of
'verify' reports, which carry no metrics) are listed in a note under each figure. When the plotted
results hold more than one scheme, every series is named 'label [scheme]' (e.g. 'ring [greedy]').
When several reports still hold the same series at one seq, series are named
'name (report file name)'. Every figure uses the same series names.
"""
import argparse
import math
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import validate_report  # noqa: E402  (same folder; shares the report loader)

PLOTS = ("step_time", "mfu_vs_seq", "comm_bytes", "peak_memory", "comm_tiers", "balance")
FORMATS = ("png", "svg")
MiB = float(1 << 20)
SCHEMES = ("none", "doc-zigzag", "greedy", "dynamic")  # --balance, in the order the balance figure draws them
SCHEME_HATCH = {"none": "", "doc-zigzag": "///", "greedy": "xxx"}


def _tag_names(paths):
    stems = [Path(p).stem for p in paths]
    return [s if stems.count(s) == 1 else f"{s}#{i}" for i, s in enumerate(stems)]


def _scheme(r):
    return r["balance"].get("scheme", "none") if "balance" in r else "none"


def scheme_key(scheme):
    """Sort key: SCHEMES' order first, unknown schemes after, by name."""
    return (SCHEMES.index(scheme), "") if scheme in SCHEMES else (len(SCHEMES), scheme)


def collect(reports, paths):
    """(points, excluded): points are dicts of plotted values; excluded are note strings.

    Each point carries its label, scheme (results[].balance.scheme, 'none' when absent) and series
    name: the label, with ' [scheme]' when the plotted results hold more than one scheme, and with
    ' (report file name)' when several reports still hold the same name at one seq.
    """
    tags = _tag_names(paths)
    plotted = [r for rep in reports for r in rep["results"] if r["status"] == "ok" and "timing" in r]
    multi_scheme = len({_scheme(r) for r in plotted}) > 1

    def base_name(r):
        return f"{r['label']} [{_scheme(r)}]" if multi_scheme else r["label"]

    occurrences = {}
    for r in plotted:
        occurrences[(base_name(r), r["seq"])] = occurrences.get((base_name(r), r["seq"]), 0) + 1
    qualify = len(reports) > 1 and any(c > 1 for c in occurrences.values())
    points, excluded = [], []
    for rep, tag in zip(reports, tags):
        for r in rep["results"]:
            where = f"{r['label']} seq {r['seq']}" + (f" [{tag}]" if len(reports) > 1 else "")
            if r["status"] != "ok":
                excluded.append(f"{where}: {r['status']}: {r['reason']}")
                continue
            if "timing" not in r:
                excluded.append(f"{where}: no metrics ({rep['config']['command']} report)")
                continue
            points.append({
                "series": f"{base_name(r)} ({tag})" if qualify else base_name(r),
                "label": r["label"],
                "scheme": _scheme(r),
                "seq": r["seq"],
                "step": r["timing"]["step_ms"]["median"],
                "p10": r["timing"]["step_ms"]["p10"],
                "p90": r["timing"]["step_ms"]["p90"],
                "exposed": r["overlap"]["exposed_comm_ms"],
                "mfu": r["mfu"],
                "comm": {ph: (r["comm"][ph]["predicted_bytes"], r["comm"][ph]["bytes_sent"],
                              r["comm"][ph]["matches_model"]) for ph in ("fwd", "bwd")},
                "mem": r["memory"]["per_rank"],
                "peak": r["memory"]["peak_bytes"],
                "intra": max(f["intra_node_bytes"] + b["intra_node_bytes"] for f, b in
                             zip(r["comm"]["fwd"]["tiers"]["per_rank"], r["comm"]["bwd"]["tiers"]["per_rank"])),
                "inter": max(f["inter_node_bytes"] + b["inter_node_bytes"] for f, b in
                             zip(r["comm"]["fwd"]["tiers"]["per_rank"], r["comm"]["bwd"]["tiers"]["per_rank"])),
                "flops_imbalance": r["balance"]["flops_imbalance"],
                "time_imbalance": r["balance"]["imbalance"],
            })
    return points, excluded


def step_vs_none(points):
    """{(label, scheme, seq): median step / the same label's 'none' median step at that seq}.

    Only where both are unique: one point of that (label, scheme, seq) and one 'none' point of
    that (label, seq) among the points (two reports of the same scheme leave it out, as does a
    zero reference). A 'none' point maps to 1.0.
    """
    groups = {}
    for p in points:
        groups.setdefault((p["label"], p["scheme"], p["seq"]), []).append(p)
    out = {}
    for (label, scheme, seq), ps in groups.items():
        ref = groups.get((label, "none", seq), [])
        if len(ps) == 1 and len(ref) == 1 and ref[0]["step"] > 0:
            out[(label, scheme, seq)] = ps[0]["step"] / ref[0]["step"]
    return out


def series_order(points):
    order = []
    for p in points:
        if p["series"] not in order:
            order.append(p["series"])
    return order


def colors_for(names):
    import matplotlib
    n = len(names)
    if n <= 10:
        cmap = matplotlib.colormaps["tab10"]
        return {s: cmap(i) for i, s in enumerate(names)}
    if n <= 20:
        cmap = matplotlib.colormaps["tab20"]
        return {s: cmap(i) for i, s in enumerate(names)}
    cmap = matplotlib.colormaps["turbo"]
    return {s: cmap(0.05 + 0.9 * i / (n - 1)) for i, s in enumerate(names)}


def note_text(excluded, extra=(), limit=8):
    lines = list(extra)
    if excluded:
        lines.append(f"Not plotted ({len(excluded)}):")
        lines += ["  " + e for e in excluded[:limit]]
        if len(excluded) > limit:
            lines.append(f"  ... and {len(excluded) - limit} more")
    return "\n".join(lines)


def finish(fig, name, outdir, title, note, written):
    fig.suptitle(title, fontsize=11)
    if note:
        fig.text(0.01, -0.01, note, ha="left", va="top", fontsize=7, family="monospace")
    for fmt in FORMATS:
        path = outdir / f"{name}.{fmt}"
        fig.savefig(path, dpi=120, bbox_inches="tight", metadata={"Date": None} if fmt == "svg" else None)
        written.append(path)
    import matplotlib.pyplot as plt
    plt.close(fig)


def empty_axes(ax, msg):
    ax.text(0.5, 0.5, msg, ha="center", va="center", transform=ax.transAxes, fontsize=10)
    ax.set_xticks([])
    ax.set_yticks([])


def panel_grid(plt, nseq, nbars_max):
    ncols = min(nseq, 3)
    nrows = math.ceil(nseq / ncols)
    width = max(3.5, 0.45 * nbars_max + 1.5)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, 4.0 * nrows + 0.6), squeeze=False,
                             layout="constrained")
    flat = [ax for row in axes for ax in row]
    for ax in flat[nseq:]:
        ax.set_visible(False)
    return fig, flat


def plot_step_time(plt, points, colors, seqs, title, note, outdir, written):
    from matplotlib.patches import Patch
    if not points:
        fig, ax = plt.subplots(figsize=(6, 3), layout="constrained")
        empty_axes(ax, "no ok results with timing")
        return finish(fig, "step_time", outdir, title, note, written)
    per_seq = {s: [p for p in points if p["seq"] == s] for s in seqs}
    fig, axes = panel_grid(plt, len(seqs), max(len(v) for v in per_seq.values()))
    for ax, seq in zip(axes, seqs):
        ps = per_seq[seq]
        x = list(range(len(ps)))
        exposed = [min(max(p["exposed"], 0.0), p["step"]) for p in ps]
        compute = [p["step"] - e for p, e in zip(ps, exposed)]
        cols = [colors[p["series"]] for p in ps]
        ax.bar(x, compute, color=cols, edgecolor="black", linewidth=0.5)
        ax.bar(x, exposed, bottom=compute, color=cols, alpha=0.45, hatch="///", edgecolor="black", linewidth=0.5)
        lo = [p["step"] - p["p10"] for p in ps]
        hi = [p["p90"] - p["step"] for p in ps]
        ax.errorbar(x, [p["step"] for p in ps], yerr=[lo, hi], fmt="none", ecolor="black", capsize=3, linewidth=0.8)
        # One noisy iteration must not flatten the bars: whiskers stop at twice the tallest bar.
        top = max(p["step"] for p in ps)
        clipped = max(p["p90"] for p in ps) > 2 * top
        ax.set_ylim(0, (2 * top if clipped else max(p["p90"] for p in ps)) * 1.05)
        ax.set_xticks(x)
        ax.set_xticklabels([p["series"] for p in ps], rotation=45, ha="right", fontsize=8)
        ax.set_title(f"seq {seq}" + (" (whiskers clipped)" if clipped else ""), fontsize=10)
        ax.set_ylabel("step time, median (ms)")
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(handles=[Patch(facecolor="0.6", edgecolor="black", label="compute (step − exposed comm)"),
                            Patch(facecolor="0.6", alpha=0.45, hatch="///", edgecolor="black", label="exposed comm"),
                            ], fontsize=7, loc="upper left")
    finish(fig, "step_time", outdir, title + " — step time (whiskers p10..p90)", note, written)


def plot_mfu(plt, points, colors, seqs, title, note, outdir, written):
    fig, ax = plt.subplots(figsize=(7.5, 4.5), layout="constrained")
    if not points:
        empty_axes(ax, "no ok results with timing")
        return finish(fig, "mfu_vs_seq", outdir, title, note, written)
    for s in series_order(points):
        # mfu is null when the report has no peak (peak.source 'unavailable'): not plotted
        ps = sorted((p for p in points if p["series"] == s and p["mfu"] is not None), key=lambda p: p["seq"])
        ax.plot([p["seq"] for p in ps], [100 * p["mfu"] for p in ps], marker="o", color=colors[s], label=s)
    if len(seqs) > 1:
        ax.set_xscale("log", base=2)
    ax.set_xticks(seqs)
    ax.set_xticklabels([str(s) for s in seqs], fontsize=8)
    ax.minorticks_off()
    ax.set_xlabel("sequence length N")
    ax.set_ylabel("MFU (%)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    n = len(series_order(points))
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), ncol=1 if n <= 16 else 2)
    finish(fig, "mfu_vs_seq", outdir, title + " — MFU vs sequence length", note, written)


def plot_comm(plt, points, colors, title, note, outdir, written):
    from matplotlib.lines import Line2D
    fig, ax = plt.subplots(figsize=(7.5, 5.5), layout="constrained")
    pts = [(p["series"], p["seq"], ph, pred, meas, ok)
           for p in points for ph, (pred, meas, ok) in p["comm"].items()]
    positive = [t for t in pts if t[3] > 0 and t[4] > 0]
    zero = [t for t in pts if not (t[3] > 0 and t[4] > 0)]
    extra = []
    if zero:
        names = sorted({t[0] for t in zero})
        extra.append(f"Zero bytes predicted or measured (not on the log axes): {', '.join(names)}")
    mismatches = [t for t in pts if not t[5]]
    if mismatches:
        extra.append(f"Measured != predicted ({len(mismatches)}, red edges):")
        for t in mismatches[:10]:
            extra.append(f"  {t[0]} seq {t[1]} {t[2]}: predicted {t[3]}, measured {t[4]}")
        if len(mismatches) > 10:
            extra.append(f"  ... and {len(mismatches) - 10} more")
    full_note = note_text([], extra) + ("\n" + note if note else "")
    if not positive:
        empty_axes(ax, "no communication to plot")
        return finish(fig, "comm_bytes", outdir, title, full_note.strip("\n"), written)
    for s, seq, ph, pred, meas, ok in positive:
        ax.scatter(pred / MiB, meas / MiB, color=colors[s], marker="o" if ph == "fwd" else "^", s=36,
                   edgecolors="red" if not ok else "black", linewidths=1.2 if not ok else 0.5, zorder=3)
    lo = min(min(t[3], t[4]) for t in positive) / MiB
    hi = max(max(t[3], t[4]) for t in positive) / MiB
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.plot([lo / 1.5, hi * 1.5], [lo / 1.5, hi * 1.5], "--", color="0.4", linewidth=1, zorder=1)
    ax.set_xlim(lo / 1.5, hi * 1.5)
    ax.set_ylim(lo / 1.5, hi * 1.5)
    from matplotlib.ticker import FuncFormatter, LogLocator
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        axis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    ax.set_xlabel("predicted bytes per rank per step (MiB, analytic model)")
    ax.set_ylabel("measured bytes sent, max over ranks (MiB)")
    ax.grid(alpha=0.3, which="both")
    handles = [Line2D([], [], linestyle="--", color="0.4", label="measured = predicted"),
               Line2D([], [], marker="o", linestyle="", color="0.5", markeredgecolor="black", label="forward"),
               Line2D([], [], marker="^", linestyle="", color="0.5", markeredgecolor="black", label="backward")]
    if mismatches:
        handles.append(Line2D([], [], marker="o", linestyle="", color="white", markeredgecolor="red",
                              markeredgewidth=1.2, label="measured != predicted"))
    handles += [Line2D([], [], marker="s", linestyle="", color=colors[s], label=s)
                for s in series_order(points) if any(t[0] == s for t in positive)]
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    finish(fig, "comm_bytes", outdir, title + " — measured vs predicted bytes", full_note.strip("\n"), written)


def plot_memory(plt, points, colors, seqs, title, note, outdir, written):
    if not points:
        fig, ax = plt.subplots(figsize=(6, 3), layout="constrained")
        empty_axes(ax, "no ok results with memory")
        return finish(fig, "peak_memory", outdir, title, note, written)
    per_seq = {s: [p for p in points if p["seq"] == s] for s in seqs}
    fig, axes = panel_grid(plt, len(seqs), max(len(v) for v in per_seq.values()))
    for ax, seq in zip(axes, seqs):
        ps = per_seq[seq]
        x = list(range(len(ps)))
        ax.bar(x, [p["peak"] / MiB for p in ps], color=[colors[p["series"]] for p in ps], alpha=0.5,
               edgecolor="black", linewidth=0.5, width=0.8)
        for xi, p in zip(x, ps):
            n = len(p["mem"])
            offs = [0.0] if n == 1 else [-0.3 + 0.6 * i / (n - 1) for i in range(n)]
            ax.scatter([xi + o for o in offs], [m / MiB for m in p["mem"]], color="black", s=8, zorder=3)
        ax.set_xticks(x)
        ax.set_xticklabels([p["series"] for p in ps], rotation=45, ha="right", fontsize=8)
        ax.set_title(f"seq {seq}", fontsize=10)
        ax.set_ylabel("peak memory (MiB)")
        ax.grid(axis="y", alpha=0.3)
    finish(fig, "peak_memory", outdir, title + " — peak memory per rank (bar: max; dots: ranks 0..P-1)", note, written)


def plot_pairs(plt, points, seqs, title, note, outdir, written, name, keys, ylabel, what):
    """One panel per seq; per label, two bars side by side (keys[0], keys[1])."""
    if not points:
        fig, ax = plt.subplots(figsize=(6, 3), layout="constrained")
        empty_axes(ax, "no ok results with metrics")
        return finish(fig, name, outdir, title, note, written)
    per_seq = {s: [p for p in points if p["seq"] == s] for s in seqs}
    fig, axes = panel_grid(plt, len(seqs), max(len(v) for v in per_seq.values()))
    for ax, seq in zip(axes, seqs):
        ps = per_seq[seq]
        x = list(range(len(ps)))
        for j, (key, label, color) in enumerate(keys):
            ax.bar([xi - 0.2 + 0.4 * j for xi in x], [key(p) for p in ps], width=0.4, color=color,
                   edgecolor="black", linewidth=0.5, label=label)
        ax.set_xticks(x)
        ax.set_xticklabels([p["series"] for p in ps], rotation=45, ha="right", fontsize=8)
        ax.set_title(f"seq {seq}", fontsize=10)
        ax.set_ylabel(ylabel)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7)
    finish(fig, name, outdir, title + " — " + what, note, written)


def plot_balance_schemes(plt, points, seqs, title, note, outdir, written):
    """The balance figure for several schemes: per seq, bars grouped by label, one pair (FLOPs,
    compute time) per scheme side by side, each annotated with step_vs_none's ratio.

    Returns the annotations drawn: {(series, seq): text}.
    """
    from matplotlib.patches import Patch
    ratios = step_vs_none(points)
    order = series_order(points)
    labels = []
    for p in points:
        if p["label"] not in labels:
            labels.append(p["label"])
    schemes = sorted({p["scheme"] for p in points}, key=scheme_key)
    hatches = {s: SCHEME_HATCH.get(s, "...") for s in schemes}
    per_seq = {}
    for seq in seqs:
        slots, x = [], 0.0  # (x, point): one slot per scheme of a label, a gap between labels
        for label in labels:
            ps = sorted((p for p in points if p["seq"] == seq and p["label"] == label),
                        key=lambda p: (scheme_key(p["scheme"]), order.index(p["series"])))
            if ps:
                slots += [(x + i, p) for i, p in enumerate(ps)]
                x += len(ps) + 0.6
        per_seq[seq] = slots
    annotations = {}
    width = max(math.ceil(v[-1][0]) + 2 for v in per_seq.values())  # slots and gaps
    fig, axes = panel_grid(plt, len(seqs), width)
    for ax, seq in zip(axes, seqs):
        slots = per_seq[seq]
        top = 0.0
        for xi, p in slots:
            h = hatches[p["scheme"]]
            ax.bar([xi - 0.2], [p["flops_imbalance"]], width=0.4, color="tab:green", hatch=h,
                   edgecolor="black", linewidth=0.5)
            ax.bar([xi + 0.2], [p["time_imbalance"]], width=0.4, color="tab:gray", hatch=h,
                   edgecolor="black", linewidth=0.5)
            height = max(p["flops_imbalance"], p["time_imbalance"])
            top = max(top, height)
            r = ratios.get((p["label"], p["scheme"], seq))
            if r is not None:
                text = f"{r:.2f}x"
                ax.text(xi, height * 1.01, text, ha="center", va="bottom", fontsize=7)
                annotations[(p["series"], seq)] = text
        ax.set_ylim(0, top * 1.12)
        ax.set_xticks([xi for xi, _ in slots])
        ax.set_xticklabels([p["series"] for _, p in slots], rotation=45, ha="right", fontsize=8)
        ax.set_title(f"seq {seq}", fontsize=10)
        ax.set_ylabel("max / mean over ranks")
        ax.grid(axis="y", alpha=0.3)
    handles = [Patch(facecolor="tab:green", edgecolor="black", label="FLOPs (exact)"),
               Patch(facecolor="tab:gray", edgecolor="black", label="compute time")]
    handles += [Patch(facecolor="white", edgecolor="black", hatch=hatches[s], label=f"scheme {s}")
                for s in schemes]
    axes[len(seqs) - 1].legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    finish(fig, "balance", outdir, title + " — work balance per strategy and scheme "
           "(above bars: step time / the label's none)", note, written)
    return annotations


def make_title(reports):
    cfgs = [r["config"] for r in reports]
    c = cfgs[0]
    keys = ("world_size", "backend", "dtype", "batch", "heads", "kv_heads", "head_dim", "causal")
    if all(all(x[k] == c[k] for k in keys) for x in cfgs):
        extra = " prefill (forward only)" if c["pass"] == "prefill" else ""
        m = c["mask"]
        extra += f" window {m['window']}" if m["window"] else ""
        extra += f" docs {m['docs']['spec']}" if m["docs"] else ""
        return (f"cpbench: P={c['world_size']} {c['backend']} {c['dtype']}, B={c['batch']} H={c['heads']} "
                f"G={c['kv_heads']} d={c['head_dim']}{' causal' if c['causal'] else ''}{extra}")
    return f"cpbench: {len(reports)} reports (configs differ)"


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Plot cpbench reports: " + ", ".join(PLOTS) + ", each as PNG and SVG.",
        epilog="Exit status: 0 plots written; 2 a report is unreadable or invalid, or the output folder "
               "cannot be written.")
    ap.add_argument("reports", nargs="+", metavar="REPORT", help="report files (JSON); several are combined")
    ap.add_argument("-o", "--out-dir", required=True, metavar="DIR", help="output folder (created if missing)")
    ap.add_argument("--schema", metavar="FILE", help="schema file (default: results_schema/report.schema.json)")
    args = ap.parse_args(argv)

    try:
        validator = validate_report.load_schema(args.schema)
        reports = [validate_report.load_report(p, validator) for p in args.reports]
    except validate_report.ReportError as e:
        print(f"plot_report: invalid input:\n{e}", file=sys.stderr)
        return 2
    outdir = Path(args.out_dir)
    try:
        outdir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        print(f"plot_report: cannot create {outdir}: {e.strerror or e}", file=sys.stderr)
        return 2

    os.environ.setdefault("MPLBACKEND", "Agg")
    import matplotlib
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "cpbench"  # reproducible SVG ids
    import matplotlib.pyplot as plt

    points, excluded = collect(reports, args.reports)
    seqs = sorted({p["seq"] for p in points})
    colors = colors_for(series_order(points))
    title = make_title(reports)
    note = note_text(excluded)
    written = []
    try:
        plot_step_time(plt, points, colors, seqs, title, note, outdir, written)
        plot_mfu(plt, points, colors, seqs, title, note, outdir, written)
        plot_comm(plt, points, colors, title, note, outdir, written)
        plot_memory(plt, points, colors, seqs, title, note, outdir, written)
        plot_pairs(plt, points, seqs, title, note, outdir, written, "comm_tiers",
                   [(lambda p: p["intra"] / MiB, "intra-node", "tab:blue"),
                    (lambda p: p["inter"] / MiB, "inter-node", "tab:red")],
                   "MiB per layer step (max over ranks)", "bytes by network tier (forward + backward)")
        if len({p["scheme"] for p in points}) > 1:
            plot_balance_schemes(plt, points, seqs, title, note, outdir, written)
        else:
            plot_pairs(plt, points, seqs, title, note, outdir, written, "balance",
                       [(lambda p: p["flops_imbalance"], "FLOPs (exact)", "tab:green"),
                        (lambda p: p["time_imbalance"], "compute time", "tab:gray")],
                       "max / mean over ranks", "work balance per strategy")
    except OSError as e:
        print(f"plot_report: cannot write into {outdir}: {e.strerror or e}", file=sys.stderr)
        return 2
    for e in excluded:
        print(f"not plotted: {e}")
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
