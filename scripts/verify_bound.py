"""The verification bound of `cpbench verify` (DESIGN, Clarifications: "Verification bound";
bench/verify_bound.h is the same rule in C++), for the Python dump checks
(tests/python/check_dump.py, scripts/compare_dumps.py).

A tensor a passes against its reference b when ||a - b|| <= bound * max(||b||, m). For dq and
dk, m is the norm of the same formula on magnitudes, which stays large when the gradient cancels
to ~0 (a window of 1, one-token documents):
    m_dq = || (1/sqrt(d)) * (P o (|dP| + |D|)) @ |K| ||
    m_dk = || (1/sqrt(d)) * (P o (|dP| + |D|))^T @ |Q| ||   (summed over the query heads of a kv head)
P_ij = exp(q_i.k_j / sqrt(d) - lse_i) on visible pairs (0 elsewhere and on rows whose lse is not
finite), dP = do @ v^T, D_i = rowsum(do_i o o_i), from the reference's roped q, k and v, o, do,
lse. Every other tensor has m = 0 (the plain relative L2 error).
"""
import numpy as np

# Tensors whose bound has a scale m, and the reference tensors it is computed from.
SCALED = ("dq", "dk")
SCALE_OPERANDS = ("q", "k", "v", "o", "do", "lse")


def visibility(meta):
    """DESIGN's visibility rule on global positions: vis[i, j] is whether query i sees key j."""
    N = meta["N"]
    pos = np.arange(N)
    lens = meta.get("doc_lens") or [N]
    doc = np.repeat(np.arange(len(lens)), lens)
    qi, kj = pos[:, None], pos[None, :]
    vis = doc[:, None] == doc[None, :]
    if meta["causal"]:
        vis &= kj <= qi
    W = meta.get("window", 0)
    if W:
        vis &= (qi - kj < W) if meta["causal"] else (np.abs(qi - kj) < W)
    return vis


def gradient_scales(ref, meta):
    """{"dq": m_dq, "dk": m_dk} in float64 from the reference tensors ref (a dict of arrays with
    the dump's shapes: q [B,N,H,d], k, v [B,N,G,d], o, do [B,N,H,d], lse [B,H,N]). Under
    `--pass prefill` (no backward) both are 0. Raises KeyError naming a missing operand."""
    if meta.get("pass", "train") == "prefill":
        return {"dq": 0.0, "dk": 0.0}
    for name in SCALE_OPERANDS:
        if name not in ref:
            raise KeyError(f"the scale m of dq/dk needs the reference's {name}")
    q, k, v, o, do, lse = (np.asarray(ref[n], dtype=np.float64) for n in SCALE_OPERANDS)
    B, N, H, d = q.shape
    G = k.shape[2]
    rep = H // G
    kh, vh = np.repeat(k, rep, axis=2), np.repeat(v, rep, axis=2)  # query head h uses kv head h // rep
    scale = 1.0 / np.sqrt(d)
    s = np.where(visibility(meta)[None, None], np.einsum("bqhd,bkhd->bhqk", q, kh) * scale, -np.inf)
    lse = np.where(np.isfinite(lse), lse, np.inf)  # a row that sees no key: P = 0, no gradient
    p = np.exp(s - lse[..., None])
    dp = np.einsum("bqhd,bkhd->bhqk", do, vh)
    D = np.einsum("bqhd,bqhd->bhq", do, o)
    w = p * (np.abs(dp) + np.abs(D)[..., None])
    m_dq = np.einsum("bhqk,bkhd->bqhd", w, np.abs(kh)) * scale
    m_dk = (np.einsum("bhqk,bqhd->bkhd", w, np.abs(q)) * scale).reshape(B, N, G, rep, d).sum(axis=3)
    return {"dq": float(np.linalg.norm(m_dq)), "dk": float(np.linalg.norm(m_dk))}


def verify_error(a, b, m=0.0):
    """(e, problem) with e = ||a - b|| / max(||b||, m) in float64 over the finite elements, and
    problem None or why e is infinite: shapes differ, NaN/+Inf/-Inf at different positions or of
    different kinds, or a zero scale with a != b. e = 0 when a == b."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return float("inf"), f"shape {a.shape} != reference {b.shape}"
    fa, fb = np.isfinite(a), np.isfinite(b)
    if not np.array_equal(fa, fb):
        i = np.flatnonzero(fa.ravel() != fb.ravel())[0]
        return float("inf"), (f"non-finite positions differ (first at flat index {i}: "
                              f"reference {b.ravel()[i]}, candidate {a.ravel()[i]})")
    nf = ~fb
    if nf.any() and not np.array_equal(a[nf], b[nf], equal_nan=True):
        return float("inf"), "non-finite values differ (+inf/-inf/nan)"
    diff = np.linalg.norm((a - b)[fb])
    if diff == 0:
        return 0.0, None
    den = max(float(np.linalg.norm(b[fb])), float(m))
    if den == 0:
        return float("inf"), "reference and scale m are zero, candidate is not"
    return float(diff / den), None
