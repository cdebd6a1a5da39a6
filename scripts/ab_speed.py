#!/usr/bin/env python3
"""Times two cpbench binaries alternately on the same cases: is a change free of speed loss?

For each case the binaries run one after the other, ALTERNATIONS times (BASE, NEW, BASE, NEW, ...,
the order swapped on every other alternation so neither always runs second), each run writing a
report; a run's figure is its jobs' summed timing.step_ms.median. Per alternation the ratio
NEW/BASE is taken, and the case's result is the median of those ratios with their min..max
spread: a machine that gets busier or quieter during the benchmark moves both runs of an
alternation alike, which is why ratios are paired rather than medians compared. Beside the
step time (wall clock, what a user sees) each run's CPU time (user + system of every process it
started, from getrusage) is paired the same way: on a shared machine whose load changes from
second to second the wall-clock ratios spread widely, while CPU time counts only the work the
binary did (it still includes setup and the MPI ranks' polling, alike for both binaries).

Cases (issue 39's "no speed lost"): the attention sub-layer and the full block on one rank at
N = 4096, and a P = 4 sweep of every strategy. Usage:
  scripts/ab_speed.py BASE_BIN NEW_BIN [--alternations 7] [--out-dir DIR] [--np 4]
Exit 0; the verdict (median ratio within 5%) is printed, not enforced: timings are a benchmark's
business, never a test's.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile

CASES = [
    ("attention sub-layer, 1 rank, N=4096", 1,
     ["--model", "llama3-8b", "--heads", "4", "--kv-heads", "2", "--head-dim", "32", "--dim", "128", "--seq", "4096",
      "--strategies", "single", "--block", "attn"]),
    ("full block, 1 rank, N=4096", 1,
     ["--model", "llama3-8b", "--heads", "4", "--kv-heads", "2", "--head-dim", "32", "--dim", "128", "--ffn-dim", "448",
      "--seq", "4096", "--strategies", "single", "--block", "full"]),
    ("sweep of every strategy, P=4", 4, ["--model", "tiny", "--seq", "1024"]),
]


def run(binary, np_, args, out):
    cmd = [binary, "run", *args, "--warmup", "1", "--iters", "3", "--no-progress", "--out", out]
    if np_ > 1:
        cmd = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", str(np_), *cmd]
    env = dict(os.environ, OMPI_MCA_mpi_yield_when_idle="1")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    rep = json.load(open(out))
    return sum(r["timing"]["step_ms"]["median"] for r in rep["results"] if r["status"] == "ok"), cpu_s


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("base")
    ap.add_argument("new")
    ap.add_argument("--alternations", type=int, default=7)
    ap.add_argument("--out-dir", default=None)
    a = ap.parse_args()
    out_dir = a.out_dir or tempfile.mkdtemp(prefix="ab_speed_")
    os.makedirs(out_dir, exist_ok=True)
    print("| case | step NEW/BASE median | spread (min..max) | BASE / NEW step ms (medians) "
          "| CPU time NEW/BASE median | spread (min..max) | BASE / NEW CPU s (medians) | alternations |")
    print("|---|---|---|---|---|---|---|---|")
    for name, np_, args in CASES:
        step, cpu = {"base": [], "new": []}, {"base": [], "new": []}
        for i in range(a.alternations):
            order = [("base", a.base), ("new", a.new)]
            if i % 2:
                order.reverse()
            for tag, binary in order:
                ms, s = run(binary, np_, args, os.path.join(out_dir, f"{tag}_{i}.json"))
                step[tag].append(ms)
                cpu[tag].append(s)
        sr = [n / b for n, b in zip(step["new"], step["base"])]
        cr = [n / b for n, b in zip(cpu["new"], cpu["base"])]
        med = statistics.median
        print(f"| {name} | {med(sr):.3f} | {min(sr):.3f}..{max(sr):.3f} | {med(step['base']):.1f} / {med(step['new']):.1f} "
              f"| {med(cr):.3f} | {min(cr):.3f}..{max(cr):.3f} | {med(cpu['base']):.2f} / {med(cpu['new']):.2f} "
              f"| {a.alternations} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
