#!/usr/bin/env python3
"""The planner view of cpbench reports (simulated or measured): for each sequence length, the
strategies and meshes ranked by median step time, with each one's band, the ones tied with the
fastest, MFU, tokens/s per GPU, bytes per network tier, peak memory against the device's memory
and the longest sequence that would fit; Markdown (for a PR comment) on stdout and, with --plot,
three figures, one per question (scripts/plan_figures.py draws them from figure_rows below):

  PREFIX-time.png    per N, the strategies fastest first, step time relative to the best (1.0)
                     with the band as error bars, the best's band shaded, ties "=1"
  PREFIX-bytes.png   per N, the busiest rank's bytes to its own node and to other nodes
  PREFIX-memory.png  per N, the memory that must fit against the HBM line

  scripts/plan.py REPORT.json [REPORT2.json ...] [--plot PREFIX] [--hbm-gib 80]
  scripts/plan.py REPORT.json --sensitivity [--jobs N] [--rerun 'COMMAND {platform} {out}'] [--exe PATH]

`--plot plan.png` (a PREFIX ending in .png, .svg or .pdf) writes plan-time.png, plan-bytes.png and
plan-memory.png. Colour is the family: the ring family (ring, ring-zigzag, ring-striped,
double-ring), usp without a tp level, usp with one, ulysses, megatron-sp, allgather-kv, single.

Several reports (e.g. the same sweep on 8, 64 and 256 simulated GPUs) are ranked separately and
drawn as rows of panels. Simulated reports carry their platform (context.simulated: HBM size); for
measured ones give --hbm-gib.

Bands and ties: a result's band is timing.step_ms.band {lo, hi} (relative factors around the
median, from the simulation's validation residuals) when the report has one, else [p10, p90] of
its timed steps. The fastest strategy that fits in HBM is the best; every other one that fits and
whose band overlaps the best's is tied with it (tie column "=1"), and the verdict under the table
gives each margin and the two bands. A single winner is named only when the best's band is
disjoint from every other's; when a band has zero width (one timed step, or a simulation without
timing.step_ms.band) the verdict says its margin's significance is unknown. When nothing fits
in HBM, every row is still ranked, its "vs best" and ties taken against the fastest of all ("vs best"
"fastest"), and the verdict says first that nothing fits and that the ranking is of step time only.

Memory: "fits HBM" and "longest N that fits" use memory.model_estimate.total where a result has
one (--block full: an ESTIMATE of the whole model per rank, L layers with embedding, output head and
mixed-precision Adam; the cells say "est."), else the measured peak of the one block that ran
(peak_bytes, which ignores the other layers and the optimizer). The "peak memory" column is always
the measured peak. The estimate is the report's --shard choice (config.shard: the optimizer states,
gradients or parameters sharded over the ranks that hold the same weights); a report of schema 7
or later carries the estimate's weight groups, from which "Fits under each --shard" recomputes the
total under every choice (cpmodel.model_state_bytes + the report's activations), with the longest N
that fits and the step's gradient sync bytes under each; the ranking above stays the run's choice.
A schema 14 report's estimate also carries core_activations, from which "Fits under each --recompute"
rebuilds the activations under none, selective and full (cpmodel.model_activations; the states as
estimated) with the longest N under each; a recompute's time is only the run's own (it is executed).

Tiers: the bytes columns are the report's own comm.{fwd,bwd}.tiers: per rank, intra_node_bytes
(to ranks on its node) and inter_node_bytes (to other nodes) of fwd + bwd, the maximum over ranks
of each (the rank that sends most, as cpbench's console prints inter_node). A report without
tiers (written before they existed) shows "n/a"; nothing is recomputed from the mesh.

--sensitivity (one simulated report; scripts/plan_sensitivity.py): reruns the report's sweep with
each platform input that states an uncertainty perturbed by +- it, one at a time, ranks every N
of every rerun with rank_at, and prints, instead of the tables, each input that changes the winner
or the tied set as 'depends on <input>'; sensitivity.json in --sens-dir has every ranking. A report
it cannot compare (measured, another sweep, not reproduced by its baseline rerun) is exit 2 with
the reason.
"""
import argparse
import json
import sys

