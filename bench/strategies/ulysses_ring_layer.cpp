#include "bench/strategies/ulysses_ring_layer.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "bench/inputs.h"
#include "bench/parts/layout.h"
#include "bench/parts/sublayer_mesh.h"
#include "bench/parts/ulysses_level.h"
#include "comm/communicator.h"

namespace cpbench {

CommPrediction UlyssesRingLayer::attention_bytes(const LayerShape& s, int P, const MeshSpec& m, int64_t elem,
                                                 int64_t acc, int rank) const {
  if (m.U < 1 || m.R < 1 || m.tp < 1) throw std::logic_error(name() + ": attention_bytes needs a resolved mesh");
  if (s.decode())  // the merge over the ring level: one ring, or the inner rings then across them
    return decode_prediction(s, P, m, m.inner_ring > 0 ? std::vector<MergeLevel>{{"ring_inner", m.inner_ring}, {"ring_outer", m.R / m.inner_ring}}
                                                 : std::vector<MergeLevel>{{"ring", m.R}},
                             m.U, elem, acc, ulysses_index(rank, m));
  // Under --cached the all-to-all and the Q blocks carry the new tokens (Tn = B*(N-C)/P per rank)
  // and a K,V block the ring index's cache shard too: B*(C/R + U*Tn/B)*(Ge/U)*d = T*Ge*d, as without.
  if (!s.uneven_heads) return member_bytes(s, P, m, elem, acc, -1);
  // Uneven heads: each member's own terms; the busiest rank is the member that sends the most.
  const int u = ulysses_index(rank, m);
  if (u != kBusiestRank) return member_bytes(s, P, m, elem, acc, u);
  CommPrediction most;
  for (int j = 0; j < m.U; ++j) {
    CommPrediction c = member_bytes(s, P, m, elem, acc, j);
    if (j == 0 || c.fwd + c.bwd > most.fwd + most.bwd) most = std::move(c);
  }
  return most;
}

CommPrediction UlyssesRingLayer::member_bytes(const LayerShape& s, int P, const MeshSpec& m, int64_t elem,
                                              int64_t acc, int u) const {
  const int64_t T = s.B * s.N / P, Tn = s.B * s.new_tokens() / P;
  // Per token: q's H*d, k|v's Ge*(d + d_v) (Ge*2d without MLA; ulysses_level.h), o's H*d_v.
  int64_t hq = int64_t(s.H) * s.d, ho = int64_t(s.H) * s.vdim();
  int64_t kv = int64_t(replicated_kv_heads(m.tp * m.U, s)) * (s.d + s.vdim());
  int heads = s.H;
  // The tp level around the attention's GEMMs, as megatron-sp (the new tokens only; the MLP's:
  // the block's term), then the Ulysses level's all-to-alls.
  CommPrediction p = tp_sublayer_bytes(s, P, m.tp, "tp", elem);
  if (s.mla_latent) {  // the latent all-gathered (and its gradient reduce-scattered); the ring moves it too
    p.add(ulysses_latent_bytes(s, P, m.tp, m.U, elem));
    kv = int64_t(m.tp) * m.U * s.ring_block_row();  // the ring index's t*U*T rows of latent per T
  } else if (u < 0) {
    p.add(ulysses_level_bytes(s, P, m.tp, m.U, elem));
  } else {
    // Uneven heads: member u's own all-to-all terms, and its ring carries its heads, hq(u) query and
    // hk(u) KV heads of its ring index's t*U*T tokens (T*t*U*h(u) elements per T tokens).
    const UlyssesShape us = UlyssesShape::uneven_split(s.H / m.tp, replicated_kv_heads(m.tp, s) / m.tp, m.U);
    p.add(ulysses_level_bytes_uneven(s, P, m.tp, us, u, elem));
    hq = int64_t(m.tp) * m.U * us.hq(u) * s.d;
    ho = int64_t(m.tp) * m.U * us.hq(u) * s.vdim();
    kv = int64_t(m.tp) * m.U * us.hk(u) * (s.d + s.vdim());
    heads = m.tp * m.U * us.hq(u);
  }
  // The ring level's term. pass-Q: a rank's Q block is its ring index's U*T tokens x H/U heads,
  // the same T*H*d elements as its own q; its partial's lse T*H.
  RingBlockSizes b;
  b.tokens_kv = T;
  b.kv = kv;
  b.tokens_q = Tn;
  b.hq = hq;
  b.ho = ho;
  b.heads = heads;
  b.transit = s.kv_transit;
  b.scaling = s.fp8_scaling;
  const RingSchedule sch = ring_schedule(m);
  return p.add(ring_level_bytes(sch, s, model_hops(sch, ring_layout(s, m), s), s.pass.travel, b, elem, acc));
}

int UlyssesRingLayer::ulysses_index(int rank, const MeshSpec& m) const {
  if (rank == kBusiestRank) return kBusiestRank;
  const std::vector<int> g = Mesh::group_of(rank, mesh_desc(m), "ulysses");
  return int(std::find(g.begin(), g.end(), rank) - g.begin());
}

std::string UlyssesRingLayer::heads_error(const LayerShape& s, int t, int U) {
  const std::string what = t > 1 ? "tp*ulysses" : "ulysses";
  if (!s.uneven_heads) return head_sharding_error(t * U, s, what);
  std::ostringstream e;
  if (s.H / t < U)
    e << "ulysses=" << U << " exceeds the " << s.H / t << " query heads" << (t > 1 ? " of a tp rank" : "")
      << " (--uneven-heads: every Ulysses member takes at least one)";
  return e.str();
}

std::string UlyssesRingLayer::latent_refusal(const LayerShape& s, const MeshSpec& m) const {
  if (s.mla_latent && s.uneven_heads)
    return name() + ": --mla-travel latent splits the heads evenly over the Ulysses level; it does not run --uneven-heads";
  return cpbench::latent_refusal(name(), s, ring_schedule(m));  // the ring level's (ring_schedule.h)
}

void UlyssesRingLayer::check_mesh_and_shape(const LayerShape& s, int P, const MeshSpec& m,
                                            const std::string& hint) const {
  std::ostringstream e;
  const bool balanced = s.balance != BalanceScheme::none;
  const bool zz = zigzag_layout(m.ring_layout, s.mask.causal) && !balanced;
  const std::string tp_heads = m.tp >= 1 ? head_sharding_error(m.tp, s, "tp") : "";
  const std::string heads = m.U >= 1 && m.tp >= 1 && tp_heads.empty() ? heads_error(s, m.tp, m.U) : "";
  if (m.tp < 1 || m.U < 1 || m.R < 1 || int64_t(m.tp) * m.U * m.R != P)
    e << name() << ": " << (m.tp != 1 ? "tp=" + std::to_string(m.tp) + " x " : std::string()) << "ulysses=" << m.U
      << " x ring=" << m.R << " must equal P=" << P;
  else if (!tp_heads.empty())
    e << name() << ": " << tp_heads << " (w_qkv is split by heads"
      << (s.uneven_heads ? "; --uneven-heads splits the Ulysses level only)" : ")");
  else if (!heads.empty())
    e << name() << ": " << heads << "; " << hint;
  else if (s.full_block && s.F % m.tp != 0)
    e << name() << ": tp=" << m.tp << " does not divide ffn_dim=" << s.F << " (w_gate, w_up split by columns)";
  else if (balanced && m.ring_layout != RingLayout::auto_)
    e << name() << ": --usp-layout " << (m.ring_layout == RingLayout::zigzag ? "zigzag" : "contiguous") << " and --balance "
      << balance_name(s.balance) << " both choose the token layout; drop one";
  else if (!latent_refusal(s, m).empty())
    e << latent_refusal(s, m);
  else if (m.inner_ring > 0 && !travel_refusal(name(), s.pass.travel, RingSchedule::double_ring(m.R, m.inner_ring)).empty())
    e << travel_refusal(name(), s.pass.travel, RingSchedule::double_ring(m.R, m.inner_ring));
  else if (m.inner_ring > 0 && !precision_refusal(name(), s, RingSchedule::double_ring(m.R, m.inner_ring)).empty())
    e << precision_refusal(name(), s, RingSchedule::double_ring(m.R, m.inner_ring));
  else if (zz && s.N % (2 * int64_t(P)) != 0)
    e << name() << ": seq=" << s.N << " is not divisible by 2*P=" << 2 * P << " (zigzag ring layout: "
      << 2 * m.R << " chunks, each split over ulysses=" << m.U << ")";
  else if (!zz && s.N % P != 0)
    e << name() << ": seq=" << s.N << " is not divisible by P=" << P
      << (balanced ? " (--balance " + std::string(balance_name(s.balance)) + ": every rank holds seq/P tokens)" : "");
  if (!e.str().empty()) throw ConstraintError(e.str());
}

void UlyssesRingLayer::check_decode(const LayerShape& s, int P, const MeshSpec& m) const {
  std::ostringstream e;
  const std::string tp_heads = head_sharding_error(m.tp, s, "tp");
  const std::string heads = tp_heads.empty() ? heads_error(s, m.tp, m.U) : "";
  if (int64_t(m.tp) * m.U * m.R != P)
    e << name() << ": " << (m.tp != 1 ? "tp=" + std::to_string(m.tp) + " x " : std::string()) << "ulysses=" << m.U
      << " x ring=" << m.R << " must equal P=" << P;
  else if (!tp_heads.empty())
    e << name() << ": " << tp_heads << " (w_qkv is split by heads"
      << (s.uneven_heads ? "; --uneven-heads splits the Ulysses level only)" : ")");
  else if (!heads.empty())
    e << name() << ": " << heads << " (--pass decode shards the heads over " << (m.tp > 1 ? "tp x ulysses)" : "ulysses)");
  else if (s.uneven_heads && m.U > 1 && helix(s, m, P))
    e << name() << ": Helix decode (--mlp-tp " << m.mlp_tp << " = P) splits each member's heads evenly over the "
      << "merge level; it does not run --uneven-heads";
  else if (s.full_block && s.F % m.tp != 0)
    e << name() << ": tp=" << m.tp << " does not divide ffn_dim=" << s.F << " (w_gate, w_up split by columns)";
  else if (s.D % m.tp != 0)
    e << name() << ": tp=" << m.tp << " does not divide dim=" << s.D
      << " (--pass decode all-reduces each sub-layer's output as D/tp columns per tp rank)";
  else if (s.pass.cached % m.R != 0)
    e << name() << ": cached=" << s.pass.cached << " is not divisible by ring=" << m.R
      << ": each ring position holds an equal cache shard (--pass decode)";
  else if (helix(s, m, P) && m.inner_ring > 0)
    e << name() << ": Helix decode (--mlp-tp " << m.mlp_tp << " = P) returns the partials in one all-to-all over a "
      << "single merge level; it is not defined on a double ring level (inner ring w=" << m.inner_ring << ")";
  if (!e.str().empty()) throw ConstraintError(e.str());
}

Block::CacheHeld UlyssesRingLayer::cache_held() {
  if (shape().decode()) return Block::cache_held();
  if (ring_cache_.empty()) return {};
  return {ring_cache_.held_bytes(), ring_cache_.cached_rows()};
}

int UlyssesRingLayer::ring_position(const Mesh& m) {
  if (m.desc.has("ring")) return m.group("ring").rank();
  return m.group("ring_outer").rank() * m.size_of("ring_inner") + m.group("ring_inner").rank();
}

Positions UlyssesRingLayer::cp_positions(const LayerShape& s, const Mesh& m, RingOrder order) {
  if (s.pass.cached > 0 && !s.decode()) return after_cache(cp_positions(s.without_cache(), m, order), s.pass.cached);
  const int64_t Un = m.size_of("ulysses"), u = m.group("ulysses").rank();
  const Positions block = RingLayoutPart(order, s, ring_size(m)).queries(ring_position(m));
  if (s.balance != BalanceScheme::none) {  // the u-th 1/U of ring index rho's tokens, in position order
    const int64_t T = block.count() / Un;
    return block.rows(u * T, T);
  }
  // The u-th 1/U of each chunk (zigzag: both): after the all-to-all the chunks are whole again.
  std::vector<PosSeg> share;
  for (int i = 0; i < block.nseg(); ++i) {
    const PosSeg g = block.seg(i);
    const int64_t c = g.count / Un;
    share.push_back({g.start + u * c * g.stride, g.stride, c});
  }
  return Positions::segments(share);
}

Positions UlyssesRingLayer::token_positions(const LayerShape& s, const Mesh& m) const {
  const Positions group = cp_positions(s, m, ring_order(s, env_.spec));
  if (!m.desc.has("tp")) return group;
  // TP member j: rows [j*T, (j+1)*T) of its group's tokens (a zigzag slice may span both chunks).
  const int64_t tn = m.size_of("tp"), T = group.count() / tn;
  return group.rows(m.group("tp").rank() * T, T);
}

Communicator* UlyssesRingLayer::tp_group() {
  return mesh().desc.has("tp") ? &mesh().group("tp") : nullptr;
}

Positions UlyssesRingLayer::wide_positions() const { return cp_positions(shape(), mesh(), ring_order(shape(), env_.spec)); }

void UlyssesRingLayer::core_setup() {
  const LayerShape& s = shape();
  // This TP rank's heads (all of them without tp): hl_ query, gl_ KV heads, us.Ge() after the
  // Ulysses level's copies.
  const int Un = U();
  const int64_t Tw = wide_T(), n = int64_t(Un) * Tw;  // tokens per batch row of this rank's ring index
  const UlyssesShape us = ulysses_shape(s, Tw, hl_, gl_, Un, nseg());
  const int u = mesh().group("ulysses").rank();
  const int hl = us.hq(u), gl = us.hk(u);  // this member's heads (H/U and Ge/U unless uneven)
  const int dv = s.vdim();  // v, o, do and dv: d_v per head (MLA)
  q_r_ = alloc({s.B, n, hl, s.d});
  k_r_ = alloc({s.B, n, gl, s.d});
  v_r_ = alloc({s.B, n, gl, dv});
  o_r_ = alloc({s.B, n, hl, dv});
  do_r_ = alloc({s.B, n, hl, dv});
  dq_r_ = alloc_f32({s.B, n, hl, s.d});
  dk_r_ = alloc_f32({s.B, n, gl, s.d});
  dv_r_ = alloc_f32({s.B, n, gl, dv});
  UlyssesShape ul = us;
  if (latent_keys_) ul.latent = int(s.ring_block_row());
  ulysses_.setup(be(), mesh().group("ulysses"), ul);
  // --sinks: those of the query heads the all-to-all gives this member (slice u of the TP rank's).
  const SinkHeads ring_sinks = sinks_.narrow(us.q_split().first[size_t(u)], hl);
  RingCoreShape cs;
  cs.B = s.B; cs.n = n; cs.hq = hl; cs.hk = gl; cs.d = s.d; cs.d_v = s.d_v; cs.causal = s.mask.causal; cs.dtype = s.dtype;
  cs.rep = us.head_rep(); cs.head0 = us.head0(u);
  cs.partial_dtype = s.partial_dtype; cs.acc_dtype = s.acc_dtype;
  cs.window = s.mask.window; cs.docs = s.mask.docs;
  cs.travel = s.pass.travel;
  cs.transit = s.kv_transit;  // --comm-dtype: the ring level's k|v blocks (or Q blocks under pass-Q)
  cs.transit_scaling = s.fp8_scaling;
  if (s.pass.cached > 0) {
    // The ring index's cache shard for this member's gl heads (copies of the TP rank's local
    // head (u*gl + c) / f, as the all-to-all hands them out; the TP rank's first is original
    // head kv0), seeded as the roped k, v a previous prefill would have written; the new
    // tokens' rows are filled after each all-to-all.
    const Positions cache = Positions::segments({cache_shard(s, R(), ring_position(mesh()))});
    const int64_t kv0 = first_kv_head(s, tp_.size(), tp_.rank());
    std::vector<int64_t> heads(static_cast<size_t>(gl));
    for (int c = 0; c < gl; ++c)  // original KV heads
      heads[size_t(c)] = kv0 + (us.uneven ? us.kv_split().first[size_t(u)] + c : (int64_t(u) * gl + c) / us.kv_copies());
    ring_cache_.setup(reg_, be(), env_.seed, s, cache, n, heads);
    cs.nk = ring_cache_.k().shape[1];
  }
  if (latent_keys_) {  // the member's heads of its ring index's latent (latent_keys.h)
    const int64_t w = s.ring_block_row();
    lat_r_ = alloc({s.B * n, w});
    dlat_r_ = alloc_f32({s.B * n, w});
    latent_ = {latent_keys_, lat_r_, dlat_r_, us.q_split().first[size_t(u)], hl};
    cs.latent = int(w);
  }
  const RingSchedule sch = ring_schedule(env_.spec);
  if (double_ring())
    ring_.setup(be(), sch, mesh().group("ring_inner"), &mesh().group("ring_outer"), cs,
                ring_layout(s, env_.spec), ring_sinks, latent_);
  else
    ring_.setup(be(), sch, mesh().group("ring"), nullptr, cs, ring_layout(s, env_.spec), ring_sinks, latent_);
}

void UlyssesRingLayer::core_forward() {
  if (latent_.on()) {  // q by all-to-all, the latent gathered and expanded for this member's heads
    ulysses_.scatter_q(q_, q_r_);
    ulysses_.gather_latent(latent_.keys->local(), lat_r_);
    latent_.expand(be(), lat_r_, k_r_, v_r_, 1.0);
    ring_.forward(q_r_, k_r_, v_r_, o_r_);
    ulysses_.gather_o(o_r_, o_);
    return;
  }
  ulysses_.scatter_qkv(q_, k_, v_, q_r_, k_r_, v_r_);
  const Tensor* kr = &k_r_;
  const Tensor* vr = &v_r_;
  if (!ring_cache_.empty()) {  // --cached: the new k, v after the ring index's cache shard
    ring_cache_.write(be(), k_r_, v_r_, ring_cache_.cached_rows());
    kr = &ring_cache_.k();
    vr = &ring_cache_.v();
  }
  ring_.forward(q_r_, *kr, *vr, o_r_);
  ulysses_.gather_o(o_r_, o_);
}

void UlyssesRingLayer::core_backward() {
  const DType dt = shape().dtype;
  Backend& b = be();
  ulysses_.scatter_do(do_, do_r_);
  ring_.backward(q_r_, k_r_, v_r_, o_r_, do_r_, dq_r_, dk_r_, dv_r_);
  if (latent_.on()) {  // dq back by all-to-all; the latent's gradient (this member's heads' share) reduce-scattered
    ulysses_.gather_dq(in_dtype(b, dt, dq_r_, q_r_), dq_, dq_run_);
    ulysses_.scatter_latent_grad(dlat_r_, latent_.keys->grad());
    return;
  }
  // dq, dk, dv: back to my tokens, sent in the run dtype (converted into q_r_, k_r_, v_r_,
  // which the step no longer needs).
  const Tensor &dq = in_dtype(b, dt, dq_r_, q_r_), &dk = in_dtype(b, dt, dk_r_, k_r_), &dv = in_dtype(b, dt, dv_r_, v_r_);
  ulysses_.gather_grads(dq, dk, dv, dq_, dk_, dv_, dq_run_, dk_run_, dv_run_);
}

void UlyssesRingLayer::export_lse(std::vector<float>& global) {
  // The ring core's lse [B, H/(tU), U*t*T] covers this TP rank's query heads' slice u,
  // [tr*H/t + u*H/(tU), +H/(tU)) (uneven: the split's [first(u), +hq(u))), of the tokens of this
  // rank's ring index.
  const LayerShape& s = shape();
  const UlyssesShape& us = ulysses_.shape();
  const int u = mesh().group("ulysses").rank();
  add_lse_rows(global, be().download(ring_.lse()), s.B, s.H, s.N, tp_.rank() * hl_ + us.q_split().first[size_t(u)],
               us.hq(u), ring_layout(s, env_.spec).queries(ring_position(mesh())));
}

int64_t UlyssesRingLayer::core_activation_bytes(const LayerShape& s, int P, const MeshSpec& m) const {
  // The ring index's tokens for the local heads: q, k, v, o, do (run dtype; kept for backward)
  // and dq, dk, dv (float32); the Ulysses level's buffers (ulysses_level.h); the ring core's own
  // buffers. Under tp the core holds the TP group's t*T tokens for this TP rank's heads.
  const int64_t es = int64_t(dtype_size(s.dtype)), T = s.N / P * m.tp, n = int64_t(m.U) * T;
  const int Hc = s.H / m.tp, Gc = replicated_kv_heads(m.tp, s) / m.tp;
  const UlyssesShape us = ulysses_shape(s, T, Hc, Gc, m.U);
  int64_t hl = Hc / m.U, gl = us.Ge() / m.U;
  if (us.uneven) {  // the member with the most heads
    hl = gl = 0;
    for (int u = 0; u < m.U; ++u) {
      hl = std::max<int64_t>(hl, us.hq(u));
      gl = std::max<int64_t>(gl, us.hk(u));
    }
  }
  RingCoreShape cs;
  cs.B = s.B; cs.n = n; cs.hq = int(hl); cs.hk = int(gl); cs.d = s.d; cs.d_v = s.d_v; cs.dtype = s.dtype;
  cs.partial_dtype = s.partial_dtype; cs.acc_dtype = s.acc_dtype;
  cs.travel = s.pass.travel;  // the travel policy's buffers (ring_travel.h)
  cs.transit = s.kv_transit;
  cs.transit_scaling = s.fp8_scaling;
  const int64_t d = s.d, dv = s.vdim();  // q, k, dq, dk: d per head; v, o, do, dv: d_v
  UlyssesShape ul = us;
  int64_t latent = 0;
  if (s.mla_latent) {  // the ring index's gathered latent (run dtype) and its gradient (float32)
    ul.latent = int(s.ring_block_row());
    cs.latent = ul.latent;
    latent = s.B * n * ul.latent * (es + 4);
  }
  return s.B * n * ((hl * d + gl * (d + dv) + 2 * hl * dv) * es + (hl * d + gl * (d + dv)) * 4) + latent +
         ulysses_level_activation_bytes(ul) + ring_level_activation_bytes(ring_schedule(m), s, cs);
}

}  // namespace cpbench

