#!/usr/bin/env python3
"""The README's serving table: pass-Q against pass-KV prefill as the KV-cache miss rate falls.

  serving_table.py run --out-dir DIR [--np 4] [--seq 4096] [--miss 1 0.5 0.25 ...] [--platform NAME]
  serving_table.py table REPORT.json [...]
  serving_table.py decode --out-dir DIR --cached C [--np 1 2 4] [--steps 8] [--platform NAME]
  serving_table.py decode-table REPORT.json [...]
  serving_table.py decode-table --mesh REPORT.json [...]   per P: the fastest mesh, pure CP, pure TP

`run` calls cpbench (`mpirun -np P cpbench run`, or with --platform `scripts/simulate.sh
--platform NAME -np P`) once per miss rate and ring pass: `--pass prefill --cached C --ring-pass
kv|q|q-a2a` (--passes; q-a2a is Meta's pass-Q, whose partials return in one all-to-all) on one ring strategy (default ring-zigzag), C chosen so that the N - C new tokens are the
miss rate's share of N rounded to a multiple of 2P (ring-zigzag's rule). Then it prints the table.

`table` reads such reports (results[].inference and comm) and prints, per (platform, P, N), one
row per miss rate: the forward bytes per rank of each pass (measured; the reports also carry
matches_model), the TTFT of each pass (median step), which pass is faster, and under the table
the crossover: the largest miss rate at which pass-Q is faster, and the one at which it sends
fewer bytes. On the CPU the times are of shared cores (docs/PERFORMANCE.md says how to read
them); a simulated platform's are the platform model's.

`decode` runs `--pass decode --cached C --decode-steps S` once per CP degree P (P = 1: single, the
whole cache on one rank; P > 1: one ring strategy, default ring-zigzag) and `decode-table` prints,
per (platform, C), one row per P: the KV cache per rank, the bytes all-gathered per rank per
decode step, and TPOT (the step median / S, results[].inference.tpot_ms) with its speed-up over
the smallest P measured.
"""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MiB = float(1 << 20)


def cached_for(N, P, miss):
    """C such that N - C, the new tokens, is miss * N rounded to a multiple of 2P (at least 2P)."""
    unit = 2 * P
    new = max(unit, round(miss * N / unit) * unit)
    return N - min(new, N)


def rows_of(paths):
    """{(where, P, N): {C: {pass: (miss_rate, fwd_bytes, ttft_ms, matches_model)}}} and the strategy per key."""
    groups, strategies = {}, {}
    for p in paths:
        rep = json.load(open(p))
        c = rep["config"]
        sim = rep["context"].get("simulated")
        where = sim.get("platform", "simulated") if isinstance(sim, dict) else "cpu"
        for r in rep["results"]:
            if r["status"] != "ok" or r["strategy"] == "single" or "inference" not in r:
                continue
            inf = r["inference"]
            if inf.get("pass", "prefill") != "prefill":
                continue
            key = (where, c["world_size"], r["seq"])
            strategies.setdefault(key, set()).add(r["label"])
            groups.setdefault(key, {}).setdefault(inf["cached"], {})[inf["ring_pass"]] = (
                inf["miss_rate"], r["comm"]["fwd"]["bytes_sent"], inf["ttft_ms"], r["comm"]["fwd"]["matches_model"])
    return groups, strategies


def crossover(rows):
    """(largest miss rate where pass-Q is faster, largest where it sends fewer bytes); None when never."""
    faster = [m for m, kv, q, _ in rows if q[2] < kv[2]]
    fewer = [m for m, kv, q, _ in rows if q[1] < kv[1]]
    return (max(faster) if faster else None, max(fewer) if fewer else None)


