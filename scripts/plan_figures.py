"""The figures of scripts/plan.py, drawn from its figure_rows (nothing is ranked or computed here,
only laid out): one figure per question, each with one panel per report and sequence length N.

  PREFIX-time.png    step time relative to the best (1.0; the fastest when nothing fits), the band
                     as error bars, the best's band shaded: a row that fits is tied when its bar
                     reaches the shading ("=1" after its name, as in the table); the axis ends at
                     twice the fastest's time (or further, to hold the best's band and three
                     quarters of the rows), slower rows sit at its edge with their value
  PREFIX-bytes.png   bytes per step (fwd + bwd) to its own node and to other nodes of each tier's
                     busiest rank, side by side
  PREFIX-memory.png  the memory that must fit (the whole-model estimate, or the measured peak of the
                     block) against the device's HBM, up to 3 x HBM (beyond it, the value)

In every panel the strategies are listed fastest first, so a row sits at the same place in all three
figures; colour (of the marker or bar, and of the name) is the family; the legend is outside the
axes. A strategy that does not fit in HBM is drawn hollow (time) or hatched (memory) and named
"(no fit)".
"""
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

# One colour per family of plan.FAMILIES (tab10's, which stay apart in print and for the common
# colour-vision deficiencies better than most).
FAMILY_COLOURS = {"ring family": "#1f77b4", "usp": "#2ca02c", "usp with tp": "#9467bd", "ulysses": "#ff7f0e",
                  "megatron-sp": "#d62728", "allgather-kv": "#8c564b", "single": "#7f7f7f", "other": "#17becf"}
TIER_COLOURS = {"intra": "#9ecae1", "inter": "#08519c"}
ROW_IN = 0.19          # inches per strategy row
PANEL_W_IN = 4.6       # inches per panel, its names included
LEGEND_W_IN = 2.3      # inches right of the panels for the legend
GiB = 2**30


def paths(prefix):
    """{question: path}: PREFIX-time.png, ...; a PREFIX ending in .png/.svg/.pdf gives its format."""
    p = Path(prefix)
    ext = p.suffix if p.suffix.lower() in (".png", ".svg", ".pdf") else ".png"
    stem = p.with_suffix("") if p.suffix.lower() == ext.lower() else p
    return {q: "%s-%s%s" % (stem, q, ext) for q in ("time", "bytes", "memory")}


def tick_name(row):
    """A strategy's name on the y axis: its label, "=1" when tied with the best (the table's tie
    column), "(no fit)" when it does not fit in HBM."""
    return row["label"] + ("  =1" if row["tied"] else "") + ("  (no fit)" if row["fits"] is False else "")


def by_n(rows):
    """[(N, rows at N in their order)], N ascending."""
    ns = sorted({r["N"] for r in rows})
    return [(n, [r for r in rows if r["N"] == n]) for n in ns]


