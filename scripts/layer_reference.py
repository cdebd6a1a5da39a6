"""DESIGN's layer in float64 NumPy, recomputed from a `cpbench verify --dump` directory's inputs:
RMSNorm, QKV projection, RoPE at global positions (restarting in each packed document), attention
under the mask (with the sinks' logits under meta "sinks"), output projection, residual; with meta
block "full" the SwiGLU MLP after it; and the backward. One copy of the reference: check_dump.py
(the dump's independent check) and numerics.py (error against float64) import it.
"""
import numpy as np

from verify_bound import visibility


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


def softmax_rows(s, inp, meta):
    """Softmax over the keys of scores s [B, H, q, k] (-inf where hidden): probabilities and lse
    [B, H, q]. With meta "sinks" (--sinks) the logit sinks[h] of inp joins each row's denominator
    as a key with no value (GPT-OSS), so the probabilities of a row sum to less than 1."""
    m = s.max(axis=-1, keepdims=True)
    sink = None
    if meta.get("sinks"):
        sink = inp["sinks"].astype(np.float64)[None, :, None, None]  # [1, H, 1, 1]
        m = np.maximum(m, sink)
    e = np.exp(s - m)
    l = e.sum(axis=-1, keepdims=True) + (np.exp(sink - m) if sink is not None else 0.0)
    return e / l, (m + np.log(l))[..., 0]


def project_qkv(x, w, wqkv, meta, rope_pos):
    """The attention sub-layer's input side on x [B, T, D]: rstd r, xn = RMSNorm(x) * w, then
    q [B, T, H, d], k, v [B, T, G, d] = xn @ w_qkv, q and k rotated at rope_pos [T] (when meta
    "rope")."""
    B, T = x.shape[0], x.shape[1]
    H, G, d = meta["H"], meta["G"], meta["d"]
    r = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + meta["eps"])
    xn = x * r * w
    qkv = xn @ wqkv
    q = qkv[..., : H * d].reshape(B, T, H, d)
    k = qkv[..., H * d: (H + G) * d].reshape(B, T, G, d)
    v = qkv[..., (H + G) * d:].reshape(B, T, G, d)
    if meta["rope"]:
        theta = meta.get("rope_theta", 10000.0)
        q, k = rope(q, rope_pos, theta), rope(k, rope_pos, theta)
    return r, xn, q, k, v


def reference(inp, meta):
    B, N, H, G, d, D = (meta[k] for k in ("B", "N", "H", "G", "d", "D"))
    eps, theta = meta["eps"], meta.get("rope_theta", 10000.0)
    x, w, wqkv, wo, dy = (inp[k].astype(np.float64) for k in ("x", "norm_w", "w_qkv", "w_o", "dy"))
    pos = np.arange(N)
    # DESIGN's visibility rule on global positions; RoPE positions restart in each document.
    lens = meta.get("doc_lens") or [N]
    rope_pos = pos - np.repeat(np.cumsum([0] + list(lens[:-1])), lens)
    vis = visibility(meta)
    r, xn, q, k, v = project_qkv(x, w, wqkv, meta, rope_pos)
    rep = H // G
    kh = np.repeat(k, rep, axis=2)  # query head h uses kv head h // rep
    vh = np.repeat(v, rep, axis=2)
    scale = 1.0 / np.sqrt(d)
    s = np.einsum("bqhd,bkhd->bhqk", q, kh) * scale
    s = np.where(vis[None, None], s, -np.inf)
    p, lse = softmax_rows(s, inp, meta)              # [B, H, N, N], [B, H, N]
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
    sinks = {}
    if meta.get("sinks"):  # the sink's probability e^(sink - lse) times (0 - delta): it has no value
        sinks = dict(dsinks=-(np.exp(inp["sinks"].astype(np.float64)[None, :, None] - lse) * delta[..., 0]).sum(axis=(0, 2)))
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
                dq=dq, dk=dk, dv=dv, lse=lse, **mlp, **sinks)


def uses_cache(meta):
    """Whether the dump is of a KV-cache pass (--cached prefill or decode): forward only, the new
    tokens after a C-token cache. A prefill without a cache (cached 0) is checked as before."""
    return meta.get("pass") == "decode" or meta.get("cached", 0) > 0


def new_tokens(meta):
    """How many new tokens a KV-cache dump holds: N - C under prefill, one per step under decode
    (whose meta N is C, the cache's length)."""
    return meta["decode_steps"] if meta["pass"] == "decode" else meta["N"] - meta["cached"]


def cached_reference(inp, meta):
    """The forward of the T new tokens after the C-token cache in float64: DESIGN "Persistent-KV
    prefill" and "Decode". Same block as reference(), but RoPE at the global positions C..C+T-1
    and keys = the cache (positions 0..C-1, used as dumped: it stands for the roped k, v a
    previous prefill wrote, so it is neither recomputed nor rotated here) then the new tokens'
    own k, v. Returns the forward tensors the pass dumps (decode has no q)."""
    B, H, G, d, D, C = (meta[k] for k in ("B", "H", "G", "d", "D", "cached"))
    eps = meta["eps"]
    decode = meta["pass"] == "decode"
    x, w, wqkv, wo = (inp[k].astype(np.float64) for k in ("x", "norm_w", "w_qkv", "w_o"))
    k_cache, v_cache = (inp[k].astype(np.float64) for k in ("k_cache", "v_cache"))
    T = x.shape[1]
    pos = C + np.arange(T)  # --cached excludes --docs, so RoPE positions are the global ones
    _, _, q, k, v = project_qkv(x, w, wqkv, meta, pos)
    rep = H // G
    kh = np.repeat(np.concatenate([k_cache, k], axis=1), rep, axis=2)  # [B, C + T, H, d]
    vh = np.repeat(np.concatenate([v_cache, v], axis=1), rep, axis=2)
    # Keys sit at positions 0..C+T-1 and the queries at C..C+T-1: the rows C.. of DESIGN's rule
    # on C + T tokens (causal, window). Decode is causal whatever meta's "causal" says.
    vis = visibility(dict(meta, N=C + T, causal=meta["causal"] or decode))[C:]
    s = np.einsum("bqhd,bkhd->bhqk", q, kh) / np.sqrt(d)
    s = np.where(vis[None, None], s, -np.inf)
    p, lse = softmax_rows(s, inp, meta)  # every query sees at least its own key
    o = np.einsum("bhqk,bkhd->bqhd", p, vh)
    y = x + o.reshape(B, T, H * d) @ wo
    if meta.get("block") == "full":  # the SwiGLU MLP sub-layer, forward only
        w2, wg, wu, wd = (inp[k].astype(np.float64) for k in ("norm2_w", "w_gate", "w_up", "w_down"))
        hn = y * w2 / np.sqrt(np.mean(y * y, axis=-1, keepdims=True) + eps)
        a = hn @ wg
        y = y + (a / (1.0 + np.exp(-a)) * (hn @ wu)) @ wd
    out = dict(y=y, k=k, v=v, o=o, lse=lse)
    if not decode:  # decode's q is recomputed on every rank and not dumped
        out["q"] = q
    return out
