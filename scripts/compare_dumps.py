#!/usr/bin/env python3
"""Compares two `cpbench verify --dump` strategy directories tensor by tensor: the cross-backend
layer check of scripts/gpu_check.sh (CPU fp32 as the reference, CUDA fp32/bf16/fp16 as the
candidate), so CUDA is never compared only with CUDA.

    scripts/compare_dumps.py REF_DIR CAND_DIR --bound 2e-2 [--json FILE]

Every .npy of REF_DIR must exist in CAND_DIR with the same shape; NaN and Inf must sit at the
same positions with the same values (lse is -inf for rows that see no key); the finite parts are
compared by verify's rule (scripts/verify_bound.py): ||cand - ref|| / max(||ref||, m) (float64)
must be <= --bound (DESIGN: 1e-5 for fp32, 2e-2 for bf16/fp16), where m is 0 but for dq and dk,
whose m is computed from REF_DIR's q, k, v, o, do, lse and meta.json's mask (so a gradient that
cancels to ~0 is measured against the size of its terms). meta.json must agree on the shape fields.
Exit status: 0 all within the bound, 1 otherwise, 2 bad arguments or unreadable directories.
"""
import argparse
import json
import os
import sys

import numpy as np

from verify_bound import SCALED, gradient_scales, verify_error

SHAPE_FIELDS = ("B", "N", "H", "G", "d", "D", "causal", "rope", "seed", "eps", "window", "doc_lens")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ref")
    ap.add_argument("cand")
    ap.add_argument("--bound", type=float, required=True)
    ap.add_argument("--json", help="write the per-tensor errors here")
    a = ap.parse_args()
    for d in (a.ref, a.cand):
        if not os.path.isdir(d):
            print(f"compare_dumps: {d} is not a directory", file=sys.stderr)
            return 2
    names = sorted(f for f in os.listdir(a.ref) if f.endswith(".npy"))
    if not names:
        print(f"compare_dumps: no .npy in {a.ref}", file=sys.stderr)
        return 2
    failures = []
    rows = {}
    for meta_problem in check_meta(a.ref, a.cand):
        failures.append(f"meta.json: {meta_problem}")
    ref = {n[:-4]: np.load(os.path.join(a.ref, n)) for n in names}
    scales = {}
    if any(n in ref for n in SCALED):
        try:
            with open(os.path.join(a.ref, "meta.json")) as f:
                scales = gradient_scales(ref, json.load(f))
        except (OSError, ValueError, KeyError) as e:
            # m = 0 is the stricter rule (plain relative L2): it passes nothing the scale would fail.
            print(f"compare_dumps: no scale m for dq/dk ({e}): plain relative L2")
    for name, want in ref.items():
        path = os.path.join(a.cand, name + ".npy")
        if not os.path.exists(path):
            failures.append(f"{name}: missing in {a.cand}")
            continue
        err, problem = verify_error(np.load(path), want, scales.get(name, 0.0))
        rows[name] = err
        ok = problem is None and err <= a.bound
        print(f"{name:10s} error {err:.3e}  {'ok' if ok else 'FAIL'}"
              + (f" ({problem})" if problem else ""))
        if not ok:
            failures.append(f"{name}: " + (problem or f"error {err:.3e} > bound {a.bound:g}"))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"reference": a.ref, "candidate": a.cand, "bound": a.bound,
                       "rel_l2": rows, "scales": scales, "failures": failures}, f, indent=1)
    worst = max(rows.items(), key=lambda kv: kv[1]) if rows else ("-", 0.0)
    print(f"compare_dumps: {len(rows)} tensors, worst {worst[0]} {worst[1]:.3e}, bound {a.bound:g}: "
          + ("passed" if not failures else f"FAILED ({len(failures)}): " + "; ".join(failures)))
    return 0 if not failures else 1


def check_meta(ref_dir, cand_dir):
    try:
        with open(os.path.join(ref_dir, "meta.json")) as f:
            mr = json.load(f)
        with open(os.path.join(cand_dir, "meta.json")) as f:
            mc = json.load(f)
    except (OSError, ValueError) as e:
        return [f"unreadable ({e})"]
    return [f"{k}: {mc.get(k)!r} != reference {mr.get(k)!r}" for k in SHAPE_FIELDS
            if mr.get(k) != mc.get(k)]


if __name__ == "__main__":
    sys.exit(main())