def grid(panels):
    """A figure with one row of panels per report and one panel per N; returns (fig, [[(ax, title,
    N, rows)]]), unused axes removed."""
    layout = [(title, by_n(rows)) for title, rows in panels]
    ncols = max(len(ns) for _, ns in layout)
    heights = [max(len(rs) for _, rs in ns) * ROW_IN + 1.0 for _, ns in layout]
    fig_w = ncols * PANEL_W_IN + LEGEND_W_IN
    fig, axes = plt.subplots(len(layout), ncols, figsize=(fig_w, sum(heights) + 0.4), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    cells = []
    for axrow, (title, ns) in zip(axes, layout):
        cells.append([(ax, title, n, rs) for ax, (n, rs) in zip(axrow, ns)])
        for ax in axrow[len(ns):]:
            ax.remove()
    return fig, cells


def name_axis(ax, rows):
    """Strategy names on the y axis, fastest at the top, each in its family's colour, the best's in bold."""
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([tick_name(r) for r in rows], fontsize=7.5)
    for t, r in zip(ax.get_yticklabels(), rows):
        t.set_color(FAMILY_COLOURS[r["family"]])
        if r["best"]:
            t.set_fontweight("bold")
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.tick_params(axis="y", length=0)
    ax.grid(axis="x", color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)


def family_handles(rows):
    """Legend entries of the families present, in FAMILY_COLOURS' order."""
    present = {r["family"] for r in rows}
    return [Patch(color=c, label=f) for f, c in FAMILY_COLOURS.items() if f in present]


def finish(fig, handles, title, path):
    """Legend right of the panels, the title above them, saved at 100 dpi."""
    w, h = fig.get_size_inches()
    right = 1 - LEGEND_W_IN / w
    lines = textwrap.wrap(title, int(w * 100 / 7))  # about 7 pixels a character at 10 points
    fig.suptitle("\n".join(lines), fontsize=10)
    top = 1 - (0.15 + 0.2 * len(lines)) / h
    fig.tight_layout(rect=(0, 0, right, top))
    fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(right + 0.01 * (1 - right), top - 0.1 / h),
               fontsize=7.5, frameon=False)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def panel_title(ax, title, n, rows):
    ax.set_title("%s, N = %s%s" % (title, "{:,}".format(n), ": nothing fits" if rows[0]["nothing_fits"] else ""),
                 fontsize=8.5)