import cpmodel  # the estimate's parts under another --shard choice (model_state_bytes)


def fmt_bytes(b):
    for unit, div in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= div:
            return "%.2f %s" % (b / div, unit)
    return "%d B" % b


def tier_bytes(r):
    """{'intra', 'inter'}: the busiest rank's bytes per step (fwd + bwd, and a --recompute's
    repeated forward, schema 14) by destination tier, from the report's comm.*.tiers.per_rank; None
    when the report has no tiers."""
    try:
        phases = [r["comm"][ph]["tiers"]["per_rank"] for ph in ("fwd", "bwd", "recompute") if ph in r["comm"]]
    except KeyError:
        return None
    out = {}
    for short, key in (("intra", "intra_node_bytes"), ("inter", "inter_node_bytes")):
        out[short] = max(sum(p[key] for p in per) for per in zip(*phases))
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


def shard_total(r, shard):
    """The estimate's total under another --shard choice, from the report's own numbers: the weight
    groups (memory.model_estimate.groups, schema 7) and its activations; None without groups."""
    e = model_estimate(r)
    if not e or "groups" not in e:
        return None
    groups = [(g["name"], g["copies"], g["parameters"], g["replicas"]) for g in e["groups"]]
    return sum(cpmodel.model_state_bytes(groups, shard)) + e["activations"]


def shard_sync(r, shard):
    """The step's gradient sync bytes per rank under a --shard choice (cpmodel.grad_sync_bytes of the
    estimate's groups); None without groups."""
    e = model_estimate(r)
    if not e or "groups" not in e:
        return None
    return sum(cpmodel.grad_sync_bytes([(g["name"], g["copies"], g["parameters"], g["replicas"])
                                        for g in e["groups"]], shard))


RECOMPUTE_CHOICES = ("none", "selective", "full")


def recompute_total(r, cfg, P, choice):
    """The estimate's total under another --recompute choice, from the report's own numbers: the
    states as estimated (the run's --shard) plus the activations rebuilt by cpmodel.model_activations
    from memory.activations, the core's share of them (model_estimate.core_activations, schema 14)
    and the block's input [B, T, D] (T = N / P; single holds every token); None before schema 14."""
    e = model_estimate(r)
    if not e or "core_activations" not in e:
        return None
    T = r["seq"] if r["strategy"] == "single" else r["seq"] // P
    block_input = cpmodel.block_input_bytes(cfg["batch"], T, cfg["dim"], cpmodel.elem_bytes(cfg["dtype"]))
    acts = cpmodel.model_activations(e["layers"], block_input, r["memory"]["activations"], choice, e["core_activations"])
    return e["total"] - e["activations"] + acts


def fits_up_to(rows, hbm, mem=fit_memory, fixed=None):
    """Longest N whose memory (mem: fit_memory, or another --shard or --recompute choice's total)
    stays under hbm, from a line through the two largest N run (memory = a + b*N); None when it
    cannot be estimated. With one N, fixed(r) is what does not grow with N (default: the estimate's
    total less its activations, else the measured weights)."""
    pts = sorted(((r["seq"], mem(r), r) for r in rows), key=lambda p: p[:2])
    if not hbm or not pts:
        return None
    if len(pts) == 1:
        n, m, r = pts[0]
        e = model_estimate(r)
        # One N: what does not grow with N (the estimate's weights, grads and optimizer state;
        # else the measured weights) stays, the rest grows linearly.
        w = fixed(r) if fixed else (m - e["activations"]) if e else r["memory"].get("weights", 0)
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


