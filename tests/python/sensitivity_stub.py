#!/usr/bin/env python3
"""A stand-in for a simulation, for tests of plan.py --sensitivity (test_sensitivity.py): reads a
platform JSON and writes a synthetic simulated report whose step times are simple functions of
three of its inputs, so that a test knows which perturbation changes which ranking:

  ring        10 ms x 45 / network.inter.bw_gbs           (the rate across nodes)
  ulysses     5.25 ms + 5.25 ms x 2900 / memory_bw_gbs     (memory bandwidth, a little)
  usp[u2xr2]  12 ms x (1 + compute_slowdown) / 1.189       (the overlap interference)

each x (N / 1024)^1.5, with the band {0.99, 1.01}. Nothing else of the platform matters.

  sensitivity_stub.py PLATFORM.json OUT.json [--seqs 1024,2048]
"""
import argparse
import json
import sys

import make_synthetic_report as synth

BAND = {"lo": 0.99, "hi": 1.01}


def step_ms(plat):
    """label -> step time at N = 1024 on this platform."""
    return {"ring": 10.0 * 45 / plat["network"]["inter"]["bw_gbs"],
            "ulysses": 5.25 + 5.25 * 2900 / plat["memory_bw_gbs"],
            "usp[u2xr2]": 12.0 * (1 + plat["overlap_interference"]["compute_slowdown"]) / 1.189}


def report(platform_file, seqs):
    with open(platform_file, encoding="utf-8") as f:
        plat = json.load(f)
    rep = synth.make_report(strategies=["ring", "ulysses", "usp[u2xr2]"], seqs=seqs, step_ms=step_ms(plat), iters=1)
    rep["context"]["simulated"] = {"platform": plat["name"], "platform_file": platform_file,
                                   "hbm_bytes": plat["hbm_gib"] * 2**30}
    rep["context"]["argv"] = ["cpbench-sim", "run", "--backend", "sim", "--seq", ",".join(map(str, seqs))]
    for r in rep["results"]:
        r["timing"]["step_ms"]["band"] = dict(BAND)
    return rep


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("platform")
    ap.add_argument("out")
    ap.add_argument("--seqs", default="1024,2048")
    a = ap.parse_args()
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(report(a.platform, [int(s) for s in a.seqs.split(",")]), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
