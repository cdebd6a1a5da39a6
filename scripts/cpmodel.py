#!/usr/bin/env python3
"""cpbench's analytic model in Python, written once: the bytes each part sends, the KV cache, the
whole-model memory estimate and the FLOPs, as docs/DESIGN.md states them.

The C++ computes the same figures in its parts (bench/parts/, bench/strategies/, bench/block/,
bench/metrics.cpp); this module is the second, independent implementation the Python checkers
(tests/python/check_report.py, check_dry_run.py, make_synthetic_report.py, tests/sim/) and
scripts compare the C++ against. One function per part, named after the C++ function it mirrors;
a strategy's figure is a composition of them (as its `predicted_bytes` composes the C++ parts).
A new part adds one function here (docs/CONTRIBUTING.md).

Conventions (DESIGN "Analytic communication model"): bytes sent per rank per layer; `elem` is the
run dtype's size (s), `acc` the float32 accumulators' and partials' (s_acc = 4); `tokens` is the
tokens one rank holds times the batch (T = B*N/P); `hq` = H*d and `hk` the KV width (hk' =
d*max(G, t*U) after replication); phase pairs are (fwd, bwd) with the backward of training
(`for_pass` drops it for the forward-only passes). Every division of the model is exact (the
constraints make it so): `div` raises ValueError on a remainder instead of rounding.

Importing: scripts/ is this file's folder; tests insert it in sys.path (see test_cpmodel.py).
"""

ACC_BYTES = 4  # s_acc: float32 dK,dV accumulators, pass-Q and decode partials (o, lse)
LSE_BYTES = 4  # the lse of a partial, float32 in every dtype
# The whole-model estimate's bytes per parameter held (bench/metrics.h kWeightBytesPerParam ...):
# bf16 weights, bf16 grads, fp32 master weights and two fp32 Adam moments.
WEIGHT_BYTES_PER_PARAM, GRAD_BYTES_PER_PARAM, OPTIMIZER_BYTES_PER_PARAM = 2, 2, 12
# DESIGN "FLOPs, MFU and HFU": the attention backward is 2x the forward (model), 2.5x (hardware:
# it recomputes the scores) (kernels/backend.h kAttnBwdModelFactor, kAttnBwdHardwareFactor).
ATTN_BWD_MODEL_FACTOR, ATTN_BWD_HARDWARE_FACTOR = 2, 2.5

_ELEM = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 2}  # fp8: e4m3 values held in bf16 storage


# --- shared rules ------------------------------------------------------------------------------

def div(a, b):
    """a / b, exact: DESIGN "Analytic communication model": divisions are exact (the constraints
    make them so); a remainder is a model or shape error, raised, never rounded away."""
    q, r = divmod(a, b)
    if r:
        raise ValueError(f"cpmodel: {a} / {b} is not exact (DESIGN: the model's divisions are exact)")
    return q


def acc_bytes(acc_dtype):
    """s_acc of the ring's dK,dV accumulators for config.acc_dtype (--acc-dtype; absent before
    schema 8): f32 4, bf16 2. Mirrors LayerShape::acc_bytes (bench/strategy.h)."""
    return {None: ACC_BYTES, "f32": ACC_BYTES, "bf16": 2}[acc_dtype]


def part_bytes(partial_dtype):
    """s_part of pass-Q's and decode's partials (their o; lse stays float32) for
    config.partial_dtype (--partial-dtype; absent before schema 8): f32 4, bf16 2. Mirrors
    LayerShape::acc_bytes in a forward pass (bench/strategy.h); DESIGN "What travels"."""
    return {None: ACC_BYTES, "f32": ACC_BYTES, "bf16": 2}[partial_dtype]


def elem_bytes(dtype):
    """Bytes of one element of the run dtype (s): fp32 4, bf16 and fp16 2, fp8 2 (--dtype fp8 keeps
    its e4m3 values in bf16 tensors, and they travel so). Mirrors dtype_size (kernels/tensor.h) of
    RunConfig::storage_dtype; DESIGN "Communication"."""
    return _ELEM[dtype]


def sublayers(block):
    """Sub-layers of the block: 1 under --block attn, 2 under full (attention, then the SwiGLU MLP).
    Mirrors `s.full_block ? 2 : 1` (bench/strategies/megatron_sp.cpp, ulysses_ring_layer.cpp,
    Block::decode_prediction in bench/block/block.cpp); DESIGN "The transformer block"."""
    return 2 if block == "full" else 1


def replicated_kv_heads(G, u):
    """KV heads across a head group of u ranks after replication: max(G, u) (u > G: each KV head
    replicated u/G times). Mirrors replicated_kv_heads (bench/strategy.h); DESIGN "Ulysses KV
    replication"."""
    return max(G, u)


def tokens_per_rank(B, N, P):
    """T = B*N/P: the token rows one rank holds (all batch rows). DESIGN "Notation"."""
    return div(B * N, P)


def for_pass(fwd_bwd, pass_):
    """(fwd, bwd) as a pass sends them: the forward-only passes (prefill, decode) send no backward
    bytes. Mirrors predicted_for (bench/harness.cpp) and the dry run's `forward_only()`
    (bench/dry_run.cpp); DESIGN "Passes"."""
    fwd, bwd = fwd_bwd
    return (fwd, 0 if pass_ in ("prefill", "decode") else bwd)


def levels_total(levels):
    """(fwd, bwd) summed over a {level: (fwd, bwd)} map (a prediction's total per phase)."""
    return (sum(f for f, _ in levels.values()), sum(b for _, b in levels.values()))


# --- tensor-parallel level (megatron-sp, usp's tp level) ------------------------------------------

