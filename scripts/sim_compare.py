#!/usr/bin/env python3
"""Tables of docs/SIMULATION.md's validation, from cpbench reports (Markdown on stdout).

  sim_compare.py measured MEASURED.json SIMULATED.json
      step time of each strategy measured vs simulated (ratio), and both rankings.
  sim_compare.py vs-single REPORT.json [--published LABEL=PCT ...]
      throughput of each strategy as a percentage of (one GPU's throughput on the whole problem)
      x P: T_single / (P x T_strategy), the metric of ring-flash-attention's table; `single`
      runs the whole layer on every rank, so its step time is one GPU's.
  sim_compare.py ranking REPORT.json [--published LABEL=VALUE ...]
      strategies ranked by TFLOP/s per GPU, beside a published ranking.
"""
import argparse
import json
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
    _, meas = ok_results(a.measured)
    _, sim = ok_results(a.simulated)
    labels = [l for l in meas if l in sim]
    rank_m = sorted(labels, key=lambda l: step(meas[l]))
    rank_s = sorted(labels, key=lambda l: step(sim[l]))
    print("| strategy | measured step ms | simulated step ms | simulated / measured | rank measured | rank simulated |")
    print("|---|---:|---:|---:|---:|---:|")
    within = 0
    for l in labels:
        ratio = step(sim[l]) / step(meas[l])
        within += abs(ratio - 1) <= 0.2
        print("| %s | %.1f | %.1f | %.2f | %d | %d |" % (l, step(meas[l]), step(sim[l]), ratio,
                                                        rank_m.index(l) + 1, rank_s.index(l) + 1))
    print()
    print("Within 20%%: %d of %d. Kendall tau of the two rankings: %.2f (1 = same order)."
          % (within, len(labels), kendall_tau(rank_m, rank_s)))


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
    m.add_argument("measured")
    m.add_argument("simulated")
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
