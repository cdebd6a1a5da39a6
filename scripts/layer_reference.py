"""DESIGN's layer in float64 NumPy, recomputed from a `cpbench verify --dump` directory's inputs:
RMSNorm, QKV projection (or under meta "attention" "mla" MLA's projections: latents, their norms,
up-projections, the decoupled rope parts), RoPE at global positions (restarting in each packed document), attention
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


def rms_norm(x, w, eps):
    """RMSNorm over the last axis: (x * r * w, r), r = 1 / sqrt(mean(x^2) + eps)."""
    r = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return x * r * w, r


def rms_norm_backward(x, r, w, dy):
    """RMSNorm's backward: (dx, dw) from its input x, its r and dy (dw summed over the rows)."""
    dhat = dy * w
    dx = r * dhat - x * r ** 3 * np.mean(dhat * x, axis=-1, keepdims=True)
    return dx, (dy * x * r).reshape(-1, x.shape[-1]).sum(axis=0)


def project_mla(xn, inp, meta, rope_pos):
    """MLA's projections (DeepSeek-V2/V3; DESIGN "Attention variants") on xn [B, T, D]: q [B, T, H,
    d_nope + d_rope] = [c_q W_UQ | rope(c_q W_QR)] with c_q = RMSNorm(xn W_DQ) (xn itself without a
    query rank), k = [c_kv W_UK | rope(xn W_KR) shared by every head] with c_kv = RMSNorm(xn W_DKV),
    v = c_kv W_UV [B, T, H, d_v]. Returns q, k, v and what the backward needs."""
    B, T = xn.shape[0], xn.shape[1]
    m, H, eps = meta["mla"], meta["H"], meta["eps"]
    dn, dr, dv = m["d_nope"], m["d_rope"], m["d_v"]
    W = {k: inp[k].astype(np.float64) for k in ("w_uq", "w_qr", "w_dkv", "kv_norm_w", "w_kr", "w_uk", "w_uv")}
    ctx = dict(W=W, xn=xn)
    if m["q_rank"] > 0:
        W.update({k: inp[k].astype(np.float64) for k in ("w_dq", "q_norm_w")})
        ctx["cq0"] = xn @ W["w_dq"]
        qin, ctx["rq"] = rms_norm(ctx["cq0"], W["q_norm_w"], eps)
    else:
        qin = xn
    ctx["qin"] = qin
    qn = (qin @ W["w_uq"]).reshape(B, T, H, dn)
    qr = (qin @ W["w_qr"]).reshape(B, T, H, dr)
    ctx["ckv0"] = xn @ W["w_dkv"]
    ckv, ctx["rkv"] = rms_norm(ctx["ckv0"], W["kv_norm_w"], eps)
    ctx["ckv"] = ckv
    kr = (xn @ W["w_kr"]).reshape(B, T, 1, dr)
    if meta["rope"]:
        theta = meta.get("rope_theta", 10000.0)
        qr, kr = rope(qr, rope_pos, theta), rope(kr, rope_pos, theta)
    kn = (ckv @ W["w_uk"]).reshape(B, T, H, dn)
    v = (ckv @ W["w_uv"]).reshape(B, T, H, dv)
    q = np.concatenate([qn, qr], axis=-1)
    k = np.concatenate([kn, np.broadcast_to(kr, (B, T, H, dr))], axis=-1)
    return q, k, v, ctx


def project_mla_backward(dq, dk, dv, ctx, meta, rope_pos):
    """MLA's projections' backward: dxn and every weight's gradient from dq, dk, dv (the shared
    rope key's gradient is the sum over the heads of dk's rope columns)."""
    B, T = dq.shape[0], dq.shape[1]
    m, eps = meta["mla"], meta["eps"]
    dn = m["d_nope"]
    W, xn, qin = ctx["W"], ctx["xn"], ctx["qin"]
    rows = lambda t: t.reshape(B * T, -1)
    dqn, dqr, dkn = dq[..., :dn], dq[..., dn:], dk[..., :dn]
    dkr = dk[..., dn:].sum(axis=2, keepdims=True)
    if meta["rope"]:
        theta = meta.get("rope_theta", 10000.0)
        dqr, dkr = rope(dqr, rope_pos, theta, True), rope(dkr, rope_pos, theta, True)
    g = dict(dw_uq=rows(qin).T @ rows(dqn), dw_qr=rows(qin).T @ rows(dqr), dw_uk=rows(ctx["ckv"]).T @ rows(dkn),
             dw_uv=rows(ctx["ckv"]).T @ rows(dv), dw_kr=rows(xn).T @ rows(dkr))
    dckv = rows(dkn) @ W["w_uk"].T + rows(dv) @ W["w_uv"].T
    dckv0, g["dkv_norm_w"] = rms_norm_backward(rows(ctx["ckv0"]), rows(ctx["rkv"]), W["kv_norm_w"], dckv)
    g["dw_dkv"] = rows(xn).T @ dckv0
    dxn = dckv0 @ W["w_dkv"].T + rows(dkr) @ W["w_kr"].T
    dqin = rows(dqn) @ W["w_uq"].T + rows(dqr) @ W["w_qr"].T
    if m["q_rank"] > 0:
        dcq0, g["dq_norm_w"] = rms_norm_backward(rows(ctx["cq0"]), rows(ctx["rq"]), W["q_norm_w"], dqin)
        g["dw_dq"] = rows(xn).T @ dcq0
        dxn = dxn + dcq0 @ W["w_dq"].T
    else:
        dxn = dxn + dqin
    return dxn.reshape(B, T, -1), g


