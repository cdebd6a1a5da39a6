#!/usr/bin/env python3
"""Compares two `cpbench verify --dump` strategy directories tensor by tensor: the cross-backend
layer check of scripts/gpu_check.sh (CPU fp32 as the reference, CUDA fp32/bf16/fp16 as the
candidate), so CUDA is never compared only with CUDA.

    scripts/compare_dumps.py REF_DIR CAND_DIR --bound 2e-2 [--json FILE]

Every .npy of REF_DIR must exist in CAND_DIR with the same shape; NaN and Inf must sit at the
same positions with the same values (lse is -inf for rows that see no key); the finite parts are
compared by relative L2 error ||cand - ref|| / ||ref|| (float64), which must be <= --bound
(DESIGN: 1e-5 for fp32, 2e-2 for bf16/fp16). meta.json must agree on the shape fields.
Exit status: 0 all within the bound, 1 otherwise, 2 bad arguments or unreadable directories.
"""
import argparse
import json
import os
import sys

import numpy as np

SHAPE_FIELDS = ("B", "N", "H", "G", "d", "D", "causal", "rope", "seed", "eps")


def compare(ref, cand):
    """(rel_l2, problem or None) of one tensor pair."""
    if ref.shape != cand.shape:
        return float("inf"), f"shape {cand.shape} != reference {ref.shape}"
    r, c = ref.astype(np.float64), cand.astype(np.float64)
    fr, fc = np.isfinite(r), np.isfinite(c)
    if not np.array_equal(fr, fc):
        i = np.flatnonzero(fr.ravel() != fc.ravel())[0]
        return float("inf"), (f"non-finite positions differ (first at flat index {i}: "
                              f"reference {r.ravel()[i]}, candidate {c.ravel()[i]})")
    nf = ~fr
    if nf.any() and not np.array_equal(r[nf], c[nf], equal_nan=True):
        return float("inf"), "non-finite values differ (+inf/-inf/nan)"
    diff = np.linalg.norm((c - r)[fr])
    den = np.linalg.norm(r[fr])
    if den == 0:
        return (0.0, None) if diff == 0 else (float("inf"), "reference is all zero, candidate is not")
    return float(diff / den), None


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
    for n in names:
        path = os.path.join(a.cand, n)
        if not os.path.exists(path):
            failures.append(f"{n[:-4]}: missing in {a.cand}")
            continue
        err, problem = compare(np.load(os.path.join(a.ref, n)), np.load(path))
        rows[n[:-4]] = err
        ok = problem is None and err <= a.bound
        print(f"{n[:-4]:10s} rel_l2 {err:.3e}  {'ok' if ok else 'FAIL'}"
              + (f" ({problem})" if problem else ""))
        if not ok:
            failures.append(f"{n[:-4]}: " + (problem or f"rel_l2 {err:.3e} > bound {a.bound:g}"))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"reference": a.ref, "candidate": a.cand, "bound": a.bound,
                       "rel_l2": rows, "failures": failures}, f, indent=1)
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
