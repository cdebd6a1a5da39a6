#!/usr/bin/env python3
"""Tabulates `nvcc -Xptxas -v` output: one Markdown row per kernel and architecture with its
registers, spill stores/loads, stack frame and static shared memory (dynamic shared memory, which
the attention kernels size at launch, is not in ptxas's report: see docs/GPU.md).

    scripts/ptxas_table.py LOG [LOG...] [--sass OBJ [OBJ...]]

LOGs: the compiler output of scripts/build_cuda_only.sh. With --sass, the objects' SASS
(`cuobjdump -sass`) adds per kernel the static counts of LDSM (ldmatrix) and HMMA (mma.sync)
instructions, HMMA per LDSM, and the global atomics (RED/ATOM; "vN" = N of them on vectors,
e.g. F32x4). cuobjdump is looked for in CUOBJDUMP, on PATH, next to nvcc, then in the pip package
nvidia-cuda-cuobjdump (which needs nvdisasm, e.g. pip nvidia-cuda-nvdisasm, on PATH or next to
it); without them the columns say "n/a". Static counts: an instruction inside a
loop counts once (the attention kernels' inner loops are fully unrolled, so the ratio is the
per-tile one).

Exit status: 0, or 1 when no kernel was found (the logs did not come from -Xptxas -v).
"""
import glob
import os
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


def find_cuobjdump():
    env = os.environ.get("CUOBJDUMP")
    if env:
        return env if os.access(env, os.X_OK) else None
    exe = shutil.which("cuobjdump")
    if exe:
        return exe
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    cand = os.path.join(os.path.dirname(os.path.realpath(nvcc)), "cuobjdump")
    if os.access(cand, os.X_OK):
        return cand
    try:  # pip install nvidia-cuda-cuobjdump
        import nvidia  # noqa: F401 (a namespace package)
        for d in nvidia.__path__:
            for c in glob.glob(os.path.join(d, "*", "bin", "cuobjdump")):
                if os.access(c, os.X_OK):
                    return c
    except ImportError:
        pass
    return None


FUNC = re.compile(r"^\s*(?:code for (sm_\w+)|Function : (\S+))")
LDSM = re.compile(r"\bLDSM\.")
HMMA = re.compile(r"\bHMMA\.")
ATOM = re.compile(r"\b(?:RED|ATOM|REDG|ATOMG)\.\S*")
VEC = re.compile(r"x([24])\b")


def parse_sass(text):
    """{(mangled, arch): {"ldsm", "hmma", "atom", "vatom"}} from `cuobjdump -sass` output."""
    out, arch, cur = {}, None, None
    for line in text.splitlines():
        m = FUNC.match(line)
        if m:
            if m.group(1):
                arch = m.group(1)
            else:
                cur = out.setdefault((m.group(2), arch), {"ldsm": 0, "hmma": 0, "atom": 0, "vatom": 0})
            continue
        if cur is None or "/*" not in line:
            continue
        cur["ldsm"] += bool(LDSM.search(line))
        cur["hmma"] += bool(HMMA.search(line))
        a = ATOM.search(line)
        if a:
            cur["atom"] += 1
            cur["vatom"] += bool(VEC.search(a.group(0)))
    return out


def sass_counts(objs):
    """(counts, why): counts as parse_sass over all objects, or None and the reason."""
    exe = find_cuobjdump()
    if not exe:
        return None, "cuobjdump not found (CUOBJDUMP, PATH, the CUDA toolkit, pip nvidia-cuda-cuobjdump)"
    counts = {}
    env = dict(os.environ)  # cuobjdump -sass runs nvdisasm: look next to cuobjdump too
    env["PATH"] = os.path.dirname(os.path.abspath(exe)) + os.pathsep + env.get("PATH", "")
    for o in objs:
        r = subprocess.run([exe, "-sass", o], capture_output=True, text=True, env=env)
        if r.returncode != 0 and "does not contain device code" in r.stderr + r.stdout:
            continue  # a host-only object
        if r.returncode != 0:
            return None, f"cuobjdump -sass {o}: {r.stderr.strip()}"
        counts.update(parse_sass(r.stdout))
    return counts, ""


def main(argv):
    paths, objs = argv, None
    if "--sass" in argv:
        i = argv.index("--sass")
        paths, objs = argv[:i], argv[i + 1:]
    rows = []
    for p in paths:
        with open(p, errors="replace") as f:
            rows.extend(parse(f.read()))
    if not rows:
        print("ptxas_table: no kernel found in the logs (built without -Xptxas -v?)", file=sys.stderr)
        return 1
    names = demangle(sorted({r["mangled"] for r in rows}))
    sass = None
    if objs is not None:
        sass, why = sass_counts(objs)
        if sass is None:
            print(f"ptxas_table: no SASS counts: {why}", file=sys.stderr)
    head = "| kernel | arch | registers | spill stores B | spill loads B | stack B | static smem B |"
    rule = "|---|---|---|---|---|---|---|"
    if objs is not None:
        head += " LDSM | HMMA | HMMA per LDSM | global atomics |"
        rule += "---|---|---|---|"
    print(head)
    print(rule)
    for r in sorted(rows, key=lambda r: (short(names[r["mangled"]]), r["arch"])):
        line = (f"| `{short(names[r['mangled']])}` | {r['arch']} | {r['regs']} | {r['spill_st']} | "
                f"{r['spill_ld']} | {r['stack']} | {r['smem']} |")
        if objs is not None:
            c = sass.get((r["mangled"], r["arch"])) if sass is not None else None
            if c is None:
                line += " n/a | n/a | n/a | n/a |"
            else:
                ratio = f"{c['hmma'] / c['ldsm']:.2f}" if c["ldsm"] else "-"
                atom = f"{c['atom']}" + (f" (v{c['vatom']})" if c["vatom"] else "")
                line += f" {c['ldsm']} | {c['hmma']} | {ratio} | {atom} |"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
