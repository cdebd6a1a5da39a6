#!/usr/bin/env python3
"""Strong scaling from one cpbench report: speed-up of each strategy's median step time over
`single` (which computes the whole layer on every rank), per sequence length.

usage: strong_scaling.py REPORT [--target 1.7] [--strategies ulysses,ring-zigzag,usp]
Prints a table with PASS/MISS against the target; exit 1 if a named strategy misses it.
Reproduce the issue's figure (P=2, one thread per rank, N=16384, causal):
  mpirun -np 2 build/bench/cpbench run --threads 1 --seq 16384 --causal \
      --strategies single,ulysses,ring-zigzag,usp --warmup 1 --iters 3 --out out/strong_scaling.json
  scripts/strong_scaling.py out/strong_scaling.json
"""
import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("report")
    ap.add_argument("--target", type=float, default=1.7)
    ap.add_argument("--strategies", default="ulysses,ring-zigzag,usp",
                    help="comma-separated strategy names that must reach the target")
    a = ap.parse_args()
    rep = json.load(open(a.report))
    must = set(a.strategies.split(","))
    missed = 0
    P = rep["config"]["world_size"]
    print(f"| strategy | seq | P | step ms (median) | single ms | speed-up | target | |")
    print(f"|---|---|---|---|---|---|---|---|")
    for seq in rep["config"]["seqs"]:
        res = [r for r in rep["results"] if r["seq"] == seq and r["status"] == "ok"]
        base = next((r for r in res if r["strategy"] == "single"), None)
        if base is None:
            print(f"seq {seq}: no single result", file=sys.stderr)
            return 2
        b = base["timing"]["step_ms"]["median"]
        for r in res:
            if r["strategy"] == "single":
                continue
            m = r["timing"]["step_ms"]["median"]
            sp = b / m
            named = r["strategy"] in must
            verdict = ("PASS" if sp >= a.target else "MISS") if named else ""
            missed += named and sp < a.target
            print(f"| {r['label']} | {seq} | {P} | {m:.1f} | {b:.1f} | {sp:.2f}x | {a.target if named else ''} | {verdict} |")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