namespace cpbench {

int64_t UlyssesRingLayer::activation_bytes_estimate(const LayerShape& s, int P, const MeshSpec& m) const {
  if (m.tp <= 1 || s.decode()) return Block::activation_bytes_estimate(s, P, m);
  // Under tp, as megatron-sp: token-local x, dy, xn, y, dxn, dx (run dtype) and rstd; the TP
  // group's t*T rows for this rank's heads: qkv, dqkv, q, k, v, o, do (run dtype), dq, dk, dv
  // (float32); the block's whole-group TP slots; the core's own buffers; the MLP's.
  // Under --cached the tokens are the new ones, and the core holds the cache shard (C/R tokens
  // of the member's heads) before them.
  const int64_t es = int64_t(dtype_size(s.dtype)), BT = s.B * (s.new_tokens() / P), BW = BT * m.tp;
  const int64_t hl = s.H / m.tp, gl = replicated_kv_heads(m.tp, s) / m.tp;
  const int64_t cache = s.pass.cached > 0 ? 2 * s.B * (s.pass.cached / m.R) * (std::max(gl, int64_t(m.U)) / m.U) * s.d * es : 0;
  const int64_t local = BT * 6 * s.D * es + BT * 4 + cache;
  // (latent travel: no k, v of its own; a Ulysses member contracts U x the TP group's rows)
  const int64_t heads = tp_heads_activation_bytes(s, BW, hl, holds_local_kv(s) ? gl : 0, BW * m.U);
  const int64_t slots = (s.B > 1 ? 3 : 2) * BW * s.D * es;
  return local + heads + slots + core_activation_bytes(s, P, m) + mlp_activation_bytes(s, BT, m);
}

}  // namespace cpbench