# The families a figure tells apart by colour: the ring family, usp without and with a tp level
# (its mesh.tp), and the others each on its own. A strategy not named here is drawn as "other".
RING_FAMILY = ("ring", "ring-zigzag", "ring-striped", "double-ring")
FAMILIES = ("ring family", "usp", "usp with tp", "ulysses", "megatron-sp", "allgather-kv", "single", "other")


def family(strategy, tp=1):
    """The family of a result, from its strategy name and its mesh's tp degree (not from the label,
    whose format bench/ owns)."""
    if strategy in RING_FAMILY:
        return "ring family"
    if strategy == "usp":
        return "usp with tp" if (tp or 1) > 1 else "usp"
    return strategy if strategy in FAMILIES else "other"


def rank_at(results, hbm):
    """The ranking of one N's ok results, which the table, the verdict and the figures all read:
    rows   the results by median step time, fastest first
    bands  label -> (lo_ms, hi_ms, source)
    fits   label -> True/False against hbm (None: no HBM size known)
    ref    the best (fastest that fits), or the fastest of all when nothing fits
    tied   the other results whose band overlaps ref's: among those that fit, or among all when
           nothing fits
    nothing_fits  True when an HBM size is known and no result fits in it."""
    rows = sorted(results, key=lambda r: r["timing"]["step_ms"]["median"])
    bands = {r["label"]: step_band(r) for r in rows}
    fits = {r["label"]: (fit_memory(r) <= hbm if hbm else None) for r in rows}
    pool = [r for r in rows if fits[r["label"]] is not False]
    nothing_fits = not pool
    if nothing_fits:
        pool = rows
    ref = pool[0]
    tied = [r for r in pool[1:] if overlaps(bands[r["label"]], bands[ref["label"]])]
    return {"rows": rows, "bands": bands, "fits": fits, "ref": ref, "pool": pool, "tied": tied,
            "nothing_fits": nothing_fits}


def verdict(n, rk, hbm):
    """The sentence under a table: who wins at N, or who is tied and why; when nothing fits, the
    same sentence about step time alone, said to be that."""
    best, tied, bands, pool = rk["ref"], rk["tied"], rk["bands"], rk["pool"]
    bm = best["timing"]["step_ms"]["median"]
    head, word, whose = "", "Winner", "best's"
    if rk["nothing_fits"]:
        least = min(rk["rows"], key=fit_memory)
        head = ("Nothing fits in HBM at N = %d: the least memory, %s's %s%s, exceeds the %s of HBM; "
                "the ranking is of step time only. " % (
                    n, least["label"], fmt_bytes(fit_memory(least)),
                    " (est.)" if model_estimate(least) else "", fmt_bytes(hbm)))
        word, whose = "Fastest", "fastest's"

    def band_text(r):
        lo, hi, src = bands[r["label"]]
        return "%s %.3f-%.3f ms (%s)" % (r["label"], lo, hi, "timing.step_ms.band" if src == "band" else "p10-p90")

    def margin(r):
        return 100 * (r["timing"]["step_ms"]["median"] / bm - 1)

    faster = rk["rows"][:rk["rows"].index(best)]  # faster results that do not fit
    tail = "" if not faster else (" %d faster result%s do%s not fit in HBM (the fastest, %s, %.1f%% less time)." % (
        len(faster), "s" if len(faster) > 1 else "", "" if len(faster) > 1 else "es", faster[0]["label"], -margin(faster[0])))
    if len(pool) == 1:
        only = ("the only strategy that ran" + ("" if rk["nothing_fits"] else " and fits") if len(rk["rows"]) == 1
                else "the only one of the %d that ran that fits" % len(rk["rows"]))
        return head + "%s at N = %d: **%s**, %s.%s" % (word, n, best["label"], only, tail)
    if tied:
        return head + ("Tie at N = %d: **%s** is fastest by median%s, but %s: their bands overlap the %s (%s), "
                       "so these runs cannot rank them." % (
                           n, best["label"], " of those that fit" if faster else "",
                           ", ".join("%s is %.1f%% slower" % (r["label"], margin(r)) for r in tied), whose,
                           "; ".join(band_text(r) for r in [best] + tied))) + tail
    nxt = pool[1]
    text = head + ("%s at N = %d: **%s**; the next, %s, is %.1f%% slower, and the %s band lies below every "
                   "other's (%s; %s)." % (word, n, best["label"], nxt["label"], margin(nxt), whose, band_text(best),
                                          band_text(nxt))) + tail
    if any(bands[r["label"]][0] == bands[r["label"]][1] for r in (best, nxt)):
        text += (" Caution: a band of zero width (one timed step, or a simulation without timing.step_ms.band) "
                 "cannot show a tie; this margin's significance is unknown.")
    return text


