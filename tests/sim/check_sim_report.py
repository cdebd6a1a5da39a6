#!/usr/bin/env python3
"""Assertions on reports of simulated runs (tests/sim/CMakeLists.txt).

  check_sim_report.py simulated REPORT PLATFORM.json [--same-times OTHER.json]
      context.simulated is the platform's (name, peaks, efficiency tables, memory bandwidth), the
      GPU is the simulated device, MFU uses the platform's peak, every ok result has positive
      simulated times; with --same-times, OTHER (the same run again) has identical step times.
  check_sim_report.py env REPORT NAME=VALUE
      context.env records NAME=VALUE (the run used that setting).
Prints what failed and exits 1 on any failure."""
import json
import sys

failed = 0


def check(cond, msg):
    global failed
    if not cond:
        failed += 1
        print("FAIL:", msg)


def cmd_simulated(args):
    rep = json.load(open(args[0]))
    plat = json.load(open(args[1]))
    ctx = rep["context"]
    sim = ctx.get("simulated")
    check(sim is not None, "context.simulated is missing")
    if sim is None:
        return
    check(sim["platform"] == plat["name"], "platform %r, expected %r" % (sim["platform"], plat["name"]))
    check(sim["peak_tflops"] == plat["peak_tflops"], "peak_tflops %r != %r" % (sim["peak_tflops"], plat["peak_tflops"]))
    for cls, pts in plat["efficiency"].items():
        check(sim["efficiencies"][cls] == [[float(a), float(b)] for a, b in pts],
              "efficiencies.%s %r != platform %r" % (cls, sim["efficiencies"][cls], pts))
    check(abs(sim["memory_bw"] - plat["memory_bw_gbs"] * 1e9) < 1, "memory_bw %r" % sim["memory_bw"])
    check(any("simulated" in g and plat["device"] in g for g in ctx["gpus"]), "gpus %r" % ctx["gpus"])
    dtype = rep["config"].get("dtype", "fp32")
    oks = [r for r in rep["results"] if r["status"] == "ok"]
    check(len(oks) > 0, "no ok result")
    for r in oks:
        check(r["peak"]["tflops"] == plat["peak_tflops"][dtype],
              "%s: peak %r, expected the platform's %s peak" % (r["label"], r["peak"], dtype))
        check(r["timing"]["step_ms"]["median"] > 0, "%s: step time %r" % (r["label"], r["timing"]["step_ms"]))
    if len(args) > 2 and args[2] == "--same-times":
        other = {r["label"]: r for r in json.load(open(args[3]))["results"] if r["status"] == "ok"}
        for r in oks:
            a = r["timing"]["step_ms"]["median"]
            b = other.get(r["label"], {}).get("timing", {}).get("step_ms", {}).get("median")
            check(b is not None and abs(a - b) <= 1e-9 * abs(a), "%s: step %r then %r" % (r["label"], a, b))
    print("%d ok results checked against %s" % (len(oks), plat["name"]))


def cmd_env(args):
    rep = json.load(open(args[0]))
    name, value = args[1].split("=", 1)
    got = rep["context"]["env"].get(name)
    check(got == value, "context.env.%s = %r, expected %r" % (name, got, value))


def main():
    {"simulated": cmd_simulated, "env": cmd_env}[sys.argv[1]](sys.argv[2:])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