def project_qkv(x, w, wqkv, meta, rope_pos):
    """The attention sub-layer's input side on x [B, T, D]: rstd r, xn = RMSNorm(x) * w, then
    q [B, T, H, d], k, v [B, T, G, d] = xn @ w_qkv, q and k rotated at rope_pos [T] (when meta
    "rope")."""
    B, T = x.shape[0], x.shape[1]
    H, G, d = meta["H"], meta["G"], meta["d"]
    xn, r = rms_norm(x, w, meta["eps"])
    qkv = xn @ wqkv
    q = qkv[..., : H * d].reshape(B, T, H, d)
    k = qkv[..., H * d: (H + G) * d].reshape(B, T, G, d)
    v = qkv[..., (H + G) * d:].reshape(B, T, G, d)
    if meta["rope"]:
        theta = meta.get("rope_theta", 10000.0)
        q, k = rope(q, rope_pos, theta), rope(k, rope_pos, theta)
    return r, xn, q, k, v


def attention_forward(q, k, v, inp, meta, vis):
    """The attention core in float64 on q [B, N, H, d], k [B, N, G, d], v [B, N, G, dv] under the
    visibility vis [N, N] (and the sinks' logits of inp under meta "sinks"): o [B, N, H, dv], lse
    [B, H, N] and what attention_backward needs."""
    rep = q.shape[2] // k.shape[2]
    kh = np.repeat(k, rep, axis=2)  # query head h uses kv head h // rep
    vh = np.repeat(v, rep, axis=2)
    scale = 1.0 / np.sqrt(q.shape[-1])
    s = np.einsum("bqhd,bkhd->bhqk", q, kh) * scale
    s = np.where(vis[None, None], s, -np.inf)
    p, lse = softmax_rows(s, inp, meta)              # [B, H, N, N], [B, H, N]
    o = np.einsum("bhqk,bkhd->bqhd", p, vh)   # [B, N, H, dv]: values are d_v wide under MLA
    return o, lse, dict(q=q, kh=kh, vh=vh, p=p, rep=rep, scale=scale)


def attention_backward(do, o, lse, ctx, inp, meta):
    """The attention core's gradients from do [B, N, H, dv]: dq, dk, dv (summed over each kv head's
    query heads) and under meta "sinks" dsinks [H]."""
    q, kh, vh, p, rep, scale = (ctx[n] for n in ("q", "kh", "vh", "p", "rep", "scale"))
    B, N = q.shape[0], q.shape[1]
    G = kh.shape[2] // rep
    dvh = np.einsum("bhqk,bqhd->bkhd", p, do)
    dp = np.einsum("bqhd,bkhd->bhqk", do, vh)
    delta = np.einsum("bqhd,bqhd->bhq", do, o)[..., None]
    ds = p * (dp - delta)
    g = {}
    if meta.get("sinks"):  # the sink's probability e^(sink - lse) times (0 - delta): it has no value
        g["dsinks"] = -(np.exp(inp["sinks"].astype(np.float64)[None, :, None] - lse) * delta[..., 0]).sum(axis=(0, 2))
    g["dq"] = np.einsum("bhqk,bkhd->bqhd", ds, kh) * scale
    dkh = np.einsum("bhqk,bqhd->bkhd", ds, q) * scale
    g["dk"] = dkh.reshape(B, N, G, rep, -1).sum(axis=3)
    g["dv"] = dvh.reshape(B, N, G, rep, -1).sum(axis=3)
    return g


