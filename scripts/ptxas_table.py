#!/usr/bin/env python3
"""Tabulates `nvcc -Xptxas -v` output: one Markdown row per kernel and architecture with its
registers, spill stores/loads, stack frame and static shared memory (dynamic shared memory, which
the attention kernels size at launch, is not in ptxas's report: see docs/GPU.md).

    scripts/ptxas_table.py LOG [LOG...]     (the compiler output of scripts/build_cuda_only.sh)

Exit status: 0, or 1 when no kernel was found (the logs did not come from -Xptxas -v).
"""
import re
import shutil
import subprocess
import sys

ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\w+)'")
PROPS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
USED = re.compile(r"Used (\d+) registers(.*)")
SMEM = re.compile(r"(\d+) bytes smem")


def demangle(names):
    if not names or not shutil.which("c++filt"):
        return {n: n for n in names}
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout
    return dict(zip(names, out.splitlines()))


def parse(text):
    """Yields dicts (mangled, arch, regs, spill_st, spill_ld, stack, smem) in file order."""
    cur = None
    for line in text.splitlines():
        m = ENTRY.search(line)
        if m:
            cur = {"mangled": m.group(1), "arch": m.group(2), "regs": None, "spill_st": 0,
                   "spill_ld": 0, "stack": 0, "smem": 0}
            continue
        if cur is None:
            continue
        m = PROPS.search(line)
        if m:
            cur["stack"], cur["spill_st"], cur["spill_ld"] = (int(g) for g in m.groups())
            continue
        m = USED.search(line)
        if m:
            cur["regs"] = int(m.group(1))
            s = SMEM.search(m.group(2))
            cur["smem"] = int(s.group(1)) if s else 0
            yield cur
            cur = None


def short(name):
    """Drops the namespaces and the argument list; keeps the template arguments."""
    name = name.replace("(anonymous namespace)::", "")
    name = re.sub(r"^void ", "", name)
    name = re.sub(r"\bcpbench::(cuda::)?(kern::)?", "", name)
    depth, cut = 0, len(name)
    for i, c in enumerate(name):
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif c == "(" and depth == 0:
            cut = i
            break
    return name[:cut].replace("__nv_bfloat16", "bf16").replace("__half", "fp16")


def main(paths):
    rows = []
    for p in paths:
        with open(p, errors="replace") as f:
            rows.extend(parse(f.read()))
    if not rows:
        print("ptxas_table: no kernel found in the logs (built without -Xptxas -v?)", file=sys.stderr)
        return 1
    names = demangle(sorted({r["mangled"] for r in rows}))
    print("| kernel | arch | registers | spill stores B | spill loads B | stack B | static smem B |")
    print("|---|---|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: (short(names[r["mangled"]]), r["arch"])):
        print(f"| `{short(names[r['mangled']])}` | {r['arch']} | {r['regs']} | {r['spill_st']} | "
              f"{r['spill_ld']} | {r['stack']} | {r['smem']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