def time_axis(rows):
    """(lo, hi) of a time panel's axis: from the lowest band to twice the fastest's time, widened to
    hold the best's band and three quarters of the rows; slower rows than that are drawn at the
    edge with their value, so that a result 10 times slower does not squeeze the margins that
    matter (a few per cent) into pixels."""
    best = next(r for r in rows if r["best"])
    lo = min(r["band_lo"] for r in rows)
    most = rows[-(-3 * len(rows) // 4) - 1]["band_hi"]  # the row at three quarters, fastest first
    hi = min(max(r["band_hi"] for r in rows), max(2 * rows[0]["rel_time"], best["band_hi"], most))
    pad = 0.03 * (hi - lo) or 0.05 * hi  # zero-width bands of one result: still an axis
    return lo - pad, hi + pad


def draw_time(panels, path):
    fig, cells = grid(panels)
    for row in cells:
        for ax, title, n, rows in row:
            name_axis(ax, rows)
            ref = next(r for r in rows if r["best"])
            ax.axvspan(ref["band_lo"], ref["band_hi"], color="#e8e8e8", zorder=0)
            ax.axvline(1.0, color="#888888", linewidth=0.8, zorder=1)
            lo, cap = time_axis(rows)
            for y, r in enumerate(rows):
                c = FAMILY_COLOURS[r["family"]]
                face = "white" if r["fits"] is False else c
                if r["rel_time"] > cap:  # off the axis: an arrow at the edge and its value
                    ax.plot(cap, y, marker=">", markersize=5, color=c, markerfacecolor=face, clip_on=False, zorder=2)
                    ax.text(cap - 0.01 * (cap - lo), y, "%.2f" % r["rel_time"], ha="right", va="center", fontsize=7,
                            color=c)
                    continue
                ax.errorbar(r["rel_time"], y, xerr=[[r["rel_time"] - r["band_lo"]], [r["band_hi"] - r["rel_time"]]],
                            fmt="o", markersize=4, capsize=2, elinewidth=1, color=c, markerfacecolor=face, zorder=2)
            ax.set_xlim(lo, cap)
            ax.set_xlabel("step time / %s median" % ("fastest's" if ref["nothing_fits"] else "best's"), fontsize=8)
            ax.tick_params(axis="x", labelsize=7.5)
            panel_title(ax, title, n, rows)
    allrows = [r for _, rows in panels for r in rows]
    handles = family_handles(allrows) + [
        Patch(color="#e8e8e8", label="shaded: the best's band; =1: tied\n(a bar reaching it, among those\nthat fit, or all when none fits)"),
        Line2D([], [], marker="o", color="#444444", markerfacecolor="white", linestyle="",
               label="hollow: does not fit HBM")]
    finish(fig, handles, "Step time relative to the best per N, fastest first; bars: the band; "
                         "beyond the axis: the value at its right edge", path)


def draw_bytes(panels, path):
    fig, cells = grid(panels)
    for row in cells:
        for ax, title, n, rows in row:
            name_axis(ax, rows)
            for y, r in enumerate(rows):
                if r["intra"] is None:
                    ax.text(0, y, " n/a (no tiers in the report)", va="center", fontsize=7)
                    continue
                # Side by side, not stacked: each tier's busiest rank may be another rank, so the
                # sum of the two would be no rank's bytes.
                ax.barh(y - 0.19, r["intra"] / GiB, color=TIER_COLOURS["intra"], height=0.38)
                ax.barh(y + 0.19, r["inter"] / GiB, color=TIER_COLOURS["inter"], height=0.38)
            ax.set_xlabel("GiB per step (fwd + bwd) of the busiest rank", fontsize=8)
            ax.tick_params(axis="x", labelsize=7.5)
            panel_title(ax, title, n, rows)
    allrows = [r for _, rows in panels for r in rows]
    handles = [Patch(color=TIER_COLOURS["intra"], label="to its own node\n(the rank that sends most)"),
               Patch(color=TIER_COLOURS["inter"], label="to other nodes\n(the rank that sends most)"),
               Patch(color="none", label="names coloured by family:")] + family_handles(allrows)
    finish(fig, handles, "Bytes per step by network tier (the report's comm.*.tiers, as the table's columns), fastest first", path)


def draw_memory(panels, path):
    fig, cells = grid(panels)
    est = False
    for row in cells:
        for ax, title, n, rows in row:
            name_axis(ax, rows)
            hbm = rows[0]["hbm"]
            top = max(r["mem"] for r in rows) / GiB
            cap = min(top, 3 * hbm / GiB) if hbm else top  # far beyond HBM: the value, not the length
            for y, r in enumerate(rows):
                c = FAMILY_COLOURS[r["family"]]
                ax.barh(y, min(r["mem"] / GiB, cap), color=c, height=0.7,
                        hatch="////" if r["fits"] is False else None, edgecolor="white" if r["fits"] is False else None)
                if r["mem"] / GiB > cap:
                    ax.text(cap * 1.01, y, "%.0f" % (r["mem"] / GiB), va="center", fontsize=7, color=c)
                est |= r["mem_est"]
            ax.set_xlim(0, cap * 1.12)
            if hbm:
                ax.axvline(hbm / GiB, color="black", linestyle="--", linewidth=1)
            ax.set_xlabel("GiB per GPU" + (" (dashed: HBM, %.0f GiB)" % (hbm / GiB) if hbm else ", no HBM size known"),
                          fontsize=8)
            ax.tick_params(axis="x", labelsize=7.5)
            panel_title(ax, title, n, rows)
    allrows = [r for _, rows in panels for r in rows]
    what = ("whole-model estimate (memory.model_estimate.total) where a result has one, else the measured block's peak"
            if est else "measured peak of the block that ran")
    handles = family_handles(allrows) + [
        Line2D([], [], color="black", linestyle="--", label="HBM"),
        Patch(facecolor="#bbbbbb", hatch="////", edgecolor="white", label="hatched: does not fit")]
    finish(fig, handles, "Memory per GPU against HBM: the %s; fastest first; beyond 3 x HBM: the value" % what, path)


def draw(panels, prefix):
    """panels: [(title, plan.figure_rows of one report)]; writes the three figures and returns
    their paths."""
    out = paths(prefix)
    draw_time(panels, out["time"])
    draw_bytes(panels, out["bytes"])
    draw_memory(panels, out["memory"])
    return list(out.values())
