#!/usr/bin/env python3
"""ctest cuda_emu_mutation: deleting any barrier or cp.async wait of the kernels is caught.

Every __syncthreads, __syncwarp and cp_async_wait<N> in the attention kernels and the shared
device helpers (kernels/cuda/attention_*_kernel.cuh, device_common.cuh) is a site. Sites are
numbered in file order and named basename:line; the emulator (tests/unit/cuda_emu.h) makes the
one named by CPBENCH_EMU_SKIP_SYNC a no-op at run time, so one build of each emulator test binary
serves every mutation. Several binaries may be given (test_cuda_emu, test_cuda_emu_decode): each
site is run with the binaries whose unmutated [mutation] cases reach it. For each site this runs
the emulator cases tagged [mutation] (the smallest that reach every site) with that site switched
off and requires them to fail in at least one of those binaries: a race or in-flight cp.async
read reported by the emulator, or a wrong result. A site whose deletion changes nothing
must be in ALLOWED below with the reason; an allowed site that is caught, or an entry that names
no site, is an error too (the list stays true).

Also required: the unmutated runs pass and together reach every site found in the sources, and
each mutated run says the named site was switched off (a typo cannot pass).

usage: cuda_emu_mutation.py TEST_CUDA_EMU_BINARY KERNEL_DIR [MORE_EMU_TEST_BINARIES...]
"""
import os
import re
import subprocess
import sys
import tempfile

# Sites whose deletion cannot change behaviour, keyed "basename:kind#k" (k-th site of that kind in
# the file, 1-based), so that editing unrelated lines does not move an entry.
ALLOWED = {
    "attention_bwd_kernel.cuh:__syncthreads#3": (
        "redundant: the barrier after step (7) already orders this iteration's reads of lse_s, dl_s, "
        "lo_s, hi_s and of the Q/dO buffer `buf` before the next iteration rewrites them (those "
        "writes come after it), and the next iteration's wait barrier orders step (8)'s reads of "
        "dSs before step (7) rewrites it; K and V are only read. The emulator's race detector "
        "finds no conflicting pair, and none exists on the GPU either."),
}

SITE = re.compile(r"\b(__syncthreads|__syncwarp)\s*\(|\bcp_async_wait\s*<")
CASES = "[mutation]"
TIMEOUT_S = 300


def find_sites(kernel_dir):
    files = sorted(f for f in os.listdir(kernel_dir)
                   if re.fullmatch(r"attention_\w+_kernel\.cuh", f) or f == "device_common.cuh")
    sites = []
    for f in files:
        ordinal = {}
        with open(os.path.join(kernel_dir, f)) as fh:
            for n, line in enumerate(fh, 1):
                code = line.split("//", 1)[0]
                m = SITE.search(code)
                if not m or "__device__" in code:  # a definition, not a call
                    continue
                kind = m.group(1) or "cp_async_wait"
                ordinal[kind] = ordinal.get(kind, 0) + 1
                sites.append({"name": f"{f}:{n}", "key": f"{f}:{kind}#{ordinal[kind]}", "kind": kind,
                              "text": line.strip()})
    return sites


def run(binary, env_extra):
    env = dict(os.environ, **env_extra)
    try:
        p = subprocess.run([binary, CASES, "--abort"], env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
        return p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        return None, (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(errors="replace")


def why_failed(out):
    for line in out.splitlines():
        if line.startswith("cuda_emu:") and "CPBENCH_EMU_SKIP_SYNC" not in line:
            return line[:300]
    for pat in ("FAILED", "with expansion"):
        for i, line in enumerate(out.splitlines()):
            if pat in line:
                return " ".join(out.splitlines()[i:i + 4])[:300]
    return "(no message)"


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    binaries, kernel_dir = [sys.argv[1]] + sys.argv[3:], sys.argv[2]
    sites = find_sites(kernel_dir)
    errors = []
    keys = {s["key"] for s in sites}
    for k in ALLOWED:
        if k not in keys:
            errors.append(f"ALLOWED names {k}, which is no site of the kernels (stale entry)")

    reached_by = {}  # binary -> the sites its unmutated cases reach
    with tempfile.TemporaryDirectory() as tmp:
        for binary in binaries:
            listing = os.path.join(tmp, "sites.txt")
            rc, out = run(binary, {"CPBENCH_EMU_SITES": listing})
            if rc != 0:
                print(out[-4000:])
                print(f"FAIL: the unmutated emulator cases {CASES} of {binary} do not pass (exit {rc})")
                return 1
            with open(listing) as fh:
                reached_by[binary] = {line.split()[0] for line in fh if line.strip()}
            os.remove(listing)
    for s in sites:
        if not any(s["name"] in r for r in reached_by.values()):
            errors.append(f"site {s['name']} ({s['text']}) is never reached by the cases {CASES}: add a case")

    print(f"{len(sites)} sites; cases {CASES} of {', '.join(os.path.basename(b) for b in binaries)}")
    for i, s in enumerate(sites, 1):
        label = f"site {i}/{len(sites)} {s['name']} [{s['key']}] {s['text']}"
        users = [b for b in binaries if s["name"] in reached_by[b]]
        if not users:
            continue  # reported above
        caught, caught_rc, caught_out, caught_by, problem = False, 0, "", "", None
        for binary in users:  # the first binary that fails catches it; an ALLOWED site runs them all
            rc, out = run(binary, {"CPBENCH_EMU_SKIP_SYNC": s["name"]})
            if f"CPBENCH_EMU_SKIP_SYNC: {s['name']} " not in out:
                problem = f"{label}: the emulator ({os.path.basename(binary)}) did not report switching it off"
                break
            if rc is None:
                problem = f"{label}: timed out after {TIMEOUT_S} s ({os.path.basename(binary)})"
                break
            if rc != 0:
                if not caught:
                    caught, caught_rc, caught_out, caught_by = True, rc, out, os.path.basename(binary)
                if s["key"] not in ALLOWED:
                    break
        if problem:
            errors.append(problem)
            continue
        if s["key"] in ALLOWED:
            if caught:
                errors.append(f"{label}: listed in ALLOWED but its deletion is caught now by {caught_by} ({why_failed(caught_out)}): "
                              "remove the entry")
            else:
                print(f"{label}\n    not caught, allowed: {ALLOWED[s['key']]}")
            continue
        if caught:
            print(f"{label}\n    caught by {caught_by} (exit {caught_rc}): {why_failed(caught_out)}")
        else:
            errors.append(f"{label}: deleting it goes unnoticed (the cases pass); make a case catch it, or "
                          "list it in ALLOWED with the reason it changes nothing")
    for e in errors:
        print("FAIL: " + e)
    if errors:
        return 1
    print("cuda_emu_mutation: every site's deletion is caught or allowed with its reason")
    return 0


if __name__ == "__main__":
    sys.exit(main())
