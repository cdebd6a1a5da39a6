#!/usr/bin/env python3
"""Independent float64 check of a `cpbench verify --dump DIR` directory.

Recomputes DESIGN's layer (RMSNorm, QKV projection, RoPE at global positions, attention with
the causal mask, output projection, residual; with meta.json's block "full" also the SwiGLU MLP
sub-layer after it) and its backward from the dumped inputs alone, in float64 NumPy, and
compares every dumped result of every strategy with it by verify's rule
(scripts/verify_bound.py: ||a - b|| <= tol * max(||b||, m), m from the float64 reference for dq
and dk, 0 otherwise). Also checks that every strategy saw the same inputs. Exit 0 when all agree
within the tolerance, 1 otherwise.

usage: check_dump.py DIR [--tol 1e-5]
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from verify_bound import gradient_scales, verify_error, visibility  # noqa: E402


def rope(x, pos, theta, inverse=False):
    """Rotate-half RoPE on [B, N, heads, d] at positions pos [N] (float64)."""
    d = x.shape[-1]
    inv_freq = theta ** (-np.arange(0, d // 2, dtype=np.float64) * 2.0 / d)
    ang = pos[:, None].astype(np.float64) * inv_freq[None, :]          # [N, d/2]
    cos = np.cos(ang)[None, :, None, :]
    sin = np.sin(ang)[None, :, None, :]
    if inverse:
        sin = -sin
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def reference(inp, meta):
    B, N, H, G, d, D = (meta[k] for k in ("B", "N", "H", "G", "d", "D"))
    eps, theta = meta["eps"], meta.get("rope_theta", 10000.0)
    x, w, wqkv, wo, dy = (inp[k].astype(np.float64) for k in ("x", "norm_w", "w_qkv", "w_o", "dy"))
    pos = np.arange(N)
    # DESIGN's visibility rule on global positions; RoPE positions restart in each document.
    lens = meta.get("doc_lens") or [N]
    rope_pos = pos - np.repeat(np.cumsum([0] + list(lens[:-1])), lens)
    vis = visibility(meta)
    r = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    xn = x * r * w
    qkv = xn @ wqkv
    q = qkv[..., : H * d].reshape(B, N, H, d)
    k = qkv[..., H * d: (H + G) * d].reshape(B, N, G, d)
    v = qkv[..., (H + G) * d:].reshape(B, N, G, d)
    if meta["rope"]:
        q, k = rope(q, rope_pos, theta), rope(k, rope_pos, theta)
    rep = H // G
    kh = np.repeat(k, rep, axis=2)  # query head h uses kv head h // rep
    vh = np.repeat(v, rep, axis=2)
    scale = 1.0 / np.sqrt(d)
    s = np.einsum("bqhd,bkhd->bhqk", q, kh) * scale
    s = np.where(vis[None, None], s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    p = np.exp(s - m)
    l = p.sum(axis=-1, keepdims=True)
    lse = (m + np.log(l))[..., 0]                    # [B, H, N]
    p = p / l
    o = np.einsum("bhqk,bkhd->bqhd", p, vh)
    h = x + o.reshape(B, N, H * d) @ wo
    mlp = {}
    if meta.get("block") == "full":  # h -> y through the MLP; its backward gives dh
        w2, wg, wu, wd = (inp[k].astype(np.float64) for k in ("norm2_w", "w_gate", "w_up", "w_down"))
        r2 = 1.0 / np.sqrt(np.mean(h * h, axis=-1, keepdims=True) + eps)
        hn = h * r2 * w2
        a, b = hn @ wg, hn @ wu
        sg = 1.0 / (1.0 + np.exp(-a))
        g = a * sg * b
        y = h + g @ wd
        dg = dy @ wd.T
        da = dg * b * sg * (1.0 + a * (1.0 - sg))
        db = dg * a * sg
        dhn = da @ wg.T + db @ wu.T
        rows = lambda t: t.reshape(B * N, -1)
        mlp = dict(dw_down=rows(g).T @ rows(dy), dw_gate=rows(hn).T @ rows(da), dw_up=rows(hn).T @ rows(db),
                   dnorm2_w=(dhn * h * r2).sum(axis=(0, 1)))
        dhhat = dhn * w2
        dh = dy + r2 * dhhat - h * r2 ** 3 * np.mean(dhhat * h, axis=-1, keepdims=True)
    else:
        y, dh = h, dy
    # backward of the attention sub-layer from dh (dy under --block attn)
    do = (dh @ wo.T).reshape(B, N, H, d)
    dw_o = o.reshape(B * N, H * d).T @ dh.reshape(B * N, D)
    dvh = np.einsum("bhqk,bqhd->bkhd", p, do)
    dp = np.einsum("bqhd,bkhd->bhqk", do, vh)
    delta = np.einsum("bqhd,bqhd->bhq", do, o)[..., None]
    ds = p * (dp - delta)
    dq = np.einsum("bhqk,bkhd->bqhd", ds, kh) * scale
    dkh = np.einsum("bhqk,bqhd->bkhd", ds, q) * scale
    dk = dkh.reshape(B, N, G, rep, d).sum(axis=3)
    dv = dvh.reshape(B, N, G, rep, d).sum(axis=3)
    dq_pre, dk_pre = (rope(dq, rope_pos, theta, True), rope(dk, rope_pos, theta, True)) if meta["rope"] else (dq, dk)
    dqkv = np.concatenate([dq_pre.reshape(B, N, H * d), dk_pre.reshape(B, N, G * d), dv.reshape(B, N, G * d)], axis=-1)
    dxn = dqkv @ wqkv.T
    dw_qkv = xn.reshape(B * N, D).T @ dqkv.reshape(B * N, -1)
    dnorm_w = (dxn * x * r).sum(axis=(0, 1))
    dxhat = dxn * w
    dx = dh + r * dxhat - x * r ** 3 * np.mean(dxhat * x, axis=-1, keepdims=True)
    return dict(y=y, dx=dx, dnorm_w=dnorm_w, dw_qkv=dw_qkv, dw_o=dw_o, q=q, k=k, v=v, o=o, do=do,
                dq=dq, dk=dk, dv=dv, lse=lse, **mlp)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--tol", type=float, default=1e-5)
    args = ap.parse_args()
    strategies = sorted(s for s in os.listdir(args.dir) if os.path.isfile(os.path.join(args.dir, s, "meta.json")))
    if not strategies:
        print(f"check_dump: no strategy directories with meta.json under {args.dir}", file=sys.stderr)
        return 1
    failures = 0
    failed_strategies = 0
    inputs0 = None
    for s in strategies:
        before = failures
        sd = os.path.join(args.dir, s)
        meta = json.load(open(os.path.join(sd, "meta.json")))
        t = {f[:-4]: np.load(os.path.join(sd, f)) for f in os.listdir(sd) if f.endswith(".npy")}
        for name, arr in t.items():
            if arr.dtype != np.float32:
                print(f"{s}: {name} has dtype {arr.dtype}, expected float32")
                failures += 1
        mlp_inputs = ("norm2_w", "w_gate", "w_up", "w_down") if meta.get("block") == "full" else ()
        inp = {k: t[k] for k in ("x", "norm_w", "w_qkv", "w_o", "dy") + mlp_inputs}
        if inputs0 is None:
            inputs0 = inp
        else:
            for k in inp:
                if not np.array_equal(inp[k], inputs0[k]):
                    print(f"{s}: input {k} differs from {strategies[0]}'s")
                    failures += 1
        ref = reference(inp, meta)
        scales = gradient_scales(ref, meta)
        worst, worst_name = 0.0, ""
        for name, want in ref.items():
            if t[name].shape != want.shape:
                print(f"{s}: {name} shape {t[name].shape}, expected {want.shape}")
                failures += 1
                continue
            e, problem = verify_error(t[name], want, scales.get(name, 0.0))
            if not e <= worst:
                worst, worst_name = e, name
            if not e <= args.tol:
                print(f"{s}: {name} error={e:.3e} > {args.tol}" + (f" ({problem})" if problem else ""))
                failures += 1
        print(f"{s:24s} max error vs float64 = {worst:.3e} ({worst_name})")
        failed_strategies += failures > before
    print(f"{len(strategies) - failed_strategies} passed, {failed_strategies} failed")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