def table(paths):
    groups, strategies = rows_of(paths)
    out = []
    for key in sorted(groups):
        where, P, N = key
        rows = []
        for C, passes in groups[key].items():
            if "kv" in passes and "q" in passes:
                rows.append((passes["kv"][0], passes["kv"], passes["q"], C))
        rows.sort(key=lambda t: -t[0])
        if not rows:
            continue
        # Meta's pass-Q (q-a2a) gets its own columns when every row has it.
        a2a = {C: groups[key][C]["q-a2a"] for _, _, _, C in rows if "q-a2a" in groups[key][C]}
        both = len(a2a) == len(rows)
        out.append(f"\n### {', '.join(sorted(strategies[key]))} — {where}, P = {P}, N = {N}\n")
        if both:
            out.append("| miss rate | cached C | pass-KV MiB/rank | pass-Q MiB/rank | pass-Q a2a MiB/rank | pass-KV TTFT ms "
                       "| pass-Q TTFT ms | pass-Q a2a TTFT ms | fastest |")
            out.append("|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        else:
            out.append("| miss rate | cached C | pass-KV MiB/rank | pass-Q MiB/rank | pass-KV TTFT ms | pass-Q TTFT ms | faster |")
            out.append("|---:|---:|---:|---:|---:|---:|---|")
        for m, kv, q, C in rows:
            if both:
                qa = a2a[C]
                flag = "" if kv[3] and q[3] and qa[3] else " (bytes off the model!)"
                fastest = min((kv[2], "pass-KV"), (q[2], "pass-Q"), (qa[2], "pass-Q a2a"))[1]
                out.append(f"| {m:.4g} | {C} | {kv[1] / MiB:.2f} | {q[1] / MiB:.2f} | {qa[1] / MiB:.2f} | {kv[2]:.3f} | "
                           f"{q[2]:.3f} | {qa[2]:.3f} | {fastest}{flag} |")
                continue
            flag = "" if kv[3] and q[3] else " (bytes off the model!)"
            out.append(f"| {m:.4g} | {C} | {kv[1] / MiB:.2f} | {q[1] / MiB:.2f} | {kv[2]:.3f} | {q[2]:.3f} | "
                       f"{'pass-Q' if q[2] < kv[2] else 'pass-KV'}{flag} |")
        t, b = crossover(rows)
        out.append("")
        out.append((f"pass-Q is faster up to miss rate {t:.4g}" if t is not None else "pass-Q is faster at no miss rate measured")
                   + (f"; it sends fewer bytes up to miss rate {b:.4g}." if b is not None else "; it sends fewer bytes at none."))
    return "\n".join(out)


def decode_results(paths):
    """(where, P, result, its inference block) for every ok decode result of the reports; where is
    the simulated platform's name, or "cpu"."""
    for p in paths:
        rep = json.load(open(p))
        P = rep["config"]["world_size"]
        sim = rep["context"].get("simulated")
        where = sim.get("platform", "simulated") if isinstance(sim, dict) else "cpu"
        for r in rep["results"]:
            inf = r.get("inference")
            if r["status"] == "ok" and inf and inf.get("pass") == "decode":
                yield where, P, r, inf


def decode_rows(paths):
    """{(where, C): {(P, label): (kv_cache_bytes, bytes per step, tpot_ms, matches_model)}} from decode
    reports: the single result at P = 1, else every non-single one."""
    groups = {}
    for where, P, r, inf in decode_results(paths):
        if (r["strategy"] == "single") != (P == 1):
            continue
        per_step = r["comm"]["fwd"]["bytes_sent"] / inf["decode_steps"]
        groups.setdefault((where, inf["cached"]), {})[(P, r["label"])] = (
            inf["kv_cache_bytes"], per_step, inf["tpot_ms"], r["comm"]["fwd"]["matches_model"])
    return groups


def decode_table(paths):
    out = []
    groups = decode_rows(paths)
    for (where, C) in sorted(groups):
        rows = groups[(where, C)]
        base = rows[min(rows)][2]  # the smallest P's TPOT
        out.append(f"\n### decode — {where}, cached C = {C}\n")
        out.append("| P | strategy | KV cache MiB/rank | all-gather KiB/rank/step | TPOT ms | speed-up |")
        out.append("|---:|---|---:|---:|---:|---:|")
        for P, label in sorted(rows):
            cache, step, tpot, ok = rows[(P, label)]
            flag = "" if ok else " (bytes off the model!)"
            out.append(f"| {P} | {label} | {cache / MiB:.2f} | {step / 1024:.2f} | {tpot:.4f} | "
                       f"{base / tpot:.2f}x{flag} |")
    return "\n".join(out)


def decode_mesh_table(paths):
    """Per (platform, C, P): every mesh's decode ranked by TPOT, summarised as the fastest, the
    pure CP one (ring-zigzag: the cache over all P), the pure TP one (megatron-sp: heads over all
    P), and the longest cache the fastest fits (inference.max_cached_tokens; '-' without a
    capacity). For --block full reports with usp --mesh all, ring-zigzag and megatron-sp."""
    groups = {}
    for where, P, r, inf in decode_results(paths):
        groups.setdefault((where, inf["cached"]), {}).setdefault(P, {})[r["label"]] = (
            inf["tpot_ms"], inf.get("max_cached_tokens"), inf["kv_cache_bytes"])
    out = []
    fmt = lambda x: "-" if x is None else f"{x:.4f}"
    for (where, C) in sorted(groups):
        out.append(f"\n### decode by mesh — {where}, cached C = {C}\n")
        out.append("| P | fastest mesh | TPOT ms | pure CP (ring-zigzag) TPOT ms | pure TP (megatron-sp) TPOT ms | "
                   "fastest's KV MiB/rank | fastest's longest C |")
        out.append("|---:|---|---:|---:|---:|---:|---:|")
        for P, rows in sorted(groups[(where, C)].items()):
            best = min(rows, key=lambda k: (rows[k][0], k))
            tpot, fit, cache = rows[best]
            cp, tp = rows.get("ring-zigzag"), rows.get("megatron-sp")
            out.append(f"| {P} | {best} | {tpot:.4f} | {fmt(cp and cp[0])} | {fmt(tp and tp[0])} | "
                       f"{cache / MiB:.1f} | {'-' if fit is None else fit} |")
    return "\n".join(out)


def helix_table(paths):
    """Per (platform, C, P): the fastest Helix decode (--mlp-tp P: labels ending '+mlpP'), the fastest
    mesh without it (usp --mesh all, the ring family: the MLP on the attention's tp level) and
    megatron-sp (pure TP), each with TPOT and the cache's tokens per rank (C over its ring level R)."""
    groups = {}
    for where, P, r, inf in decode_results(paths):
        groups.setdefault((where, inf["cached"], P), {})[r["label"]] = (
            inf["tpot_ms"], inf["cached"] // r["mesh"]["ring"], r["comm"]["fwd"]["bytes_sent"] / inf["decode_steps"],
            r["comm"]["fwd"]["matches_model"])
    out = ["| cache C | P | Helix (fastest) | TPOT ms | cache tokens/rank | fastest without Helix | TPOT ms | "
           "cache tokens/rank | megatron-sp TPOT ms | cache tokens/rank |",
           "|---:|---:|---|---:|---:|---|---:|---:|---:|---:|"]
    for (where, C, P) in sorted(groups):
        rows = groups[(where, C, P)]
        helix = {k: v for k, v in rows.items() if k.endswith(f"+mlp{P}")}
        plain = {k: v for k, v in rows.items() if "+mlp" not in k and k != "megatron-sp"}
        cell = lambda d: (lambda k: (k, d[k]))(min(d, key=lambda k: (d[k][0], k))) if d else ("-", None)
        fmt = lambda v: ("-", "-") if v is None else (f"{v[0]:.3f}" + ("" if v[3] else " (bytes off the model!)"), str(v[1]))
        (hk, hv), (pk, pv), tp = cell(helix), cell(plain), rows.get("megatron-sp")
        out.append(f"| {C} | {P} | {hk} | {' | '.join(fmt(hv))} | {pk} | {' | '.join(fmt(pv))} | {' | '.join(fmt(tp))} |")
    return "\n".join(out)


def call(a, P, args):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    if a.platform:
        cmd = [str(ROOT / "scripts/simulate.sh"), "--platform", a.platform, "-np", str(P), "--"] + args
    else:
        cmd = ["mpirun", "--oversubscribe", "-np", str(P), a.exe] + args
    print("+", " ".join(cmd), file=sys.stderr)
    if subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL).returncode != 0:
        print(f"serving_table: {' '.join(cmd)} failed", file=sys.stderr)
        return False
    return True


