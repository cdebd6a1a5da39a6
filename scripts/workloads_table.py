#!/usr/bin/env python3
"""docs/WORKLOADS.md's tables: what each packed-document workload does to balance and traffic.

  workloads_table.py run --out-dir DIR [--np 4 8] [--seq 4096]   runs cpbench per workload and P
  workloads_table.py table REPORT.json [...]                      prints the Markdown from reports
  workloads_table.py run ... --balance none doc-zigzag greedy dynamic   also runs each --balance scheme
  workloads_table.py table --schemes REPORT.json [...]            workload x scheme x strategy: flops_imbalance,
                                                                  step time relative to none, bytes, and
                                                                  the cases where balancing loses

  workloads_table.py run ... --platform dgx-h100 --np 64 --model llama3-8b --seq 131072
                                                                  the same on a simulated cluster
                                                                  (scripts/simulate.sh; bf16)
  workloads_table.py run ... --workloads outlier rl               only these workloads
  workloads_table.py repeats DIR1 DIR2 DIR3 ...                   the step-time benchmark: per workload, P,
                                                                  strategy and scheme, the median over the
                                                                  directories (repeated `run`s) of step vs
                                                                  none, with the runs' min and max

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

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cpmodel  # noqa: E402  (DESIGN's byte model, scripts/cpmodel.py)

ROOT = Path(__file__).resolve().parent.parent
RING = ("ring", "ring-zigzag", "ring-striped", "double-ring")
SCHEMES = ("none", "doc-zigzag", "greedy", "dynamic")  # --balance (DESIGN "Balancing packed documents")


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
        for r in rep["results"]:
            if r["status"] != "ok":
                continue
            b = r["comm"]["fwd"]["bytes_sent"] + r["comm"]["bwd"]["bytes_sent"]
            hops = "-"
            if r["strategy"] in RING:  # forward bytes over one hop's K,V block
                block = cpmodel.ring_kv_bytes(cpmodel.tokens_per_rank(c["batch"], seq, P), c["kv_heads"] * c["head_dim"],
                                              1, cpmodel.elem_bytes(c["dtype"]))[0]
                hops = str(r["comm"]["fwd"]["bytes_sent"] // block) + f" of {P - 1}"
            out.append(f"| {r['label']} | {r['balance']['flops_imbalance']:.3f} | {hops} | {b / 2**20:.2f} |")
    return "\n".join(out) + "\n"


def scheme_of(rep):
    """The --balance scheme of a report (config.balance); `none` where the flag is absent."""
    return rep["config"].get("balance") or "none"


def schemes_table(paths):
    """Every workload x --balance scheme x strategy, per P and N: flops_imbalance, the median step
    time relative to the same strategy under `none` (same P, N and pack), and bytes per rank per
    step; then the cases where balancing loses (a scheme with a higher flops_imbalance or a slower
    step than `none`). A scheme without a `none` report beside it shows '-' for the ratio."""
    groups = {}
    for p in paths:
        rep = json.load(open(p))
        c = rep["config"]
        docs = c["mask"]["docs"] or {}
        sim = (rep.get("context") or {}).get("simulated")
        where = f", simulated on {sim['platform']}" if sim else ""
        key = (docs.get("spec", "one document"), c["world_size"], c["seqs"][0], where)
        for r in rep["results"]:
            if r["status"] == "ok":
                groups.setdefault(key, {})[(r["label"], scheme_of(rep))] = r
    out, losses = [], []
    for (spec, P, seq, where), rows in sorted(groups.items()):
        out.append(f"\n### {spec} — P = {P}, N = {seq}{where}, by --balance scheme\n")
        out.append("| strategy | scheme | flops_imbalance | step vs none | MiB per rank per step (fwd + bwd) |")
        out.append("|---|---|---|---|---|")
        order = {s: i for i, s in enumerate(SCHEMES)}
        for (label, scheme), r in sorted(rows.items(), key=lambda kv: (kv[0][0], order.get(kv[0][1], 99), kv[0][1])):
            base = rows.get((label, "none"))
            imb = r["balance"]["flops_imbalance"]
            step = r["timing"]["step_ms"]["median"]
            rel = step / base["timing"]["step_ms"]["median"] if base and base["timing"]["step_ms"]["median"] > 0 else None
            b = r["comm"]["fwd"]["bytes_sent"] + r["comm"]["bwd"]["bytes_sent"]
            out.append(f"| {label} | {scheme} | {imb:.3f} | {'-' if rel is None else f'{rel:.2f}x'} | {b / 2**20:.2f} |")
            if scheme != "none" and base:
                why = []
                if imb > base["balance"]["flops_imbalance"] + 1e-9:
                    why.append(f"flops_imbalance {imb:.3f} > none's {base['balance']['flops_imbalance']:.3f}")
                if rel is not None and rel > 1:
                    why.append(f"step {rel:.2f}x none's")
                if why:
                    losses.append(f"- {spec}, P = {P}{where}, {label}, {scheme}: " + "; ".join(why))
    out.append("\nWhere balancing loses:\n")
    out.extend(losses or ["- none of these cases"])
    return "\n".join(out) + "\n"


def repeats_table(dirs):
    """Step time against the same strategy under `none`, one ratio per repeated `run` directory
    (none and the scheme from that directory), and their median: the benchmark behind
    docs/PERFORMANCE.md's balancing figures (a ratio from one pair of runs is noise on a shared
    machine). Rows whose every repeat is below 1 are gains."""
    ratios = {}
    for d in dirs:
        steps = {}
        for p in sorted(Path(d).glob("*.json")):
            rep = json.load(open(p))
            c = rep["config"]
            key = ((c["mask"]["docs"] or {}).get("spec", "one document"), c["world_size"])
            for r in rep["results"]:
                if r["status"] == "ok":
                    steps[key + (r["label"], scheme_of(rep))] = r["timing"]["step_ms"]["median"]
        for (spec, P, label, scheme), step in steps.items():
            base = steps.get((spec, P, label, "none"))
            if scheme != "none" and base:
                ratios.setdefault((spec, P, label, scheme), []).append(step / base)
    out = [f"| workload | P | strategy | scheme | step vs none, median of {len(dirs)} | min - max |",
           "|---|---|---|---|---|---|"]
    order = {s: i for i, s in enumerate(SCHEMES)}
    for (spec, P, label, scheme), v in sorted(ratios.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2], order.get(kv[0][3], 99))):
        v = sorted(v)
        med = v[len(v) // 2] if len(v) % 2 else 0.5 * (v[len(v) // 2 - 1] + v[len(v) // 2])
        gain = " (gain)" if v[-1] < 1 else ""
        out.append(f"| {spec} | {P} | {label} | {scheme} | {med:.2f}x{gain} | {v[0]:.2f} - {v[-1]:.2f} |")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out-dir", required=True)
    r.add_argument("--np", type=int, nargs="+", default=[4, 8])
    r.add_argument("--seq", type=int, default=4096)
    r.add_argument("--binary", default=str(ROOT / "build" / "bench" / "cpbench"))
    r.add_argument("--balance", nargs="+", default=["none"], choices=SCHEMES,
                   help="--balance schemes to run (each but none passes --balance S); the scheme table follows")
    r.add_argument("--iters", type=int, default=1, help="timed iterations (step-time ratios want several)")
    r.add_argument("--workloads", nargs="+", help="workload names (default: every one of configs/workloads)")
    r.add_argument("--platform", help="simulate on this platform (scripts/simulate.sh, cpbench-sim; bf16)")
    r.add_argument("--model", default="tiny", help="model preset (default tiny, run with 8 heads and 8 KV heads)")
    rp = sub.add_parser("repeats")
    rp.add_argument("dirs", nargs="+", help="output directories of repeated `run --balance ...`")
    t = sub.add_parser("table")
    t.add_argument("reports", nargs="+")
    t.add_argument("--schemes", action="store_true", help="the workload x scheme x strategy table instead")
    a = ap.parse_args()
    if a.cmd == "repeats":
        print(repeats_table(a.dirs), end="")
        return 0
    if a.cmd == "table":
        print(schemes_table(a.reports) if a.schemes else table(a.reports), end="")
        return 0
    os.makedirs(a.out_dir, exist_ok=True)
    env = dict(os.environ, OMPI_MCA_mpi_yield_when_idle="1")
    paths, none_paths = [], []
    known = sorted(p.stem for p in (ROOT / "configs" / "workloads").glob("*.json"))
    for w in a.workloads or []:
        if w not in known:
            ap.error(f"--workloads {w}: not in configs/workloads ({', '.join(known)})")
    for name in a.workloads or known:
        for P in a.np:
            for scheme in a.balance:
                out = Path(a.out_dir) / (f"{name}_p{P}.json" if scheme == "none" else f"{name}_p{P}_{scheme}.json")
                if a.platform:  # simulated: the platform's peak and ranks per node come from simulate.sh
                    launch = [str(ROOT / "scripts" / "simulate.sh"), "--platform", a.platform, "-np", str(P), "--"]
                    shape = ["--model", a.model, "--dtype", "bf16"]
                else:
                    launch = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", str(P), a.binary]
                    shape = ["--model", a.model, "--threads", "1", "--peak-tflops", "1"] + \
                        (["--heads", "8", "--kv-heads", "8"] if a.model == "tiny" else [])
                # Simulated: no ulysses (a preset's heads rarely shard over 64 ranks) and the double
                # ring's inner rings are the platform's nodes (the default); the CPU: w = 2. usp
                # keeps a ring level to balance: U = 2 on the CPU, 8 (a node) simulated.
                strategies = ("" if a.platform else "ulysses,") + "ring,ring-zigzag,ring-striped,allgather-kv,usp,double-ring"
                cmd = launch + ["run"] + shape + [
                       "--seq", str(a.seq), "--docs", name, "--strategies", strategies,
                       "--ulysses", "8" if a.platform else "2"] + \
                    ([] if a.platform else ["--inner-ring", "2"]) + [
                       "--warmup", "0" if a.iters == 1 else "1",
                       "--iters", str(a.iters), "--no-progress", "--out", str(out)]
                if scheme != "none":  # a scheme replaces the ring strategies' layout; the others refuse it
                    cmd[cmd.index("--docs"):cmd.index("--docs")] = ["--balance", scheme]
                    cmd[cmd.index("--strategies") + 1] = "ring,usp,double-ring"
                if scheme == "dynamic":  # ring only: one ring per document CP group, no mesh to give
                    cmd[cmd.index("--strategies") + 1] = "ring"
                    for flag in ("--ulysses", "--inner-ring"):
                        if flag in cmd:
                            del cmd[cmd.index(flag):cmd.index(flag) + 2]
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
                paths.append(out)
                if scheme == "none":
                    none_paths.append(out)
    print(table(none_paths), end="")
    if a.balance != ["none"]:
        print(schemes_table(paths), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