def figure_rows(oks, hbm):
    """The figures' data, one dict per ok result, by N and then fastest first: label, family, N,
    rel_time (median over ref's median: 1.0 = the best, or the fastest when nothing fits), band_lo
    and band_hi (the band on the same scale), best, tied (as the table's tie column), intra and
    inter (tier_bytes; None without tiers), mem (fit_memory), mem_est (mem is the whole-model
    estimate), fits (None: no HBM size known), nothing_fits (at this N), hbm."""
    out = []
    for n in sorted({r["seq"] for r in oks}):
        rk = rank_at([r for r in oks if r["seq"] == n], hbm)
        bm = rk["ref"]["timing"]["step_ms"]["median"]
        tie_set = {r["label"] for r in rk["tied"]} | ({rk["ref"]["label"]} if rk["tied"] else set())
        for r in rk["rows"]:
            lo, hi, _ = rk["bands"][r["label"]]
            tb = tier_bytes(r)
            out.append({"label": r["label"], "family": family(r["strategy"], r["mesh"].get("tp", 1)), "N": n,
                        "rel_time": r["timing"]["step_ms"]["median"] / bm, "band_lo": lo / bm, "band_hi": hi / bm,
                        "best": r is rk["ref"], "tied": r["label"] in tie_set,
                        "intra": tb["intra"] if tb else None, "inter": tb["inter"] if tb else None,
                        "mem": fit_memory(r), "mem_est": model_estimate(r) is not None,
                        "fits": rk["fits"][r["label"]], "nothing_fits": rk["nothing_fits"], "hbm": hbm})
    return out


def load(path):
    with open(path, encoding="utf-8") as f:
        rep = json.load(f)
    if rep["config"].get("command") != "run":
        print("plan.py: %s is a '%s' report: it has no step times to rank (give a 'run' report)"
              % (path, rep["config"].get("command")), file=sys.stderr)
        sys.exit(2)
    return rep


def hbm_of(rep, hbm_gib):
    """The device memory to fit in: a simulated report's platform's, else --hbm-gib (None: unknown)."""
    sim = rep["context"].get("simulated")
    return sim["hbm_bytes"] if sim else (hbm_gib * 2**30 if hbm_gib else None)


def ok_results(rep):
    return [r for r in rep["results"] if r["status"] == "ok"]