def reference(inp, meta):
    B, N, H, G, d, D = (meta[k] for k in ("B", "N", "H", "G", "d", "D"))
    eps, theta = meta["eps"], meta.get("rope_theta", 10000.0)
    mla = meta.get("attention") == "mla"
    x, w, wo, dy = (inp[k].astype(np.float64) for k in ("x", "norm_w", "w_o", "dy"))
    pos = np.arange(N)
    # DESIGN's visibility rule on global positions; RoPE positions restart in each document.
    lens = meta.get("doc_lens") or [N]
    rope_pos = pos - np.repeat(np.cumsum([0] + list(lens[:-1])), lens)
    vis = visibility(meta)
    if mla:
        xn, r = rms_norm(x, w, eps)
        q, k, v, mla_ctx = project_mla(xn, inp, meta, rope_pos)
    else:
        wqkv = inp["w_qkv"].astype(np.float64)
        r, xn, q, k, v = project_qkv(x, w, wqkv, meta, rope_pos)
    o, lse, attn_ctx = attention_forward(q, k, v, inp, meta, vis)
    h = x + o.reshape(B, N, -1) @ wo
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
    do = (dh @ wo.T).reshape(o.shape)
    dw_o = o.reshape(B * N, -1).T @ dh.reshape(B * N, D)
    grads = attention_backward(do, o, lse, attn_ctx, inp, meta)
    dq, dk, dv = grads["dq"], grads["dk"], grads["dv"]
    sinks = {"dsinks": grads["dsinks"]} if "dsinks" in grads else {}
    if mla:
        dxn, proj = project_mla_backward(dq, dk, dv, mla_ctx, meta, rope_pos)
    else:
        dq_pre, dk_pre = (rope(dq, rope_pos, theta, True), rope(dk, rope_pos, theta, True)) if meta["rope"] else (dq, dk)
        dqkv = np.concatenate([dq_pre.reshape(B, N, H * d), dk_pre.reshape(B, N, G * d), dv.reshape(B, N, G * d)], axis=-1)
        dxn = dqkv @ wqkv.T
        proj = dict(dw_qkv=xn.reshape(B * N, D).T @ dqkv.reshape(B * N, -1))
    dxn_x, dnorm_w = rms_norm_backward(x, r, w, dxn)
    dx = dh + dxn_x
    return dict(y=y, dx=dx, dnorm_w=dnorm_w, dw_o=dw_o, q=q, k=k, v=v, o=o, do=do,
                dq=dq, dk=dk, dv=dv, lse=lse, **proj, **mlp, **sinks)


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
    own k, v. Returns the forward tensors the pass dumps (decode has no q).

    MLA's decode (meta attention "mla"): the cache is latent_cache [B, C, r_kv + d_rope] = [c_kv |
    k_R] per token, and this reference EXPANDS it, k = [c_kv W_UK | k_R] and v = c_kv W_UV per
    head, the new tokens' k, v from project_mla, then the plain attention at 1/sqrt(d_nope +
    d_rope): an independent check of the absorbed form cpbench runs (DESIGN "Decode"). Its k, v
    are not returned (nothing caches them)."""
    B, H, G, d, D, C = (meta[k] for k in ("B", "H", "G", "d", "D", "cached"))
    eps = meta["eps"]
    decode = meta["pass"] == "decode"
    mla = meta.get("attention") == "mla"
    x, w, wo = (inp[k].astype(np.float64) for k in ("x", "norm_w", "w_o"))
    T = x.shape[1]
    pos = C + np.arange(T)  # --cached excludes --docs, so RoPE positions are the global ones
    if mla:
        m = meta["mla"]
        xn, _ = rms_norm(x, w, eps)
        q, k, v, _ = project_mla(xn, inp, meta, pos)
        lat = inp["latent_cache"].astype(np.float64)
        ckv, kr = lat[..., :m["kv_rank"]], lat[..., m["kv_rank"]:]
        k_cache = np.concatenate([(ckv @ inp["w_uk"].astype(np.float64)).reshape(B, C, H, m["d_nope"]),
                                  np.broadcast_to(kr[:, :, None, :], (B, C, H, m["d_rope"]))], axis=-1)
        v_cache = (ckv @ inp["w_uv"].astype(np.float64)).reshape(B, C, H, m["d_v"])
    else:
        wqkv = inp["w_qkv"].astype(np.float64)
        k_cache, v_cache = (inp[k].astype(np.float64) for k in ("k_cache", "v_cache"))
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
    y = x + o.reshape(B, T, -1) @ wo  # o: d_v wide per head under MLA
    if meta.get("block") == "full":  # the SwiGLU MLP sub-layer, forward only
        w2, wg, wu, wd = (inp[k].astype(np.float64) for k in ("norm2_w", "w_gate", "w_up", "w_down"))
        hn = y * w2 / np.sqrt(np.mean(y * y, axis=-1, keepdims=True) + eps)
        a = hn @ wg
        y = y + (a / (1.0 + np.exp(-a)) * (hn @ wu)) @ wd
    out = dict(y=y, o=o, lse=lse) if mla else dict(y=y, k=k, v=v, o=o, lse=lse)
    if not decode:  # decode's q is recomputed on every rank and not dumped
        out["q"] = q
    return out
