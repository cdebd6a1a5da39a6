#!/usr/bin/env python3
"""docs/WORKLOADS.md's tables: what each packed-document workload does to balance and traffic.

  workloads_table.py run --out-dir DIR [--np 4 8] [--seq 4096]   runs cpbench per workload and P
  workloads_table.py table REPORT.json [...]                      prints the Markdown from reports

`run` calls `mpirun -np P cpbench run --docs WORKLOAD ...` for every workload of configs/workloads/
(causal, tiny preset, one timed iteration: the figures are deterministic: FLOP counts and bytes)
and then prints the table. Per report and strategy: flops_imbalance (max/mean of the exact
per-rank model FLOPs), the ring hops actually run (ring strategies: forward bytes over one hop's
K,V block, i.e. DESIGN's K_eff; for the double ring, inner rings of w = 2, the K,V blocks sent
over both levels), and the bytes per rank per step (forward + backward).
"""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RING = ("ring", "ring-zigzag", "ring-striped", "double-ring")


def table(paths):
    out = []
    for p in paths:
        rep = json.load(open(p))
        c = rep["config"]
        docs = c["mask"]["docs"] or {}
        P, seq = c["world_size"], c["seqs"][0]
        lens = docs.get("lens") or docs.get("lens_by_seq", {}).get(str(seq), [])
        out.append(f"\n### {docs.get('spec', 'one document')} — P = {P}, N = {seq}, "
                   f"{len(lens)} documents{' ' + str(lens) if len(lens) <= 12 else ''}\n")
        out.append("| strategy | flops_imbalance | ring hops (K_eff) | MiB per rank per step (fwd + bwd) |")
        out.append("|---|---|---|---|")
        elem = 4 if c["dtype"] == "fp32" else 2
        block = elem * c["batch"] * seq // P * 2 * c["kv_heads"] * c["head_dim"]
        for r in rep["results"]:
            if r["status"] != "ok":
                continue
            b = r["comm"]["fwd"]["bytes_sent"] + r["comm"]["bwd"]["bytes_sent"]
            hops = str(r["comm"]["fwd"]["bytes_sent"] // block) + f" of {P - 1}" if r["strategy"] in RING else "-"
            out.append(f"| {r['label']} | {r['balance']['flops_imbalance']:.3f} | {hops} | {b / 2**20:.2f} |")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out-dir", required=True)
    r.add_argument("--np", type=int, nargs="+", default=[4, 8])
    r.add_argument("--seq", type=int, default=4096)
    r.add_argument("--binary", default=str(ROOT / "build" / "bench" / "cpbench"))
    t = sub.add_parser("table")
    t.add_argument("reports", nargs="+")
    a = ap.parse_args()
    if a.cmd == "table":
        print(table(a.reports), end="")
        return 0
    os.makedirs(a.out_dir, exist_ok=True)
    env = dict(os.environ, OMPI_MCA_mpi_yield_when_idle="1")
    paths = []
    for name in sorted(p.stem for p in (ROOT / "configs" / "workloads").glob("*.json")):
        for P in a.np:
            out = Path(a.out_dir) / f"{name}_p{P}.json"
            cmd = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", str(P), a.binary, "run", "--model", "tiny",
                   "--seq", str(a.seq), "--heads", "8", "--kv-heads", "8", "--docs", name, "--threads", "1",
                   "--strategies", "ulysses,ring,ring-zigzag,ring-striped,allgather-kv,usp,double-ring",
                   "--inner-ring", "2", "--warmup", "0",
                   "--iters", "1", "--peak-tflops", "1", "--no-progress", "--out", str(out)]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
            paths.append(out)
    print(table(paths), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
