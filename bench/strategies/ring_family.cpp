#include "bench/strategies/ring_family.h"

#include <sstream>

#include "bench/parts/layout.h"

namespace cpbench {

StrategyDesc RingFamily::describe() const {
  StrategyDesc d{p_.name, p_.summary, p_.order == RingOrder::zigzag ? "2P divides seq" : "P divides seq", p_.tiers, {}};
  if (p_.double_ring) d.constraints += " (P under --balance); inner ring w divides P";
  d.can.pass_q = d.can.cached = d.can.decode = true;
  d.can.mla = true;  // expanded heads: k|v blocks of d + d_v per head (ring_core.h)
  d.can.mla_latent = true;  // the latent on a single or a double ring (latent_keys.h)
  d.can.kv_transit = true;  // --comm-dtype: a single or double ring's K,V blocks (RingCore, DoubleRingCore)
  d.can.balance = p_.balance;
  d.can.balance_dynamic = p_.balance_dynamic;
  // --balance dynamic: one ring per CP group, whose ranks hold different token counts.
  d.can.bytes_per_rank = p_.balance_dynamic;
  return d;
}

std::string RingFamily::mesh_label(const MeshSpec& m) const {
  return p_.double_ring ? p_.name + "[w" + std::to_string(m.inner_ring) + "]" : p_.name;
}

// --mesh all: a double ring runs every window size w dividing P (w = P and w = 1 are single rings
// over the inner or the outer level); a single ring has one mesh.
std::vector<MeshSpec> RingFamily::mesh_candidates(const MeshSpec& base, int P) const {
  if (!p_.double_ring) return {base};
  std::vector<MeshSpec> all;
  for (int w = 1; w <= P; ++w) {
    if (P % w) continue;
    MeshSpec m = base;
    m.inner_ring = w;
    all.push_back(m);
  }
  return all;
}

MeshSpec RingFamily::resolve_mesh(const MeshSpec& req, const LayerShape& s, int P) const {
  if (!p_.double_ring) return Block::resolve_mesh(req, s, P);
  MeshSpec m = req;
  m.U = 1;
  m.R = P;
  m.usp_ring = UspRing::double_;
  m.inner_ring = resolve_inner_ring(m, name());
  return m;
}

void RingFamily::check(const LayerShape& s, int P, const MeshSpec& m) const {
  if (s.decode()) return check_cache_shards(s, P);     // no layout of new tokens
  if (s.pass.cached > 0) return check_new_tokens(s, P, m);  // the layout places the new tokens only
  // A balanced layout holds N/P tokens per rank; the static order cuts N into its pieces. (A
  // preset without --balance keeps its order's constraint: plan_jobs then refuses the scheme.)
  const bool balanced = s.balance != BalanceScheme::none && p_.balance;
  const int64_t pieces = balanced ? P : ring_order_pieces(p_.order, P);
  if (s.N % pieces != 0) {
    std::ostringstream e;
    e << name() << ": seq=" << s.N << " is not divisible by " << (pieces == P ? "P" : "2*P") << "=" << pieces;
    if (balanced && p_.double_ring)
      e << " (--balance " << balance_name(s.balance) << ": every rank holds seq/P tokens)";
    throw ConstraintError(e.str());
  }
  if (p_.balance_dynamic && s.balance == BalanceScheme::dynamic && s.queries_travel())
    throw ConstraintError(name() + ": --balance dynamic circulates K,V inside each document's group; --ring-pass " +
                          ring_travel(s.pass.travel).flag + " is built for the static and doc-zigzag/greedy layouts only");
  check_travel(name(), s.pass.travel, schedule(s, P, m));
  check_latent(name(), s, schedule(s, P, m));
  check_precision(name(), s, schedule(s, P, m));
}

RingSchedule RingFamily::schedule(const LayerShape& s, int P, const MeshSpec& m) const {
  if (p_.double_ring) return RingSchedule::double_ring(P, m.inner_ring > 0 ? m.inner_ring : P);
  if (p_.balance_dynamic && s.balance == BalanceScheme::dynamic) return RingSchedule::groups(P);
  return RingSchedule::single(P, "cp");
}

RingBlockSizes RingFamily::block_sizes(const LayerShape& s, int P) {
  RingBlockSizes b;
  // Under --cached C pass-Q moves only the (N - C)/P new queries of a rank; pass-KV moves its
  // whole key block, cache shard included: C/P + (N - C)/P = N/P tokens, as without a cache.
  b.tokens_kv = s.B * s.N / P;
  b.kv = s.ring_block_row();  // k|v's G(d + d_v), or MLA's latent r_kv + d_rope
  b.tokens_q = s.B * s.new_tokens() / P;
  b.hq = int64_t(s.H) * s.d;
  b.ho = int64_t(s.H) * s.vdim();
  b.heads = s.H;
  b.transit = s.kv_transit;
  b.scaling = s.fp8_scaling;
  return b;
}

CommPrediction RingFamily::attention_bytes(const LayerShape& s, int P, const MeshSpec& m, int64_t elem, int64_t acc,
                                           int rank) const {
  if (s.decode()) return decode_prediction(s, P, m, {{"cp", P}}, 1, elem, acc);  // no ring under decode: one all-gather per step
  const RingSchedule sch = schedule(s, P, m);
  const RingHops hops = model_hops(sch, layout(s, P), s);
  if (rank == kBusiestRank || !ring_level_bytes_per_rank(sch))
    return ring_level_bytes_busiest(sch, s, hops, s.pass.travel, block_sizes(s, P), elem, acc);
  return ring_level_bytes(sch, s, hops, s.pass.travel, block_sizes(s, P), elem, acc, rank);
}

Positions RingFamily::token_positions(const LayerShape& s, const Mesh& m) const {
  return layout(s, m.P).queries(m.cp->rank());
}

void RingFamily::core_setup() {
  const LayerShape& s = shape();
  const int P = mesh().P;
  const RingSchedule sch = schedule(s, P, env_.spec);
  RingCoreShape cs;
  cs.B = s.B; cs.n = T_; cs.hq = s.H; cs.hk = s.G; cs.d = s.d; cs.d_v = s.d_v; cs.causal = s.mask.causal; cs.dtype = s.dtype;
  cs.partial_dtype = s.partial_dtype; cs.acc_dtype = s.acc_dtype;
  cs.window = s.mask.window; cs.docs = s.mask.docs;
  cs.travel = s.pass.travel;
  cs.transit = s.kv_transit;
  cs.transit_scaling = s.fp8_scaling;
  cs.nk = key_pos_.count();
  if (latent_keys_) {
    cs.latent = int(s.ring_block_row());
    latent_ = {latent_keys_, latent_keys_->local(), latent_keys_->grad(), 0, s.H};
  }
  if (sch.kind == RingScheduleKind::double_)
    level_.setup(be(), sch, mesh().group("ring_inner"), &mesh().group("ring_outer"), cs, layout(s, P), sinks_, latent_);
  else
    level_.setup(be(), sch, *mesh().cp, nullptr, cs, layout(s, P), sinks_, latent_);
}

void RingFamily::core_forward() {
  if (latent_.on())  // this rank's own block, for every head (the layer's up-projection: model FLOPs)
    latent_.expand(be(), latent_.local, k_, v_, 1.0);
  level_.forward(q_, kc_, vc_, o_);
}

void RingFamily::export_lse(std::vector<float>& global) {
  const LayerShape& s = shape();
  add_lse_rows(global, be().download(level_.lse()), s.B, s.H, s.N, 0, s.H, pos_);
}

int64_t RingFamily::core_activation_bytes(const LayerShape& s, int P, const MeshSpec& m) const {
  RingCoreShape cs;
  cs.B = s.B; cs.n = s.new_tokens() / P; cs.hq = s.H; cs.hk = s.G; cs.d = s.d; cs.d_v = s.d_v; cs.dtype = s.dtype;
  cs.partial_dtype = s.partial_dtype; cs.acc_dtype = s.acc_dtype;
  cs.travel = s.pass.travel;
  cs.transit = s.kv_transit;
  cs.transit_scaling = s.fp8_scaling;
  cs.nk = s.N / P;  // = n without a cache; under --cached the cache shard too
  if (s.mla_latent) cs.latent = int(s.ring_block_row());
  return ring_level_activation_bytes(schedule(s, P, m), s, cs);
}

}  // namespace cpbench