def one_report(rep, hbm):
    """(Markdown, best) of one report; best: N -> (label, [tied labels], nothing_fits)."""
    ctx = rep["context"]
    P = ctx["world_size"]
    sim = ctx.get("simulated")
    cfg = rep["config"]
    batch = cfg.get("batch", 1)
    oks = ok_results(rep)
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
                  "rank (%d layers, embedding and output head, mixed-precision Adam at 16 B/param, %s, activations "
                  "with recompute %s), not a measurement; peak memory: the measured block." % (
                      e["layers"], ("--shard %s over the ranks holding the same weights" % cfg["shard"])
                      if cfg.get("shard") else "nothing sharded", cfg.get("recompute") or "none"), ""]
    best = {}      # N -> (label, [tied labels], nothing_fits)
    by_label = {}
    for r in oks:
        by_label.setdefault(r["label"], []).append(r)
    for n in sorted({r["seq"] for r in oks}):
        rk = rank_at([r for r in oks if r["seq"] == n], hbm)
        ref, tied = rk["ref"], rk["tied"]
        best[n] = (ref["label"], [r["label"] for r in tied], rk["nothing_fits"])
        tie_set = {r["label"] for r in tied} | ({ref["label"]} if tied else set())
        lines += ["### N = %d" % n, "",
                  "| rank | strategy | step ms | band ms | vs best | tie | MFU | tokens/s/GPU "
                  "| bytes to own node | bytes to other nodes | peak memory | fits HBM | longest N that fits |",
                  "|---:|---|---:|---:|---:|:---:|---:|---:|---:|---:|---:|:---:|---:|"]
        bm = ref["timing"]["step_ms"]["median"]
        for i, r in enumerate(rk["rows"], 1):
            step = r["timing"]["step_ms"]["median"]
            lo, hi, _ = rk["bands"][r["label"]]
            tb = tier_bytes(r)
            mem = r["memory"]["peak_bytes"]
            est = model_estimate(r)
            fits = {None: "-", True: "yes", False: "**no**"}[rk["fits"][r["label"]]]
            if hbm and est:
                fits += " (est. %s)" % fmt_bytes(est["total"])
            nmax = fits_up_to(by_label[r["label"]], hbm)
            if r is ref:
                vs = "fastest" if rk["nothing_fits"] else "best"
            else:
                vs = "%+.1f%%" % (100 * (step / bm - 1))
            mfu = "-" if r["mfu"] is None else "%.1f%%" % (100 * r["mfu"])  # null: no peak known
            lines.append("| %d | %s | %.3f | %.3f-%.3f | %s | %s | %s | %.0f | %s | %s | %s | %s | %s |" % (
                i, r["label"], step, lo, hi, vs, "=1" if r["label"] in tie_set else "",
                mfu, batch * n / P / (step * 1e-3),
                "n/a" if tb is None else fmt_bytes(tb["intra"]), "n/a" if tb is None else fmt_bytes(tb["inter"]),
                fmt_bytes(mem), fits,
                "-" if nmax is None else ("{:,}".format(nmax) if nmax else "none") + (" (est.)" if est else "")))
        lines += ["", verdict(n, rk, hbm), ""]
    lines += shard_section(rep, oks, by_label, hbm)
    lines += recompute_section(rep, oks, by_label, hbm)
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
    return "\n".join(lines), best


def choice_head(choices, ran):
    """The header and rule of a table with one column per choice, the run's marked."""
    return ("| strategy | " + " | ".join("%s%s" % (c, " (run)" if c == ran else "") for c in choices) + " |",
            "|---|" + "---:|" * len(choices))


def choice_tables(estimated, choices, ran, order, total, hbm, after=None):
    """Per N (Markdown lines): every result's total(r, c) under each choice, yes/no against hbm,
    the rows by their total under `order` (the run's choice), who fits under each, then after(rows)'s
    lines (shard_section, recompute_section)."""
    head, rule = choice_head(choices, ran)
    lines = []
    for n in sorted({r["seq"] for r in estimated}):
        rows = sorted((r for r in estimated if r["seq"] == n), key=lambda r: total(r, order))
        lines += ["N = %d:" % n, "", head, rule]
        for r in rows:
            cells = []
            for c in choices:
                t = total(r, c)
                cells.append(("%s " % ("yes" if t <= hbm else "**no**") if hbm else "") + fmt_bytes(t))
            lines.append("| %s | %s |" % (r["label"], " | ".join(cells)))
        fitting = {c: [r["label"] for r in rows if hbm and total(r, c) <= hbm] for c in choices}
        lines += ["", "Fit at N = %d: %s." % (n, "; ".join(
            "%s: %s" % (c, ", ".join(fitting[c]) if fitting[c] else "none") for c in choices))]
        lines += (after(rows) if after else []) + [""]
    return lines