def tp_collective_bytes(tokens, D, t, elem):
    """One all-gather (or reduce-scatter) of a sub-layer's [tokens, D] rows over a TP group of t:
    s*T*D*(t-1) per rank. Mirrors TpGroup::gather and the row-parallel GEMM's reduce-scatter (TpGroup,
    bench/block/block.cpp);
    DESIGN "Analytic communication model" (megatron-sp)."""
    return elem * tokens * D * (t - 1)


def tp_level_bytes(tokens, D, t, elem):
    """(fwd, bwd) of ONE sub-layer on a tp level of t: forward all-gather xn before the
    column-parallel GEMM and reduce-scatter after the row-parallel one (2*s*T*D*(t-1)); backward
    all-gather dy, reduce-scatter dxn, all-gather xn again (3*s*T*D*(t-1)). Call it once per
    sub-layer with that sub-layer's degree. Mirrors tp_sublayer_bytes (bench/parts/tp_level.cpp);
    DESIGN "Analytic communication model", "Tensor
    parallelism inside the CP mesh"."""
    c = tp_collective_bytes(tokens, D, t, elem)
    return (2 * c, 3 * c)


def mlp_degree(mesh, t):
    """The MLP sub-layer's tensor-parallel degree: the result's mesh.mlp_tp (--mlp-tp, present only
    when it differs from the attention's) or the attention's t. Mirrors mlp_degree
    (bench/parts/sublayer_mesh.cpp); DESIGN "Per-sub-layer meshes"."""
    return mesh.get("mlp_tp") or t


def mlp_level(mesh):
    """The level the MLP's collectives are on: "mlp_tp" under its own mesh, else the attention's
    "tp". Mirrors mlp_level (bench/parts/sublayer_mesh.cpp)."""
    return "mlp_tp" if mesh.get("mlp_tp") else "tp"


def mlp_bytes(tokens, D, mesh, t, elem, block):
    """{level: (fwd, bwd)} of the MLP sub-layer in training and prefill (none under --block attn):
    tp_level_bytes on its own level with its own degree (mlp_degree). The block adds it to the
    strategy's attention bytes. Mirrors mlp_bytes (bench/parts/sublayer_mesh.cpp) and
    Block::predicted_bytes (bench/block/block.cpp); DESIGN "Per-sub-layer meshes"."""
    if sublayers(block) == 1:
        return {}
    return {mlp_level(mesh): tp_level_bytes(tokens, D, mlp_degree(mesh, t), elem)}


def add_levels(*parts):
    """{level: (fwd, bwd)}: the sum of several such maps (a level in several adds up)."""
    out = {}
    for p in parts:
        for level, (f, b) in p.items():
            of, ob = out.get(level, (0, 0))
            out[level] = (of + f, ob + b)
    return out


def megatron_sp_bytes(B, N, D, P, elem, block, mesh=None):
    """{level: (fwd, bwd)} of megatron-sp (the mesh {tp = P}) in training and prefill: the attention's
    tp_level_bytes over P, and the MLP's (mlp_bytes: over P too unless --mlp-tp gives it its own
    level). Mirrors MegatronSp::attention_bytes (bench/strategies/megatron_sp.cpp) and the block's MLP
    term; DESIGN "Analytic communication model"."""
    T = tokens_per_rank(B, N, P)
    return add_levels({"tp": tp_level_bytes(T, D, P, elem)}, mlp_bytes(T, D, mesh or {}, P, elem, block))


# --- Ulysses level --------------------------------------------------------------------------------

def ulysses_a2a_bytes(tokens, hq, hk, U, elem, hqv=None, hkv=None):
    """One phase's all-to-all bytes over a Ulysses group of U (the same forward and backward):
    q, k, v out and o back, s*T*(2hq + 2hk')*(U-1)/U (hk' after replication); under MLA o and v
    are hqv = H*d_v and hkv = Ge*d_v per token (default hq, hk). Mirrors ulysses_level_bytes
    (bench/parts/ulysses_level.cpp); DESIGN "Analytic communication model", "Ulysses KV replication", "MLA"."""
    hqv, hkv = hq if hqv is None else hqv, hk if hkv is None else hkv
    return div(elem * tokens * (hq + hk + hqv + hkv) * (U - 1), U)


def ulysses_latent_bytes(tokens, H, d, dv, latent, U, elem, t=1):
    """(fwd, bwd) of a Ulysses level under MLA's --mla-travel latent: q's all-to-all and o's back,
    s*T*H*(d + d_v)*(U-1)/U each phase (do out, dq back in the backward), the latent's all-gather
    s*T*latent*(U-1) forward and its float32 gradients' reduce-scatter 4*T*latent*(U-1) backward
    (latent = r_kv + d_rope: mla_latent_row). Under a tp level of t every tp member gathers its TP
    group's t*T rows of latent (the all-to-alls' bytes are unchanged: t*T rows of H/t heads).
    Mirrors ulysses_latent_bytes (bench/parts/ulysses_level.cpp)."""
    a2a = div(elem * tokens * H * d * (U - 1), U) + div(elem * tokens * H * dv * (U - 1), U)
    return (a2a + elem * t * tokens * latent * (U - 1), a2a + 4 * t * tokens * latent * (U - 1))


