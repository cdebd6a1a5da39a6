#!/usr/bin/env python3
"""Assertions on real cpbench reports and traces, used by the MPI tests (tests/mpi/reports.cmake).

  check_report.py model REPORT [--min-ok N]          every result ok (or skipped with a reason), and
                                                     measured bytes == the analytic model, fwd and bwd
  check_report.py memory P1.json P4.json STRAT...    peak activation bytes at P=4 within 20% of 1/4 of P=1
  check_report.py weights P1.json P4.json STRAT      peak weight bytes at P=4 within 20% of 1/4 of P=1
  check_report.py balance REPORT --above ring=1.4 --below ring-zigzag=1.02 ...   on flops_imbalance
  check_report.py trace TRACE --ranks P              Chrome trace: one process per rank, compute and comm tracks
Prints 'N passed, M failed' and exits 1 on any failure.
"""
import argparse
import json
import sys

passed = failed = 0


def check(cond, msg):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL:", msg)


def ok_results(rep):
    return [r for r in rep["results"] if r["status"] == "ok"]


def by_label(rep):
    return {r["label"]: r for r in ok_results(rep)}


def cmd_model(a):
    rep = json.load(open(a.report))
    oks = ok_results(rep)
    check(len(oks) >= a.min_ok, f"{len(oks)} ok results, expected at least {a.min_ok}")
    for r in rep["results"]:
        if r["status"] != "ok":
            check(r["status"] == "skipped" and r.get("reason"), f"{r['label']}: status {r['status']} {r.get('reason')}")
            continue
        for ph in ("fwd", "bwd"):
            c = r["comm"][ph]
            check(c["matches_model"] and all(b == c["predicted_bytes"] for b in c["per_rank"]),
                  f"{r['label']} seq={r['seq']} {ph}: measured {c['per_rank']} != predicted {c['predicted_bytes']}")
            t = c["tiers"]
            check("predicted" in t and [(x["intra_node_bytes"], x["inter_node_bytes"]) for x in t["per_rank"]] ==
                  [(x["intra_node_bytes"], x["inter_node_bytes"]) for x in t.get("predicted", [])],
                  f"{r['label']} seq={r['seq']} {ph}: bytes by tier {t['per_rank']} != predicted {t.get('predicted')}")
            check(sum(op["bytes_sent"] for op in c["ops"]) == c["per_rank"][0],
                  f"{r['label']} {ph}: ops of rank 0 do not add up to its bytes")
        if r["strategy"] != "single" and rep["config"]["world_size"] > 1:
            check(r["comm"]["fwd"]["bytes_sent"] > 0, f"{r['label']}: no bytes sent at P>1")
        check(r["flops"]["model"] > 0 and r["flops"]["hardware"] >= r["flops"]["model"], f"{r['label']}: flops {r['flops']}")
        check(0 <= r["overlap"]["ratio"] <= 1, f"{r['label']}: overlap ratio {r['overlap']['ratio']}")
        check(r["balance"]["imbalance"] >= 1, f"{r['label']}: imbalance {r['balance']['imbalance']}")
        check(r["memory"]["timed_allocations"] == 0,
              f"{r['label']} seq={r['seq']}: {r['memory']['timed_allocations']} allocator calls in timed iterations")


def ratio_check(a, key):
    p1, p4 = by_label(json.load(open(a.p1))), by_label(json.load(open(a.p4)))
    for s in a.strategies:
        check(s in p1 and s in p4, f"{s}: missing from a report")
        if s in p1 and s in p4:
            r = p4[s]["memory"][key] / p1[s]["memory"][key]
            print(f"{s}: {key} P=4 / P=1 = {p4[s]['memory'][key]} / {p1[s]['memory'][key]} = {r:.3f}")
            check(0.8 * 0.25 <= r <= 1.2 * 0.25, f"{s}: {key} ratio {r:.3f} not within 20% of 0.25")


def cmd_balance(a):
    """Gates on the deterministic flops_imbalance; the time-based imbalance is printed only (it
    depends on how busy the machine is)."""
    rep = by_label(json.load(open(a.report)))
    for spec, above in [(s, True) for s in a.above] + [(s, False) for s in a.below]:
        name, thr = spec.split("=")
        check(name in rep, f"{name}: missing from the report")
        if name not in rep:
            continue
        b = rep[name]["balance"]
        fi = b["flops_imbalance"]
        print(f"{name}: flops imbalance {fi:.3f}; time imbalance {b['imbalance']:.3f} (compute ms per rank "
              f"{['%.1f' % x for x in b['compute_ms_per_rank']]}, not gated)")
        check(fi > float(thr) if above else fi < float(thr),
              f"{name}: flops imbalance {fi:.3f} should be {'above' if above else 'below'} {thr}")


def cmd_trace(a):
    t = json.load(open(a.trace))
    ev = t["traceEvents"]
    pids = {e["pid"] for e in ev if e.get("ph") == "X"}
    check(pids == set(range(a.ranks)), f"trace processes {sorted(pids)}, expected 0..{a.ranks - 1}")
    for cat, tid in (("compute", 0), ("comm", 1)):
        evs = [e for e in ev if e.get("ph") == "X" and e.get("cat") == cat]
        check(len(evs) > 0, f"no {cat} events")
        check(all(e["tid"] == tid and e["dur"] >= 0 and "ts" in e for e in evs), f"{cat} events malformed")
    names = {e["args"]["name"] for e in ev if e.get("ph") == "M" and e["name"] == "thread_name"}
    check({"compute", "communication"} <= names, f"thread names {names}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("model"); m.add_argument("report"); m.add_argument("--min-ok", type=int, default=1)
    for name in ("memory", "weights"):
        p = sub.add_parser(name); p.add_argument("p1"); p.add_argument("p4"); p.add_argument("strategies", nargs="+")
    b = sub.add_parser("balance"); b.add_argument("report")
    b.add_argument("--above", nargs="*", default=[]); b.add_argument("--below", nargs="*", default=[])
    t = sub.add_parser("trace"); t.add_argument("trace"); t.add_argument("--ranks", type=int, required=True)
    a = ap.parse_args()
    if a.cmd == "model":
        cmd_model(a)
    elif a.cmd == "memory":
        ratio_check(a, "activations")
    elif a.cmd == "weights":
        ratio_check(a, "weights")
    elif a.cmd == "balance":
        cmd_balance(a)
    else:
        cmd_trace(a)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
