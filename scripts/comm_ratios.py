#!/usr/bin/env python3
"""Comm-layer / raw-MPI ratios from the communication micro-benchmarks (bench/micro/micro_comm.cpp).

Runs, on one node,
    mpirun -np 2 --oversubscribe cpbench_micro --benchmark_filter=Comm --benchmark_format=json
           --benchmark_repetitions=R --benchmark_report_aggregates_only=true
or reads such JSON (--json FILE), and prints for each size the raw-MPI time, the comm-layer time
and their ratio raw_time / layer_time (= layer bandwidth / raw bandwidth; 1.0 = no overhead).
Sizes of at least --min-mib MiB are judged PASS (ratio >= the threshold, 0.90 by default) or
MISS; smaller sizes are shown for information.

The ratio is the paired one the layer cases measure themselves (counter ratio_vs_raw: the raw
operation timed in the same iterations, interleaved, medians), which a shared machine's drift
does not bias. Without that counter (older JSON) it falls back to the separate raw case's time
("sep" in the output).

Pairs:
  alltoall layer     Communicator::all_to_all          vs MPI_Alltoall   (same packed buffers)
  alltoall ulysses   pack + all_to_all + unpack        vs MPI_Alltoall   (pre-packed buffers)
  ulysses vs alltoallw  the same                      vs MPI_Alltoallw doing the same layout change
                                                         with strided datatypes (no hand copies)
  ring shift layer   isend/irecv/wait (comm thread)    vs MPI_Sendrecv

Times are medians over repetitions when the JSON has aggregates, else the single run.
Exit status: 0, or 1 with --strict when any judged ratio is a MISS; 2 on a usage/parse error.

Examples:
  scripts/comm_ratios.py --exe build/bench/micro/cpbench_micro
  scripts/comm_ratios.py --json micro_comm.json --threshold 0.9
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

PAIRS = [
    ("alltoall layer", "AlltoallLayer", "AlltoallRaw"),
    ("alltoall ulysses", "AlltoallUlysses", "AlltoallRaw"),
    ("ulysses vs alltoallw", "AlltoallUlyssesW", "AlltoallRaw"),
    ("ring shift layer", "RingShiftLayer", "RingShiftRaw"),
]
NAME_RE = re.compile(r"^BM_Comm(?P<case>[A-Za-z]+)/MiB:(?P<mib>\d+)")


def find_exe():
    root = Path(__file__).resolve().parent.parent
    for cand in ("build/bench/micro/cpbench_micro", "build-release/bench/micro/cpbench_micro"):
        p = root / cand
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
    found = shutil.which("cpbench_micro")
    return found


def first_json_object(text):
    """The first JSON object in `text` (other ranks or MPI may print around it)."""
    dec = json.JSONDecoder()
    for m in re.finditer(r"^\{", text, re.M):
        try:
            obj, _ = dec.raw_decode(text[m.start():])
            if isinstance(obj, dict) and "benchmarks" in obj:
                return obj
        except json.JSONDecodeError:
            continue
    raise ValueError("no Google Benchmark JSON object in the output")


def run_micro(args):
    exe = args.exe or find_exe()
    if not exe:
        raise SystemExit("comm_ratios: cpbench_micro not found; pass --exe or --json")
    cmd = [args.mpirun, "-np", str(args.np), "--oversubscribe"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    cmd += [exe, "--benchmark_filter=Comm", "--benchmark_format=json",
            f"--benchmark_repetitions={args.repetitions}", "--benchmark_report_aggregates_only=true"]
    print("running:", " ".join(cmd), file=sys.stderr)
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if out.returncode != 0:
        sys.stderr.write(out.stderr)
        raise SystemExit(f"comm_ratios: the benchmark run failed with exit status {out.returncode}")
    if args.save:
        Path(args.save).write_text(out.stdout)
    return first_json_object(out.stdout)


def results_by_case(doc):
    """{(case, mib): {"ms": time, "p50_ms": .., "raw_p50_ms": .., "ratio_vs_raw": ..}}.

    The median aggregate over repetitions when present, else the median of the plain runs."""
    plain, median = {}, {}
    for b in doc.get("benchmarks", []):
        name = b.get("run_name") or b.get("name", "")
        m = NAME_RE.match(name)
        if not m or b.get("error_occurred"):
            continue
        unit = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b.get("time_unit", "ns")]
        r = {"ms": float(b["real_time"]) * unit}  # manual time: max over ranks per iteration
        for k in ("p50_ms", "raw_p50_ms", "ratio_vs_raw"):
            if k in b:
                r[k] = float(b[k])
        key = (m.group("case"), int(m.group("mib")))
        if b.get("run_type") == "aggregate":
            if b.get("aggregate_name") == "median":
                median[key] = r
        else:
            plain.setdefault(key, []).append(r)
    out = {}
    for key, runs in plain.items():
        out[key] = {k: sorted(x[k] for x in runs if k in x)[len([x for x in runs if k in x]) // 2]
                    for k in runs[0]}
    out.update(median)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", help="read this Google Benchmark JSON instead of running")
    ap.add_argument("--exe", help="the cpbench_micro binary (default: build/bench/micro/cpbench_micro)")
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--repetitions", type=int, default=5)
    ap.add_argument("--save", help="also write the benchmark JSON here")
    ap.add_argument("--threshold", type=float, default=0.90)
    ap.add_argument("--min-mib", type=int, default=4, help="judge sizes of at least this many MiB")
    ap.add_argument("--strict", action="store_true", help="exit 1 when any judged ratio is a MISS")
    args = ap.parse_args(argv)

    try:
        doc = json.loads(Path(args.json).read_text()) if args.json else run_micro(args)
    except (OSError, ValueError) as e:
        print(f"comm_ratios: {e}", file=sys.stderr)
        return 2
    res = results_by_case(doc)
    if not res:
        print("comm_ratios: no BM_Comm* results in the JSON", file=sys.stderr)
        return 2

    misses = 0
    print(f"{'pair':<18} {'MiB':>4} {'raw ms':>9} {'layer ms':>9} {'ratio':>6}  verdict (>= {args.threshold:.2f})")
    for label, layer, raw in PAIRS:
        sizes = sorted({mib for (case, mib) in res if case in (layer, raw)})
        for mib in sizes:
            rl, rr = res.get((layer, mib)), res.get((raw, mib))
            how = ""
            if rl and "ratio_vs_raw" in rl and rl.get("p50_ms", 0) > 0:
                tl, tr, ratio = rl["p50_ms"], rl["raw_p50_ms"], rl["ratio_vs_raw"]
            elif rl and rr and rl["ms"] > 0:
                tl, tr, ratio, how = rl["ms"], rr["ms"], rr["ms"] / rl["ms"], " (sep)"
            else:
                print(f"{label:<18} {mib:>4} {'-':>9} {'-':>9} {'-':>6}  missing")
                continue
            if mib >= args.min_mib:
                verdict = "PASS" if ratio >= args.threshold else "MISS"
                misses += verdict == "MISS"
            else:
                verdict = "info"
            print(f"{label:<18} {mib:>4} {tr:>9.3f} {tl:>9.3f} {ratio:>6.2f}  {verdict}{how}")
    return 1 if (args.strict and misses) else 0


if __name__ == "__main__":
    sys.exit(main())