def n_cell(nmax):
    """A longest-N cell: '-' when it cannot be estimated, 'none' when nothing fits."""
    return "-" if nmax is None else ("{:,}".format(nmax) if nmax else "none")


def shard_section(rep, oks, by_label, hbm):
    """Fits under each --shard choice (Markdown lines): per N, every result's estimate under none,
    optimizer, grads and params with yes/no against hbm, the least-memory one's formula as the
    report states it, then the longest N that fits and the step's gradient sync bytes under each."""
    estimated = [r for r in oks if model_estimate(r)]
    if not estimated:
        return []
    ran = rep["config"].get("shard")
    if any(shard_total(r, "none") is None for r in estimated):
        return ["Fits under each --shard: this report's estimate predates --shard (schema < 7): every parameter, "
                "gradient and optimizer state is held unsharded unless a tp level splits it.", ""]
    choices = cpmodel.SHARD_CHOICES
    lines = ["### Fits under each --shard", "",
             "memory.model_estimate's total recomputed from its weight groups under each choice (the states "
             "2/2/12 B per parameter, sharded over each group's replicas; the same activations), against %s of HBM; "
             "the run's choice is config.shard = %s. An estimate, not a measurement." % (
                 fmt_bytes(hbm) if hbm else "no known size", ran), ""]
    lines += choice_tables(estimated, choices, ran, ran or "optimizer", shard_total, hbm, after=lambda rows: [
        "Least memory under the run's choice, %s: %s" % (rows[0]["label"], model_estimate(rows[0])["formula"])])
    lines += ["Longest N that fits (est.) and the step's gradient sync bytes per rank (modelled, results[].step), "
              "under each --shard:", "", *choice_head(choices, ran)]
    for label, rs in by_label.items():
        if not model_estimate(rs[0]):
            continue
        cells = ["%s, sync %s" % (n_cell(fits_up_to(rs, hbm, lambda r, c=c: shard_total(r, c))),
                                  fmt_bytes(shard_sync(rs[0], c))) for c in choices]
        lines.append("| %s | %s |" % (label, " | ".join(cells)))
    lines.append("")
    return lines


def recompute_section(rep, oks, by_label, hbm):
    """Fits under each --recompute choice (Markdown lines): per N, every result's estimate with the
    activations of none, selective and full (recompute_total) against hbm, then the longest N that
    fits under each. The step times are the run's choice only: a recompute is executed, so its cost
    is measured by running it."""
    cfg, P = rep["config"], rep["context"]["world_size"]
    estimated = [r for r in oks if model_estimate(r)]
    if not estimated:
        return []
    ran = cfg.get("recompute") or "none"
    if any(recompute_total(r, cfg, P, "none") is None for r in estimated):
        return ["Fits under each --recompute: this report's estimate predates core_activations (schema < 14); "
                "its activations are the run's choice, %s, only." % ran, ""]
    total = lambda r, c: recompute_total(r, cfg, P, c)  # noqa: E731
    lines = ["### Fits under each --recompute", "",
             "memory.model_estimate's total with the activations of each choice (none: L x the block's measured "
             "activations; selective: L x (those - the attention core's, core_activations) + the core's; full: L x "
             "the block's input + one block's), the states as estimated (--shard %s), against %s of HBM; the run's "
             "choice is config.recompute = %s. An estimate; what a recompute costs in time is measured by running "
             "it (--recompute is executed: comm.recompute, timing.bwd_ms)." % (
                 cfg.get("shard") or "none", fmt_bytes(hbm) if hbm else "no known size", ran), ""]
    lines += choice_tables(estimated, RECOMPUTE_CHOICES, ran, ran, total, hbm)
    lines += ["Longest N that fits (est.) under each --recompute:", "", *choice_head(RECOMPUTE_CHOICES, ran)]
    states = lambda r: model_estimate(r)["total"] - model_estimate(r)["activations"]  # noqa: E731
    for label, rs in by_label.items():
        if not model_estimate(rs[0]):
            continue
        cells = [n_cell(fits_up_to(rs, hbm, lambda r, c=c: total(r, c), fixed=states)) for c in RECOMPUTE_CHOICES]
        lines.append("| %s | %s |" % (label, " | ".join(cells)))
    lines.append("")
    return lines