def decode(a):
    out = Path(a.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for P in a.np:
        helix = a.helix and P > 1  # Helix: the MLP (and w_o) over all P ranks (--mlp-tp P)
        path = out / f"{a.platform or 'cpu'}_decode_p{P}_c{a.cached}{'_helix' if helix else ''}.json"
        args = ["run", "--model", a.model, "--pass", "decode", "--cached", str(a.cached), "--decode-steps",
                str(a.steps), "--strategies", "single" if P == 1 else a.strategy, "--warmup", str(a.warmup),
                "--iters", str(a.iters), "--no-progress", "--out", str(path)] + \
            (["--mlp-tp", str(P)] if helix else []) + a.extra
        if not call(a, P, args):
            return 1
        paths.append(str(path))
    print(decode_table(paths))
    return 0


def run(a):
    out = Path(a.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for miss in a.miss:
        C = cached_for(a.seq, a.np, miss)
        for ring_pass in a.passes:
            path = out / f"{a.platform or 'cpu'}_p{a.np}_n{a.seq}_c{C}_{ring_pass}.json"
            args = ["run", "--model", a.model, "--seq", str(a.seq), "--pass", "prefill", "--ring-pass", ring_pass,
                    "--strategies", a.strategy, "--warmup", str(a.warmup), "--iters", str(a.iters),
                    "--no-progress", "--out", str(path)] + (["--cached", str(C)] if C else []) + a.extra
            if not call(a, a.np, args):
                return 1
            paths.append(str(path))
    print(table(paths))
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run cpbench per miss rate and pass, then print the table")
    r.add_argument("--out-dir", required=True)
    r.add_argument("--np", type=int, default=4)
    r.add_argument("--seq", type=int, default=4096)
    r.add_argument("--model", default="tiny")
    r.add_argument("--strategy", default="ring-zigzag")
    r.add_argument("--passes", nargs="+", default=["kv", "q", "q-a2a"], choices=["kv", "q", "q-a2a"],
                   help="the ring passes to run (the table needs kv and q; q-a2a adds its columns)")
    r.add_argument("--miss", type=float, nargs="+", default=[1.0, 0.5, 0.25, 0.125, 0.0625, 0.03125])
    r.add_argument("--platform", help="simulate on configs/platforms/NAME (scripts/simulate.sh) instead of the CPU")
    r.add_argument("--warmup", type=int, default=1)
    r.add_argument("--iters", type=int, default=5)
    r.add_argument("--exe", default=str(ROOT / os.environ.get("BUILD_DIR", "build") / "bench/cpbench"))
    r.add_argument("--extra", nargs=argparse.REMAINDER, default=[], help="more cpbench flags (last)")
    t = sub.add_parser("table", help="print the table from reports")
    t.add_argument("reports", nargs="+")
    dc = sub.add_parser("decode", help="run --pass decode per CP degree, then print TPOT against P")
    dc.add_argument("--out-dir", required=True)
    dc.add_argument("--cached", type=int, required=True)
    dc.add_argument("--np", type=int, nargs="+", default=[1, 2, 4])
    dc.add_argument("--steps", type=int, default=8)
    dc.add_argument("--model", default="tiny")
    dc.add_argument("--strategy", default="ring-zigzag")
    dc.add_argument("--platform", help="simulate on configs/platforms/NAME (scripts/simulate.sh) instead of the CPU")
    dc.add_argument("--warmup", type=int, default=1)
    dc.add_argument("--iters", type=int, default=5)
    dc.add_argument("--exe", default=str(ROOT / os.environ.get("BUILD_DIR", "build") / "bench/cpbench"))
    dc.add_argument("--helix", action="store_true", help="Helix decode: --mlp-tp P at each P > 1 (needs --block full)")
    dc.add_argument("--extra", nargs=argparse.REMAINDER, default=[], help="more cpbench flags (last)")
    dt = sub.add_parser("decode-table", help="print the TPOT table from decode reports")
    dt.add_argument("reports", nargs="+")
    dt.add_argument("--mesh", action="store_true",
                    help="per P the fastest mesh against pure CP (ring-zigzag) and pure TP (megatron-sp)")
    dt.add_argument("--helix", action="store_true",
                    help="per P the fastest Helix decode against the fastest mesh without it and megatron-sp")
    a = ap.parse_args(argv)
    if a.cmd == "run":
        for m in a.miss:
            if not 0 < m <= 1:
                ap.error(f"--miss takes rates in (0, 1], got {m}")
        return run(a)
    if a.cmd == "decode":
        return decode(a)
    if a.cmd == "decode-table":
        print(helix_table(a.reports) if a.helix else decode_mesh_table(a.reports) if a.mesh else decode_table(a.reports))
        return 0
    print(table(a.reports))
    return 0


if __name__ == "__main__":
    sys.exit(main())