def ulysses_uneven_split(H, G, U):
    """--uneven-heads: member j's query heads [qf[j], qf[j] + qn[j]) = [floor(j*H/U), floor((j+1)*H/U))
    and the KV heads they use, [kf[j], kf[j] + kn[j]) with rep = H/G (a KV head whose query heads
    straddle two members is in both ranges). Mirrors UlyssesShape::q_split, kv_split
    (bench/parts/ulysses_level.cpp); DESIGN "Uneven heads"."""
    rep = div(H, G)
    qf = [j * H // U for j in range(U)]
    qn = [(j + 1) * H // U - qf[j] for j in range(U)]
    kf = [qf[j] // rep for j in range(U)]
    kn = [(qf[j] + qn[j] - 1) // rep - kf[j] + 1 for j in range(U)]
    return qf, qn, kf, kn


def ulysses_uneven_bytes(tokens, H, G, d, U, u, elem, dv=None):
    """(fwd, bwd) bytes member u of a Ulysses group sends under --uneven-heads, `tokens` the rows it
    exchanges (a TP group's under tp, H and G then a tp rank's heads): to each other member j,
    forward q, k, v of j's heads of its tokens and o of its own heads of j's tokens, backward do of
    j's heads and dq, dk, dv of its own. Mirrors ulysses_level_bytes_uneven
    (bench/parts/ulysses_level.cpp); DESIGN "Uneven heads". v, o, do, dv are dv wide (MLA's d_v; default d)."""
    dv = d if dv is None else dv
    _, qn, _, kn = ulysses_uneven_split(H, G, U)
    fwd = sum(elem * tokens * (qn[j] * d + kn[j] * (d + dv) + qn[u] * dv) for j in range(U) if j != u)
    bwd = sum(elem * tokens * (qn[j] * dv + qn[u] * d + kn[u] * (d + dv)) for j in range(U) if j != u)
    return fwd, bwd


# --- ring level: single ring, the three travel policies --------------------------------------------

MX_BLOCK = 32  # values per fp8 scale under --fp8-scaling block (kernels/float8.h kMxBlock)


def kv_transit_bytes(elems, elem, comm_dtype=None, scaling="block"):
    """Bytes of a K,V ring block of `elems` values in transit (--comm-dtype): elem*elems in the run
    dtype (None, "run"), 2*elems as bf16, or under fp8 one e4m3 code per value plus its scale bytes,
    one per 32 values (block, rounded up) or one per block (tensor; none for an empty block).
    Mirrors kv_transit_bytes (bench/parts/ring_travel.cpp) and e4m3_encoded_bytes (kernels/float8.h)."""
    if comm_dtype in (None, "run"):
        return elem * elems
    if comm_dtype == "bf16":
        return 2 * elems
    if comm_dtype != "fp8":
        raise ValueError(f"cpmodel: unknown comm_dtype {comm_dtype!r}")
    if elems == 0:
        return 0
    return elems + (-(-elems // MX_BLOCK) if scaling == "block" else 1)


def ring_kv_bytes(tokens, hk, K, elem, acc=ACC_BYTES, hv=None, comm_dtype=None, scaling="block"):
    """(fwd, bwd) of pass-KV on a single ring run for K hops (K = R-1 for the full ring, K_eff
    under a window or documents; --cached: `tokens` is the whole key block, cache shard included):
    the k|v block K hops each pass, s*T*2hk*K; backward adds the float32 dK,dV accumulators, K hops
    with it and one send to the owner, s_acc*T*2hk*(K+1) (0 when K = 0). Mirrors
    RingCore::predicted_bytes (bench/parts/ring_core.cpp); DESIGN "Analytic communication model",
    "Ring hop truncation", "Persistent-KV prefill". Under MLA v is hv = G*d_v per token (default hk):
    the block is T*(hk + hv). --comm-dtype: each hop's block is kv_transit_bytes of its T*(hk + hv) values."""
    if K <= 0:
        return (0, 0)
    row = hk + (hk if hv is None else hv)
    kv = kv_transit_bytes(tokens * row, elem, comm_dtype, scaling) * K
    return (kv, kv + acc * tokens * row * (K + 1))


def mla_latent_row(mla):
    """The values per token of an MLA ring block under --mla-travel latent: the KV latent and the
    shared rope key, r_kv + d_rope (config.mla, schema 10). Mirrors LayerShape::ring_block_row
    (bench/strategy.h); pass it as ring_kv_bytes's hk with hv = 0."""
    return mla["kv_rank"] + mla["d_rope"]


def pass_q_partial_bytes(tokens_q, hq, heads, acc=ACC_BYTES, ho=None):
    """One pass-Q partial: o in float32 [Tq, hq] and lse [Tq, H]: s_acc*Tq*hq + 4*Tq*H (o is
    ho = H*d_v per token under MLA, default hq). Mirrors RingCore::partial_bytes (bench/parts/ring_core.h); DESIGN "pass-Q"."""
    return acc * tokens_q * (hq if ho is None else ho) + LSE_BYTES * tokens_q * heads


def pass_q_bytes(tokens_q, hq, heads, K, elem, acc=ACC_BYTES, ho=None, comm_dtype=None, scaling="block"):
    """(fwd, bwd) of --ring-pass q on a single ring of K hops: the Q block (run dtype, or encoded
    under --comm-dtype: kv_transit_bytes) and its partial travel K hops, one more send returns the
    partial: s_q*K + partial*(K+1) (0 when K = 0); bwd 0. Mirrors travel_q_bytes
    (bench/parts/ring_travel_q.cpp); DESIGN "pass-Q"."""
    if K <= 0:
        return (0, 0)
    part = pass_q_partial_bytes(tokens_q, hq, heads, acc, ho)
    return ((kv_transit_bytes(tokens_q * hq, elem, comm_dtype, scaling) + part) * K + part, 0)


def pass_q_a2a_bytes(tokens_q, hq, heads, K, elem, acc=ACC_BYTES, ho=None, comm_dtype=None, scaling="block"):
    """(fwd, bwd) of --ring-pass q-a2a (Meta's pass-Q) on a single ring of K hops: the Q block K
    hops (encoded under --comm-dtype), then each of the K partials once to its owner:
    s_q*K + partial*K; bwd 0. Mirrors travel_q_a2a_bytes (bench/parts/ring_travel_q_a2a.cpp);
    DESIGN "pass-Q" (Meta's pass-Q)."""
    if K <= 0:
        return (0, 0)
    return (kv_transit_bytes(tokens_q * hq, elem, comm_dtype, scaling) * K +
            pass_q_partial_bytes(tokens_q, hq, heads, acc, ho) * K, 0)


# The travel policies, one entry each as bench/parts/ring_travel.h's table: a single ring's (fwd,
# bwd) from what a rank moves (tokens_kv, hk, tokens_q, hq, heads) over K hops, and whether the
# policy runs on a double ring too.
RING_TRAVELS = {
    "kv": (lambda tkv, hk, tq, hq, heads, K, elem, acc, hv, ho, cd, sc: ring_kv_bytes(tkv, hk, K, elem, acc, hv, cd, sc),
           True),
    "q": (lambda tkv, hk, tq, hq, heads, K, elem, acc, hv, ho, cd, sc: pass_q_bytes(tq, hq, heads, K, elem, acc, ho, cd, sc),
          True),
    "q-a2a": (lambda tkv, hk, tq, hq, heads, K, elem, acc, hv, ho, cd, sc:
              pass_q_a2a_bytes(tq, hq, heads, K, elem, acc, ho, cd, sc), False),
}


# --- ring level: the double ring (inner rings of w, W = R/w windows) ----------------------------------

def double_ring_full_hops(w, W):
    """(T_o, [J(t)]) of the untruncated double ring: W-1 rounds after the first, w-1 inner hops in
    each of the W rounds. Mirrors DoubleRingHops for the full schedule (bench/parts/double_ring_core.h);
    DESIGN "Double ring hops"."""
    return W - 1, [w - 1] * W


def double_ring_sends(rounds, inner):
    """{(phase, level): (block sends, accumulator sends)} of the double ring's K,V schedule run for
    T_o = `rounds` outer hops and J(t) = `inner`[t] inner hops: forward S = sum J(t) inner and T_o
    outer block sends; backward the same blocks plus A_in = sum over J(t) > 0 of J(t)+1 inner and
    A_out = T_o+1 (T_o > 0) outer accumulator sends. Mirrors DoubleRingCore::predicted_bytes
    (bench/parts/double_ring_core.cpp); DESIGN "Double ring hops"."""
    S = sum(inner)
    a_in = sum(j + 1 for j in inner if j > 0)
    a_out = rounds + 1 if rounds > 0 else 0
    return {("fwd", "ring_inner"): (S, 0), ("fwd", "ring_outer"): (rounds, 0),
            ("bwd", "ring_inner"): (S, a_in), ("bwd", "ring_outer"): (rounds, a_out)}


def double_ring_kv_bytes(tokens, hk, rounds, inner, elem, acc=ACC_BYTES, hv=None, comm_dtype=None, scaling="block"):
    """{level: (fwd, bwd)} of pass-KV on a double ring (levels ring_inner, ring_outer): each block
    send s*T*2hk (--comm-dtype: kv_transit_bytes of its T*2hk values), each accumulator send
    s_acc*T*2hk, counted by double_ring_sends. Mirrors DoubleRingCore::predicted_bytes
    (bench/parts/double_ring_core.cpp); DESIGN "Double ring hops"."""
    block = tokens * (hk + (hk if hv is None else hv))  # k|v (v: hv = G*d_v under MLA)
    sent = kv_transit_bytes(block, elem, comm_dtype, scaling)
    sends = double_ring_sends(rounds, inner)
    out = {}
    for level in ("ring_inner", "ring_outer"):
        (fb, _), (bb, ba) = sends[("fwd", level)], sends[("bwd", level)]
        out[level] = (sent * fb, sent * bb + acc * block * ba)
    return out


def double_ring_pass_q_bytes(tokens_q, hq, heads, rounds, inner, elem, acc=ACC_BYTES, ho=None):
    """{level: (fwd, 0)} of --ring-pass q on a double ring: the Q blocks on the backward's K,V path
    and their partials on its accumulator path (double_ring_sends' backward counts with a Q block,
    s*Tq*hq, per block send and a partial per accumulator send). Mirrors
    DoubleRingCore::predicted_bytes_pass_q (bench/parts/double_ring_core.cpp); DESIGN "pass-Q"."""
    qb, pb = elem * tokens_q * hq, pass_q_partial_bytes(tokens_q, hq, heads, acc, ho)
    sends = double_ring_sends(rounds, inner)
    return {level: (qb * sends[("bwd", level)][0] + pb * sends[("bwd", level)][1], 0)
            for level in ("ring_inner", "ring_outer")}


def ring_level_bytes(travel, R, w, tokens_kv, hk, tokens_q, hq, heads, elem, acc=ACC_BYTES, hops=None, hv=None, ho=None,
                     comm_dtype=None, scaling="block"):
    """(fwd, bwd) of a ring level of R positions for the travel policy `travel` (RING_TRAVELS): a
    single ring when w is 0/None (K = `hops`, default R-1), else a double ring of inner rings of w
    (`hops` = (T_o, [J(t)]), default the full schedule). Mirrors ring_level_bytes
    (bench/parts/ring_schedule.cpp, the single and double schedules); DESIGN "Strategies" (strategies
    as compositions of parts). comm_dtype/scaling (--comm-dtype): the traveling blocks encoded (K,V's
    under kv, single or double; Q's under q and q-a2a, single rings only)."""
    single, on_double = RING_TRAVELS[travel]
    if w:
        if not on_double:
            raise ValueError(f"cpmodel: {travel} is not defined on a double ring (DESIGN: pass-Q)")
        T, J = hops if hops is not None else double_ring_full_hops(w, div(R, w))
        if travel == "q":
            if comm_dtype not in (None, "run"):
                raise ValueError("cpmodel: --comm-dtype on a double ring encodes K,V blocks only")
            return levels_total(double_ring_pass_q_bytes(tokens_q, hq, heads, T, J, elem, acc, ho))
        return levels_total(double_ring_kv_bytes(tokens_kv, hk, T, J, elem, acc, hv, comm_dtype, scaling))
    return single(tokens_kv, hk, tokens_q, hq, heads, R - 1 if hops is None else hops, elem, acc, hv, ho, comm_dtype,
                  scaling)


def dynamic_ring_bytes(degrees, tokens_by_degree, P, kv_row, elem, acc=ACC_BYTES):
    """([fwd], [bwd]) per rank of ring --balance dynamic: per group size c > 1 (`degrees`), a ring
    over each aligned group of c ranks (none past the last whole group); member m sends the blocks
    of members m, m-1, ..., m-c+2 (c-1 hops; member x holds `tokens_by_degree`[x][i] tokens of
    group size degrees[i]; kv_row = B*G*(d + d_v) elements of k and v per token: 2*B*G*d without MLA) in each pass, and in the
    backward the float32 accumulators of every other member's block. Mirrors TokenLayout::dynamic_ring_bytes
    (bench/parts/balance.cpp); DESIGN "Balancing packed documents"."""
    fwd, bwd = [0] * P, [0] * P
    for i, c in enumerate(degrees):
        if c == 1:
            continue
        for q in range(P):
            first = 0 if c == P else q // c * c
            if first + c > P:
                continue  # past the last whole group: none of this size's documents
            m = q - first
            n = [tokens_by_degree[first + x][i] for x in range(c)]
            kv = sum(elem * kv_row * n[(m - h + 1) % c] for h in range(1, c))
            fwd[q] += kv
            bwd[q] += kv + sum(acc * kv_row * n[x] for x in range(c) if x != m)
    return fwd, bwd


def spread_tiers(nbytes, g, same_node_peers):
    """(intra-node, inter-node) bytes of a share spread over a level of g members (a collective,
    `to = 0`): g-1 equal chunks, one per other member, `same_node_peers` of them on this rank's
    node. Mirrors predict_tiers (bench/tiers.cpp) and split_by_tier (comm/comm_log.cpp); DESIGN
    "Nodes and tiers"."""
    chunk = div(nbytes, g - 1)
    return (chunk * same_node_peers, chunk * (g - 1 - same_node_peers))


# --- strategies composed of the parts --------------------------------------------------------------

def allgather_kv_bytes(tokens, hk, P, elem, acc=ACC_BYTES, hv=None, comm_dtype=None, scaling="block"):
    """(fwd, bwd) of allgather-kv: K,V all-gathered in each pass, s*T*2hk*(P-1), and the float32
    dK,dV reduce-scattered once, s_acc*T*2hk*(P-1) (2hk read as hk + hv, hv = G*d_v, under MLA).
    --comm-dtype: each gathered chunk is kv_transit_bytes of its T*2hk values. Mirrors
    AllgatherKv::predicted_bytes (bench/strategies/allgather_kv.cpp); DESIGN "Analytic communication model"."""
    row = hk + (hk if hv is None else hv)
    gather = kv_transit_bytes(tokens * row, elem, comm_dtype, scaling) * (P - 1)
    return (gather, gather + acc * tokens * row * (P - 1))


def ulysses_ring_bytes(tokens, tokens_new, H, G, d, D, t, U, R, elem, block, acc=ACC_BYTES, travel="kv", w=0,
                       hops=None, mesh=None, dv=None, latent=0, comm_dtype=None, scaling="block"):
    """{level: (fwd, bwd)} of usp's mesh t x U x R (ulysses: U = P; the ring family: t = U = 1,
    R = P): the attention's tp level on the new tokens (tp_level_bytes) and the MLP's (mlp_bytes: on
    its own level when the result's `mesh` has mlp_tp), the all-to-all of the
    new tokens (ulysses_a2a_bytes, hk' = d*max(G, tU)) and the ring level (ring_level_bytes: K,V
    blocks of `tokens` rows, cache shard included; Q blocks of the new tokens, all H heads).
    tokens = B*N/P; tokens_new = B*(N-C)/P (= tokens without --cached). Mirrors
    UlyssesRingLayer::predicted_bytes (bench/strategies/ulysses_ring_layer.cpp); DESIGN "Analytic
    communication model", "Tensor parallelism inside the CP mesh", "Persistent-KV prefill". Under
    MLA (dv: d_v) v and o are d_v wide per head; under its latent travel (latent: r_kv + d_rope,
    mla_latent_row) the Ulysses level is ulysses_latent_bytes and a ring block the ring index's
    t*U*T rows of latent. comm_dtype/scaling (--comm-dtype): the single ring level's K,V blocks encoded."""
    dv = d if dv is None else dv
    Ge = replicated_kv_heads(G, t * U)
    hq, hk, hqv, hkv = H * d, d * Ge, H * dv, dv * Ge
    a2a = ulysses_a2a_bytes(tokens_new, hq, hk, U, elem, hqv, hkv)
    ulysses = (a2a, a2a)
    if latent:
        ulysses = ulysses_latent_bytes(tokens_new, H, d, dv, latent, U, elem, t) if U > 1 else (0, 0)
        hk, hkv = t * U * latent, 0
    return add_levels({"tp": tp_level_bytes(tokens_new, D, t, elem), "ulysses": ulysses,
                       "ring": ring_level_bytes(travel, R, w, tokens, hk, tokens_new, hq, H, elem, acc, hops, hkv, hqv,
                                                comm_dtype, scaling)},
                      mlp_bytes(tokens_new, D, mesh or {}, t, elem, block))


def head_ring_split(strategy, mesh, P):
    """(t, U, R) of a cached prefill or decode result: the ranks the heads are split over (t*U) and
    the ranks the cache's tokens are split over (R). usp: its tp, Ulysses and ring levels; ulysses
    U = P; megatron-sp t = P; single (1, 1, 1); every other strategy (1, 1, P). `mesh` is a
    result's mesh block. Mirrors Block::decode_groups and the strategies' overrides
    (bench/block/block.h, bench/strategies/); DESIGN "Decode", "Persistent-KV prefill"."""
    if strategy == "single":
        return 1, 1, 1
    if strategy == "megatron-sp":
        return P, 1, 1
    t = (mesh.get("tp") or 1) if strategy == "usp" else 1
    U = (mesh.get("ulysses") or 1) if strategy in ("usp", "ulysses") else 1
    return t, U, P // (t * U)


def decode_merge_levels(strategy, mesh, R):
    """[(level, size)]: the levels decode merges its partials over. usp's double ring level: its
    inner ring of w, then across the R/w inner rings; usp and ulysses: the ring level of R; the
    ring family and double-ring: the CP group ("cp", R = P); megatron-sp and single: none. Mirrors
    the merges UlyssesRingLayer::predicted_bytes passes to Block::decode_prediction
    (bench/strategies/ulysses_ring_layer.cpp) and Block::decode_groups (bench/block/block.cpp);
    DESIGN "Decode"."""
    if strategy in ("single", "megatron-sp"):
        return []
    w = mesh.get("inner_ring") if strategy == "usp" else None
    if w:
        return [("ring_inner", w), ("ring_outer", div(R, w))]
    return [("ring" if strategy in ("usp", "ulysses") else "cp", R)]


def decode_partial_bytes(B, hq, d, acc=ACC_BYTES):
    """One decode step's partial of a rank: o in float32 [B, hq, d] and lse [B, hq] (hq: the head
    group member's query heads). Mirrors `partial` in Block::decode_prediction (bench/block/block.cpp);
    DESIGN "Decode"."""
    return acc * B * hq * d + LSE_BYTES * B * hq


def decode_merge_bytes(steps, B, hq, d, merges, acc=ACC_BYTES):
    """{level: bytes} of decode's merges: per step one all-gather of every member's partial over
    each merge level [(level, size)], S*partial*(size-1). Mirrors the merge loop of
    Block::decode_prediction (bench/block/block.cpp); DESIGN "Decode"."""
    return {level: steps * decode_partial_bytes(B, hq, d, acc) * (size - 1) for level, size in merges if size > 1}


def decode_head_gather_bytes(steps, B, hq, d, U, elem):
    """Decode's all-gather of the merged o (run dtype, [B, hq, d] per member) over a head group of
    U (usp's Ulysses level): S*s*B*hq*d*(U-1). Mirrors ulysses_decode_bytes
    (bench/parts/ulysses_level.cpp); DESIGN "Decode"."""
    return steps * elem * B * hq * d * (U - 1)


def decode_tp_bytes(steps, B, D, t, elem):
    """Decode's tp level for ONE sub-layer: x is replicated, so the row-parallel GEMM's [B, D]
    output is all-reduced, a reduce-scatter then an all-gather of B*D/t elements per member:
    S*2*s*(B*D/t)*(t-1). Call it once per sub-layer with its degree. Mirrors the "tp" share of
    Block::decode_prediction and TpGroup::reduce (bench/block/block.cpp); DESIGN "Decode"."""
    return steps * 2 * elem * div(B * D, t) * (t - 1)


def decode_bytes(steps, B, H, d, D, merges, U, tp_levels, elem, acc=ACC_BYTES, hq=None):
    """{level: bytes} of one decode iteration's forward (bwd 0): the merges on H/(tU) query heads,
    the head group's o all-gather, and each sub-layer's tp all-reduce. tp_levels: one
    (level, degree) per sub-layer, attention first (today [("tp", t)] * sublayers(block)); the
    attention's degree t splits the heads. `hq`: the member's own query heads under --uneven-heads
    (ulysses_uneven_split). Mirrors Block::decode_prediction (bench/block/block.cpp); DESIGN
    "Decode", "Uneven heads"."""
    t = tp_levels[0][1] if tp_levels else 1
    hq = div(H, t * U) if hq is None else hq
    out = decode_merge_bytes(steps, B, hq, d, merges, acc)
    if U > 1:
        out["ulysses"] = decode_head_gather_bytes(steps, B, hq, d, U, elem)
    for level, deg in tp_levels:
        if deg > 1:
            out[level] = out.get(level, 0) + decode_tp_bytes(steps, B, D, deg, elem)
    return out


# --- KV cache and memory -----------------------------------------------------------------------

def helix_attention_bytes(steps, B, H, d, D, P, merge_level, R, elem, acc=ACC_BYTES):
    """{level: bytes} of Helix decode's attention output (--pass decode --mlp-tp P, attention tp < P):
    per step one all-to-all over the merge level of R, each member sending the H/P heads' partial
    (o float32, lse) that each of the R-1 others owns, S*decode_partial(H/P)*(R-1); then w_o's B x D
    output all-reduced over all P ranks on "mlp_tp" (decode_tp_bytes). Replaces the merges, the
    Ulysses o gather and the attention's tp all-reduce of decode_bytes. Mirrors
    helix_attention_bytes (bench/parts/sublayer_mesh.cpp); DESIGN "Per-sub-layer meshes"."""
    out = {merge_level: steps * decode_partial_bytes(B, div(H, P), d, acc) * (R - 1)} if R > 1 else {}
    out["mlp_tp"] = decode_tp_bytes(steps, B, D, P, elem)
    return out


def is_helix(mesh, t, P):
    """Helix decode: the MLP's own level spans all P > 1 ranks and the attention's tp t does not.
    Mirrors helix (bench/parts/sublayer_mesh.cpp; the caller passes a decode result's mesh)."""
    return P > 1 and mesh.get("mlp_tp") == P and t < P


def decode_block_bytes(steps, B, H, d, D, merges, U, t, mesh, P, block, elem, acc=ACC_BYTES, hq=None):
    """{level: bytes} of one decode iteration of the layer (attention, and the MLP under --block
    full on its own level, mlp_degree): decode_bytes, or under Helix (is_helix)
    helix_attention_bytes over the single merge level plus the MLP's all-reduce over all P. Mirrors
    Block::predicted_bytes with Block::decode_prediction (bench/block/block.cpp); DESIGN "Decode",
    "Per-sub-layer meshes"."""
    mlp = [(mlp_level(mesh), mlp_degree(mesh, t))] * (sublayers(block) - 1)
    if not is_helix(mesh, t, P):
        return decode_bytes(steps, B, H, d, D, merges, U, [("tp", t)] + mlp, elem, acc, hq)
    level, size = merges[0] if merges else ("cp", 1)
    out = helix_attention_bytes(steps, B, H, d, D, P, level, size, elem, acc)
    for lv, deg in mlp:
        out[lv] = out.get(lv, 0) + decode_tp_bytes(steps, B, D, deg, elem)
    return out


def kv_cache_bytes(B, C, G, d, elem, t=1, U=1, R=1, dv=None, latent=None):
    """The k and v of the cache shard one rank holds: C/R tokens (R: the ranks the tokens are split
    over, head_ring_split) for max(G, tU)/(tU) KV heads: 2*B*(C/R)*(max(G,tU)/(tU))*d*s (C = 1:
    the bytes per cached token held; v is dv wide when given, MLA's d_v: (d + dv) for 2d). MLA's
    decode caches one latent row per token instead (`latent` = r_kv + d_rope values, whole on every
    member of the head group): B*(C/R)*latent*s. Mirrors Block::cache_held (bench/block/block.cpp)
    and the harness's per-token figure; DESIGN "Persistent-KV prefill" (Report), "Decode"."""
    if latent is not None:
        return B * div(C, R) * latent * elem
    return B * div(C, R) * div(replicated_kv_heads(G, t * U), t * U) * (d + (d if dv is None else dv)) * elem


def block_parameters(D, H, G, d, F, t):
    """Parameters one rank holds of one whole block (--block full) on a tp level of t: the two norms
    whole; w_qkv, w_o by heads (H/t query heads, max(G, t)/t KV heads); the MLP's three [D, F]
    matrices by F/t columns. Mirrors the weights AttentionSubLayer::setup and MlpSubLayer::setup
    register (bench/block/block.cpp; Block::held_share); DESIGN "The transformer block", README
    "Whole-model memory estimate"."""
    hl, gl = div(H, t), div(replicated_kv_heads(G, t), t)
    return 2 * D + D * (hl + 2 * gl) * d + hl * d * D + 3 * D * div(F, t)


def block_parameter_groups(D, H, G, d, F, t, mlp_tp):
    """One block's parameters on a rank by the ranks that hold them (DESIGN "Memory"): (norms,
    attention, mlp) = (2*D, w_qkv + w_o of H/t query heads and max(G, t)/t KV heads, the MLP's
    three [D, F] matrices by F/mlp_tp columns). Their sum is block_parameters when mlp_tp = t.
    Mirrors Block::held_share (bench/block/block.cpp)."""
    hl, gl = div(H, t), div(replicated_kv_heads(G, t), t)
    return 2 * D, D * (hl + 2 * gl) * d + hl * d * D, 3 * D * div(F, mlp_tp)


def mla_block_parameter_groups(D, H, mla, F, t, mlp_tp):
    """block_parameter_groups under --attention mla (`mla`: config.mla's ranks and head dims): the
    weights every rank holds whole, the norms with MLA's down-projections W_DQ, W_DKV, W_KR and
    their norms (replicated over a tp level); the attention's up-projections of H/t heads (W_UQ,
    W_QR, W_UK, W_UV) and w_o [H/t * d_v, D]; the MLP. Mirrors MlaProjections::setup (bench/block/mla.cpp)
    and Block::held_share; DESIGN "Multi-head latent attention", "Memory"."""
    rq, rkv, dn, dr, dv = (mla[k] for k in ("q_rank", "kv_rank", "d_nope", "d_rope", "d_v"))
    qin, hl = rq if rq > 0 else D, div(H, t)
    whole = 2 * D + (D * rq + rq if rq > 0 else 0) + D * rkv + rkv + D * dr
    heads = qin * hl * (dn + dr) + rkv * hl * (dn + dv) + hl * dv * D
    return whole, heads, 3 * D * div(F, mlp_tp)


SHARD_CHOICES = ("none", "optimizer", "grads", "params")


def weight_groups(layers, norms, attention, mlp, embedding, replicas, t, mlp_tp):
    """The groups of weights the same ranks hold: [(name, copies, parameters of one unit, replicas)]:
    the norms over every one of the replicas (P; single: 1), the attention's projections over
    replicas/t, the MLP's over replicas/mlp_tp, the embedding and head (one unit of `embedding`
    parameters, model_parameters' ceil(2VD/t)) over replicas/t. Mirrors model_estimate
    (bench/metrics.cpp); DESIGN "Memory"."""
    return [("norms", layers, norms, replicas), ("attention", layers, attention, div(replicas, t)),
            ("mlp", layers, mlp, div(replicas, mlp_tp)), ("embedding", 1, embedding, div(replicas, t))]


def shard_of(parameters, replicas):
    """One unit's shard over its replicas, padded to equal size: ceil(parameters / replicas)."""
    return -(-parameters // replicas)


def model_state_bytes(groups, shard):
    """(weights, grads, optimizer) bytes per rank under --shard (groups: weight_groups). held =
    sum of copies x parameters, sharded = sum of copies x shard_of; optimizer 12 B x (held under
    none, else sharded); grads 2 B x held, or under grads/params 2 B x (sharded + the largest
    unit: one block's parameters or the embedding's, whole until its reduce-scatter); weights
    2 B x held, or under params 2 B x (sharded + the largest unit, gathered). Mirrors
    model_estimate (bench/metrics.cpp); DESIGN "Memory"."""
    if shard not in SHARD_CHOICES:
        raise ValueError(f"shard must be one of {SHARD_CHOICES}, got {shard!r}")
    held = sum(c * n for _, c, n, _ in groups)
    sharded = sum(c * shard_of(n, g) for _, c, n, g in groups)
    unit = max(sum(n for name, _, n, _ in groups if name != "embedding"),
               sum(n for name, _, n, _ in groups if name == "embedding"))
    weights = WEIGHT_BYTES_PER_PARAM * (sharded + unit if shard == "params" else held)
    grads = GRAD_BYTES_PER_PARAM * (sharded + unit if shard in ("grads", "params") else held)
    optimizer = OPTIMIZER_BYTES_PER_PARAM * (held if shard == "none" else sharded)
    return weights, grads, optimizer


def grad_sync_bytes(groups, shard):
    """(reduce_scatter, all_gather) bytes one rank sends per training step to synchronise the weight
    gradients (DESIGN "Memory"; bf16, DESIGN "Communication"'s convention: a reduce-scatter or an
    all-gather of a shard x over g ranks sends 2*x*(g-1)). none, optimizer: an all-reduce (a
    reduce-scatter and an all-gather of the gradients); grads: reduce-scatter of the gradients,
    all-gather of the updated parameters; params: the reduce-scatter and FSDP's all-gathers of each
    unit's parameters before its forward and its backward. Mirrors grad_sync (bench/metrics.cpp)."""
    if shard not in SHARD_CHOICES:
        raise ValueError(f"shard must be one of {SHARD_CHOICES}, got {shard!r}")
    once = sum(c * GRAD_BYTES_PER_PARAM * shard_of(n, g) * (g - 1) for _, c, n, g in groups)
    return once, 2 * once if shard == "params" else once


def model_parameters(layers, block_params, vocab, D, t):
    """Parameters per rank of the whole model: L blocks plus the embedding and output head, 2*V*D
    split over the TP group (at most ceil(2VD/t) on a rank). Mirrors model_estimate
    (bench/metrics.cpp); README "Whole-model memory estimate"."""
    return layers * block_params + -(-2 * vocab * D // t)


def block_input_bytes(B, tokens, D, elem):
    """The block's input x [B, T, D] (what --recompute full keeps per layer). Mirrors
    Block::held_share's input_bytes (bench/block/block.cpp)."""
    return B * tokens * D * elem


def model_activations(layers, block_input, block_activations, recompute, core_activations=0):
    """Whole-model activations: L x one block's (recompute none); L x (one block's - its attention
    core's) + the core's (selective: the core's state rebuilt one block at a time); or L block
    inputs plus one block's (recompute full). Mirrors model_estimate (bench/metrics.cpp); DESIGN
    "Recompute"."""
    if recompute == "full":
        return layers * block_input + block_activations
    if recompute == "selective":
        return layers * (block_activations - core_activations) + core_activations
    return layers * block_activations


def longest_cache(capacity, layers, block_params, vocab, D, step_bytes, per_token, shards):
    """inference.max_cached_tokens: shards x floor((capacity - weights - step) / (L x per_token)),
    weights = (L x block parameters + 2 V D) x 2 B (bf16), 0 when nothing fits. Mirrors
    longest_cache (bench/metrics.cpp); DESIGN "Decode" (the longest C that fits)."""
    weights = (layers * block_params + 2 * vocab * D) * WEIGHT_BYTES_PER_PARAM
    room = capacity - weights - step_bytes
    return shards * (room // (layers * per_token)) if room > 0 else 0


# --- FLOPs --------------------------------------------------------------------------------------

def gemm_flops(m, n, k):
    """2*m*n*k. Mirrors gemm_flops (kernels/backend_flops.cpp); DESIGN "FLOPs, MFU and HFU"."""
    return 2 * m * n * k


def attn_fwd_flops(B, hq, d, pairs, dv=None):
    """Attention forward: 2*(d + d_v)*hq*B per visible pair (QK^T over d, PV over d_v; 4*d*hq*B
    when d_v = d), hq query heads. Mirrors attn_fwd_flops (kernels/backend_flops.cpp); DESIGN "FLOPs, MFU and HFU"."""
    return 2 * (d + (d if dv is None else dv)) * hq * B * pairs


def full_mask_pairs(N, causal):
    """Visible (query, key) pairs of an N-token sequence without window or documents: N(N+1)/2
    causal, N*N otherwise. DESIGN "Visibility rule"."""
    return N * (N + 1) // 2 if causal else N * N


def layer_flops(gemm, attn, forward_only=False):
    """(model, hardware) FLOPs of a layer from its forward GEMM and attention FLOPs: the backward
    runs two GEMMs per forward GEMM and the attention backward 2x (model) or 2.5x (hardware) the
    forward. Mirrors expected_job_flops (bench/metrics.cpp); DESIGN "FLOPs, MFU and HFU"."""
    if forward_only:
        return (gemm + attn, gemm + attn)
    return (3 * gemm + (1 + ATTN_BWD_MODEL_FACTOR) * attn, 3 * gemm + (1 + ATTN_BWD_HARDWARE_FACTOR) * attn)