def panel_title(rep):
    """A report's name in the figures: GPUs, nodes and the model."""
    P = rep["context"]["world_size"]
    nodes = node_count(rep["context"], P)
    return "%s, %d GPUs (%d node%s)" % (rep["config"].get("model", "?"), P, nodes, "s" if nodes > 1 else "")


def sensitivity(a):
    """plan.py --sensitivity: plan_sensitivity.analyse on the one report, exit 2 when refused."""
    import plan_sensitivity
    if len(a.reports) != 1:
        print("plan.py: --sensitivity takes one report (got %d): each is rerun on its own platform" % len(a.reports),
              file=sys.stderr)
        return 2
    if a.jobs < 1:
        print("plan.py: --jobs must be >= 1, got %d" % a.jobs, file=sys.stderr)
        return 2
    rep = load(a.reports[0])
    try:
        md, _ = plan_sensitivity.analyse(a.reports[0], rep, hbm_of(rep, a.hbm_gib), rerun=a.rerun, exe=a.exe,
                                         sens_dir=a.sens_dir, jobs=a.jobs, platform_file=a.platform)
    except plan_sensitivity.Refused as e:
        print("plan.py: --sensitivity: %s" % e, file=sys.stderr)
        return 2
    print(md)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("reports", nargs="+")
    ap.add_argument("--plot", metavar="PREFIX",
                    help="write PREFIX-time.png, PREFIX-bytes.png and PREFIX-memory.png (a PREFIX ending in "
                         ".png, .svg or .pdf: that suffix comes off and is the figures' format)")
    ap.add_argument("--hbm-gib", type=float, help="device memory for measured reports")
    sens = ap.add_argument_group("--sensitivity (scripts/plan_sensitivity.py)")
    sens.add_argument("--sensitivity", action="store_true",
                      help="rerun the sweep with each platform input perturbed by +- its uncertainty and name the "
                           "inputs that change a ranking")
    sens.add_argument("--jobs", type=int, default=1, help="reruns at once (default 1)")
    sens.add_argument("--rerun", metavar="COMMAND",
                      help="the rerun command, with {platform} and {out} (default: the report's context.argv under "
                           "scripts/simulate.sh)")
    sens.add_argument("--exe", help="cpbench-sim for the default rerun (default: the report's argv[0] where it exists, else simulate.sh's)")
    sens.add_argument("--platform", metavar="FILE", help="the report's platform file (default: context.simulated.platform_file)")
    sens.add_argument("--sens-dir", metavar="DIR",
                      help="where the perturbed platforms, reruns and sensitivity.json go (default: REPORT.sens)")
    a = ap.parse_args()
    if a.sensitivity:
        return sensitivity(a)
    panels = []
    for path in a.reports:
        rep = load(path)
        hbm = hbm_of(rep, a.hbm_gib)
        md, best = one_report(rep, hbm)
        print(md)
        if best:
            P = rep["context"]["world_size"]
            print("Best per N (%d GPUs): " % P + ", ".join(
                ("N=%d: none fits (fastest: %s" % (n, best[n][0]) + (", tied: %s)" % ", ".join(best[n][1]) if best[n][1] else ")")
                 if best[n][2] else
                 "N=%d: %s" % (n, best[n][0]) + (" (tied: %s)" % ", ".join(best[n][1]) if best[n][1] else ""))
                for n in sorted(best)))
            print()
        P = rep["context"]["world_size"]
        panels.append((node_count(rep["context"], P), P, panel_title(rep), figure_rows(ok_results(rep), hbm)))
    if a.plot:
        import plan_figures
        for path in plan_figures.draw([p[2:] for p in sorted(panels, key=lambda p: p[:2])], a.plot):
            print("plot: %s" % path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
