#include "bench/parts/ring_schedule.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "bench/parts/balance.h"

namespace cpbench {

std::string travel_refusal(const std::string& who, RingTravel travel, const RingSchedule& sch) {
  const RingTravelPolicy& t = ring_travel(travel);
  if (t.single_ring_only == nullptr || sch.kind == RingScheduleKind::single) return "";
  // (groups never meet a pass-Q: the ring preset refuses --balance dynamic with it first.)
  const std::string on = sch.kind == RingScheduleKind::double_ ? "a double ring (inner ring w=" + std::to_string(sch.w) + ")"
                                                               : "a ring per CP group (--balance dynamic)";
  // The alternative: the policies that move the same thing and run on every schedule.
  std::string alt;
  for (const RingTravelPolicy& p : ring_travels())
    if (p.queries_travel == t.queries_travel && p.single_ring_only == nullptr)
      alt += (alt.empty() ? " (use --ring-pass " : " or ") + std::string(p.flag);
  return who + ": --ring-pass " + t.flag + " " + t.single_ring_only + "; it is not defined on " + on +
         (alt.empty() ? "" : alt + ")");
}

std::string precision_refusal(const std::string& who, const LayerShape& s, const RingSchedule& sch) {
  if (s.kv_transit != KvTransit::run && sch.kind == RingScheduleKind::groups)
    return who + ": --comm-dtype encodes the blocks of a single or double ring; a ring per CP group (--balance "
           "dynamic) moves them in the run dtype (not built yet)";
  if (s.kv_transit != KvTransit::run && sch.kind == RingScheduleKind::double_ && s.queries_travel())
    return who + ": --comm-dtype encodes a double ring's K,V blocks; its pass-Q loop moves Q blocks in the run dtype "
           "(not built yet: use a single ring, or --ring-pass kv)";
  if (s.acc_dtype == DType::f32 || sch.kind != RingScheduleKind::groups) return "";
  return who + ": --acc-dtype " + dtype_name(s.acc_dtype) + " rounds the accumulators of a single or double ring; "
         "a ring per CP group (--balance dynamic) keeps them float32 (not built yet)";
}

std::string latent_refusal(const std::string& who, const LayerShape& s, const RingSchedule& sch) {
  if (!s.mla_latent) return "";
  if (s.queries_travel())
    return who + ": --mla-travel latent circulates the K,V latent: --ring-pass " + ring_travel(s.pass.travel).flag +
           " moves queries instead (use --ring-pass kv, or --mla-travel expanded)";
  if (sch.kind == RingScheduleKind::groups)
    return who + ": --mla-travel latent circulates the K,V latent on a single or a double ring; --balance " +
           balance_name(s.balance) + " runs one ring per document group (use --mla-travel expanded)";
  return "";
}

// The double ring runs its own loops (DoubleRingCore): K,V travel and pass-Q's. A policy whose row
// says it runs on a double ring but has no loop there is a programming error, not a silent q.
void check_double_ring_loop(RingTravel travel) {
  if (travel != RingTravel::kv && travel != RingTravel::q)
    throw std::logic_error(std::string("ring level: --ring-pass ") + ring_travel(travel).flag +
                           " has no double-ring loop in DoubleRingCore (mark its row single_ring_only or add one)");
}

void check_travel(const std::string& who, RingTravel travel, const RingSchedule& sch) {
  const std::string why = travel_refusal(who, travel, sch);
  if (!why.empty()) throw ConstraintError(why);
}

void check_precision(const std::string& who, const LayerShape& s, const RingSchedule& sch) {
  const std::string why = precision_refusal(who, s, sch);
  if (!why.empty()) throw ConstraintError(why);
}

void check_latent(const std::string& who, const LayerShape& s, const RingSchedule& sch) {
  const std::string why = latent_refusal(who, s, sch);
  if (!why.empty()) throw ConstraintError(why);
}

RingHops scan_hops(const RingSchedule& sch, const RingLayoutPart& layout, const LayerShape& s) {
  const BlockPositions q = [&](int j) { return layout.queries(j); };
  const BlockPositions k = [&](int j) { return layout.keys(j); };
  RingHops h;
  switch (sch.kind) {
    // pass-Q's K_eff is pass-KV's scan re-indexed (ring_core.h): one call serves every travel
    // policy.
    case RingScheduleKind::single: h.single = RingCore::effective_hops(sch.R, q, k, s); break;
    case RingScheduleKind::double_:
      h.dbl = DoubleRingCore::effective_hops(sch.w, sch.windows(), q, k, s, s.queries_travel());
      break;
    case RingScheduleKind::groups: break;  // every hop of each group
  }
  return h;
}

RingHops model_hops(const RingSchedule& sch, const RingLayoutPart& layout, const LayerShape& s) {
  if (s.balance == BalanceScheme::none || sch.kind == RingScheduleKind::groups) return scan_hops(sch, layout, s);
  // The balanced layout's own model (interval arithmetic on its runs), which shares nothing
  // with the mask scan the ring runs.
  const TokenLayout l = TokenLayout::build(s.balance, s, sch.R);
  RingHops h;
  if (sch.kind == RingScheduleKind::single) {
    h.single = l.ring_hops();  // pass-Q's K_eff is the same, re-indexed
  } else {
    const bool q_travel = s.queries_travel();  // pass-Q: the visiting queries of `held` meet `me`'s keys
    h.dbl = DoubleRingHops::from_needs(sch.w, sch.windows(),
                                       [&](int me, int held) { return q_travel ? l.sees(held, me) : l.sees(me, held); });
  }
  return h;
}

CommPrediction ring_level_bytes(const RingSchedule& sch, const LayerShape& s, const RingHops& hops, RingTravel travel,
                                const RingBlockSizes& b, int64_t elem, int64_t acc, int rank) {
  switch (sch.kind) {
    case RingScheduleKind::single: return ring_travel(travel).bytes(b, sch.R, elem, acc, hops.single, sch.level);
    case RingScheduleKind::double_:
      check_travel("ring_level_bytes", travel, sch);
      check_double_ring_loop(travel);
      if (travel == RingTravel::q)
        return DoubleRingCore::predicted_bytes_pass_q(b.tokens_q, b.hq, b.ho, b.heads, sch.w, sch.windows(), elem, acc,
                                                      hops.dbl);
      return DoubleRingCore::predicted_bytes(b.tokens_kv, b.kv, sch.w, sch.windows(), elem, acc, hops.dbl, b.transit,
                                             b.scaling);
    case RingScheduleKind::groups:
      return TokenLayout::build(s.balance, s, sch.R).dynamic_ring_bytes(rank, s.B, b.kv, elem, acc);
  }
  throw std::logic_error("ring_level_bytes: unknown schedule");
}

CommPrediction ring_level_bytes_busiest(const RingSchedule& sch, const LayerShape& s, const RingHops& hops,
                                        RingTravel travel, const RingBlockSizes& b, int64_t elem, int64_t acc) {
  if (!ring_level_bytes_per_rank(sch)) return ring_level_bytes(sch, s, hops, travel, b, elem, acc);
  CommPrediction most;
  for (int r = 0; r < sch.R; ++r) {
    CommPrediction p = ring_level_bytes(sch, s, hops, travel, b, elem, acc, r);
    if (r == 0 || p.fwd + p.bwd > most.fwd + most.bwd) most = p;
  }
  return most;
}

int64_t ring_level_activation_bytes(const RingSchedule& sch, const LayerShape& s, const RingCoreShape& cs) {
  switch (sch.kind) {
    case RingScheduleKind::single: return RingCore::activation_bytes(cs, sch.R);
    case RingScheduleKind::double_: return DoubleRingCore::activation_bytes(cs, sch.w, sch.windows());
    case RingScheduleKind::groups: {
      // The busiest rank's tokens and the largest block it may receive.
      const TokenLayout layout = TokenLayout::build(s.balance, s, sch.R);
      int64_t most = 0, block = 0;
      for (int j = 0; j < sch.R; ++j) {
        most = std::max(most, layout.positions_of(j).count());
        for (int c : layout.ring_groups()) block = std::max(block, layout.tokens_of(j, c));
      }
      RingCoreShape busiest = cs;
      busiest.n = most;
      busiest.nk = 0;
      busiest.travel = RingTravel::kv;
      const int64_t o = s.B * most * s.H * s.vdim(), rows = s.B * s.H * most;
      const int64_t block_result =
          o * int64_t(dtype_size(s.dtype)) + rows * 4 + (s.dtype != DType::f32 ? 2 * o * 4 : 0);
      return RingCore::activation_bytes(busiest, 1) + block_result + DynamicRingCore::comm_buffer_bytes(busiest, block);
    }
  }
  throw std::logic_error("ring_level_activation_bytes: unknown schedule");
}

void RingLevel::setup(Backend& be, const RingSchedule& sch, Communicator& ring, Communicator* outer,
                      const RingCoreShape& cs, const RingLayoutPart& layout, SinkHeads sinks, const LatentBlock& latent) {
  check_travel("RingLevel", cs.travel, sch);
  if (cs.latent > 0 && sch.kind == RingScheduleKind::groups)
    throw std::logic_error("RingLevel: latent travel runs on a single or a double ring");
  if (sch.kind == RingScheduleKind::double_) check_double_ring_loop(cs.travel);
  be_ = &be;
  cs_ = cs;
  sinks_ = std::move(sinks);
  sch_ = sch;
  travel_ = cs.travel;
  const LayerShape& s = layout.shape();
  if (sch.kind == RingScheduleKind::groups) {
    // One ring per group size c over this rank's group; the rank's rows are stored by group size
    // (c = 1 first, then ascending).
    const int me = ring.rank();
    const TokenLayout tl = TokenLayout::build(s.balance, s, sch.R);
    std::vector<DynamicRing> rings;
    int64_t offset = tl.tokens_of(me, 1);
    for (int c : tl.ring_groups()) {
      const DynamicGroup g = dynamic_group_of(me, c, sch.R);
      if (g.c > 0) {
        DynamicRing r{c, g.first, g.member(me), offset, {}};
        for (int m = 0; m < c; ++m) r.pos.push_back(tl.positions_of(g.first + m, c));
        rings.push_back(r);
      }
      offset += tl.tokens_of(me, c);
    }
    groups_.setup(be, ring, cs, layout.queries(me), std::move(rings));
    return;
  }
  // Every position's queries and keys, once: the loops ask for them at every hop.
  std::vector<Positions> qtab, ktab;
  for (int j = 0; j < sch.R; ++j) {
    qtab.push_back(layout.queries(j));
    ktab.push_back(layout.keys(j));
  }
  const BlockPositions q = [qtab](int j) { return qtab[size_t(j)]; };
  const BlockPositions k = [ktab](int j) { return ktab[size_t(j)]; };
  hops_ = scan_hops(sch, layout, s);
  if (sch.kind == RingScheduleKind::single) {
    single_.setup(be, ring, cs, q, k, latent);
  } else {
    if (!outer) throw std::logic_error("RingLevel: a double ring needs its outer communicator");
    double_.setup(be, ring, *outer, cs, q, k, latent);
  }
}

void RingLevel::forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& o) {
  switch (sch_.kind) {
    case RingScheduleKind::single: single_.forward(q, k, v, o, hops_.single); break;  // the shape's policy
    case RingScheduleKind::double_:
      if (travel_ == RingTravel::q) double_.forward_pass_q(q, k, v, o, hops_.dbl);
      else double_.forward(q, k, v, o, hops_.dbl);
      break;
    case RingScheduleKind::groups: groups_.forward(q, k, v, o); break;
  }
  // The rows' o and lse are final here, whichever schedule merged them: the sinks, once.
  if (!sinks_.on()) return;
  Tensor lse_rows = lse();  // a view of the core's lse
  sinks_.forward(*be_, rows_shape(), o, lse_rows);
}

