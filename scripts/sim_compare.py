#!/usr/bin/env python3
"""Tables of docs/SIMULATION.md's validation, from cpbench reports (Markdown on stdout).

  sim_compare.py measured MEASURED.json [MEASURED2.json ...] SIMULATED.json
      step time of each strategy measured (median over every iteration of every measured run)
      vs simulated (ratio), and both rankings. The ordering check counts only the pairs of
      strategies that the measurements tell apart: pairs whose measured samples do not overlap
      (every sample of one below every sample of the other, over all runs); strategies closer
      than the machine's own run-to-run spread have no measured order to reproduce.
  sim_compare.py vs-single REPORT.json [--published LABEL=PCT ...]
      throughput of each strategy as a percentage of (one GPU's throughput on the whole problem)
      x P: T_single / (P x T_strategy), the metric of ring-flash-attention's table; `single`
      runs the whole layer on every rank, so its step time is one GPU's.
  sim_compare.py ranking REPORT.json [--published LABEL=VALUE ...]
      strategies ranked by TFLOP/s per GPU, beside a published ranking.
"""
import argparse
import json
import statistics
import sys


def ok_results(path):
    rep = json.load(open(path))
    return rep, {r["label"]: r for r in rep["results"] if r["status"] == "ok"}


def step(r):
    return r["timing"]["step_ms"]["median"]


def published(items):
    out = {}
    for it in items or []:
        k, v = it.split("=", 1)
        out[k] = float(v)
    return out


def kendall_tau(a, b):
    """Kendall's tau between two orderings of the same labels (1 = same order)."""
    pos_b = {x: i for i, x in enumerate(b)}
    conc = disc = 0
    for i in range(len(a)):
        for j in range(i + 1, len(a)):
            s = pos_b[a[i]] - pos_b[a[j]]
            conc += s < 0
            disc += s > 0
    n = conc + disc
    return (conc - disc) / n if n else 1.0


def cmd_measured(a):
    *meas_paths, sim_path = a.reports
    if not meas_paths:
        sys.exit("sim_compare.py measured: give at least one measured report and the simulated one")
    runs = [ok_results(p)[1] for p in meas_paths]
    _, sim = ok_results(sim_path)
    labels = [l for l in runs[0] if l in sim and all(l in r for r in runs)]
    samples = {l: sorted(x for r in runs for x in r[l]["timing"]["step_ms"]["samples"]) for l in labels}
    meas = {l: statistics.median(samples[l]) for l in labels}
    rank_m = sorted(labels, key=lambda l: meas[l])
    rank_s = sorted(labels, key=lambda l: step(sim[l]))
    print("| strategy | measured step ms (median) | measured min-max | simulated step ms | simulated / measured "
          "| rank measured | rank simulated |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    within = 0
    for l in labels:
        ratio = step(sim[l]) / meas[l]
        within += abs(ratio - 1) <= 0.2
        print("| %s | %.1f | %.1f-%.1f | %.1f | %.2f | %d | %d |" % (
            l, meas[l], samples[l][0], samples[l][-1], step(sim[l]), ratio, rank_m.index(l) + 1, rank_s.index(l) + 1))
    # Pairs the measurement orders: no overlap between their samples.
    resolved, wrong = 0, []
    for i, x in enumerate(labels):
        for y in labels[i + 1:]:
            lo, hi = (x, y) if meas[x] < meas[y] else (y, x)
            if samples[lo][-1] >= samples[hi][0]:
                continue
            resolved += 1
            if not step(sim[lo]) < step(sim[hi]):
                wrong.append("%s < %s" % (lo, hi))
    n = len(labels)
    print()
    print("Within 20%%: %d of %d. Measured samples: %d run(s) x %d iterations. Pairs the measurement orders "
          "(no overlap of samples): %d of %d; the simulation orders them alike: %d of %d%s. Kendall tau of the "
          "two full rankings (ties included): %.2f." % (
              within, n, len(runs), len(runs[0][labels[0]]["timing"]["step_ms"]["samples"]) if labels else 0,
              resolved, n * (n - 1) // 2, resolved - len(wrong), resolved,
              (" (measured, simulated in the other order: %s)" % "; ".join(wrong)) if wrong else "",
              kendall_tau(rank_m, rank_s)))
    if a.check and (within < n or wrong):
        sys.exit(1)


def cmd_vs_single(a):
    rep, res = ok_results(a.report)
    P = rep["context"]["world_size"]
    if "single" not in res:
        sys.exit("sim_compare.py: the report has no ok 'single' result")
    t1 = step(res["single"])
    pub = published(a.published)
    print("| strategy | step ms (P=%d) | %% of one GPU x %d | published | difference (points) |" % (P, P))
    print("|---|---:|---:|---:|---:|")
    for l, r in res.items():
        if l == "single":
            continue
        pct = 100 * t1 / (P * step(r))
        p = pub.get(l)
        print("| %s | %.2f | %.1f%% | %s | %s |" % (l, step(r), pct, "-" if p is None else "%.1f%%" % p,
                                                    "-" if p is None else "%+.1f" % (pct - p)))
    print()
    print("One GPU (`single`, whole layer on every rank): %.2f ms." % t1)


def cmd_ranking(a):
    _, res = ok_results(a.report)
    pub = published(a.published)
    ours = sorted(res, key=lambda l: -res[l]["tflops"])
    print("| strategy | simulated TFLOP/s per GPU | simulated rank | published | published rank |")
    print("|---|---:|---:|---:|---:|")
    pub_rank = sorted(pub, key=lambda l: -pub[l])
    for l in ours:
        print("| %s | %.1f | %d | %s | %s |" % (l, res[l]["tflops"], ours.index(l) + 1,
                                               "%.1f" % pub[l] if l in pub else "-",
                                               pub_rank.index(l) + 1 if l in pub else "-"))
    common = [l for l in ours if l in pub]
    if len(common) > 1:
        print()
        print("Kendall tau against the published ranking: %.2f." % kendall_tau(common, [l for l in pub_rank if l in common]))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measured")
    m.add_argument("reports", nargs="+", metavar="REPORT", help="measured report(s), then the simulated one")
    m.add_argument("--check", action="store_true", help="exit 1 unless every strategy is within 20%% and "
                   "every pair the measurement orders is ordered alike")
    v = sub.add_parser("vs-single")
    v.add_argument("report")
    v.add_argument("--published", nargs="*")
    k = sub.add_parser("ranking")
    k.add_argument("report")
    k.add_argument("--published", nargs="*")
    a = ap.parse_args()
    {"measured": cmd_measured, "vs-single": cmd_vs_single, "ranking": cmd_ranking}[a.cmd](a)


if __name__ == "__main__":
    main()