AttnShape RingLevel::rows_shape() const {
  AttnShape a;
  const Tensor& l = lse();  // [B, hq, n]
  a.B = l.shape.at(0); a.hq = int(l.shape.at(1)); a.nq = a.nk = l.shape.at(2);
  a.hk = cs_.hk; a.rep = cs_.rep; a.head0 = cs_.head0; a.d = cs_.d; a.d_v = cs_.d_v; a.causal = false;  // the sinks read no keys: the mask does not matter
  return a;
}

void RingLevel::backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o, const Tensor& dout,
                         Tensor& dq, Tensor& dk, Tensor& dv) {
  if (sinks_.on()) sinks_.backward(*be_, rows_shape(), o, dout, lse());  // reads the final rows only
  switch (sch_.kind) {
    case RingScheduleKind::single: single_.backward(q, k, v, o, dout, dq, dk, dv, hops_.single); return;
    case RingScheduleKind::double_: double_.backward(q, k, v, o, dout, dq, dk, dv, hops_.dbl); return;
    case RingScheduleKind::groups: groups_.backward(q, k, v, o, dout, dq, dk, dv); return;
  }
}

const Tensor& RingLevel::lse() const {
  switch (sch_.kind) {
    case RingScheduleKind::single: return single_.lse();
    case RingScheduleKind::double_: return double_.lse();
    case RingScheduleKind::groups: break;
  }
  return groups_.lse();
}

}  // namespace cpbench
