// The q travel policy (--ring-pass q; ring_travel.h, DESIGN "Inference passes"): the same result
// as the kv forward, but the Q blocks travel `hops` hops to the previous rank while K,V stay.
// The float32 partial (o, lse) of each Q block travels with it: starting from its owner's
// diagonal block, every rank the Q visits merges in its own K,V's contribution and passes the
// partial on; after the last hop one send returns it to the owner (`hops` places ahead).
#include <stdexcept>

#include "bench/parts/ring_core.h"

namespace cpbench {

// Buffers: t[0], t[1] the Q blocks (double buffer: the run dtype, or under --comm-dtype encoded
// by their owner and decoded by each rank they visit, RingCore::q_in_hand); t[2], t[3], t[4] the partials
// o|lse (ring_core.h: float32, or o in bf16 under --partial-dtype bf16; [2],[3] computed on / in
// flight, [4] arriving).
void travel_q_setup(RingCore& core, RingTravelBuffers& bufs, int) {
  Backend& be = core.backend();
  bufs.t.clear();
  for (int i = 0; i < 2; ++i) bufs.t.push_back(core.alloc_q_travel());
  for (int i = 0; i < 3; ++i) bufs.t.push_back(be.alloc({core.partial_elems()}, core.partial_dtype(), MemKind::comm));
}

int64_t travel_q_buffer_bytes(const RingCoreShape& s, int) {
  const int64_t o = s.o_elems(), rows = s.B * s.hq * s.n;
  const int64_t part = o * int64_t(dtype_size(s.partial_dtype)) + rows * 4;
  return RingCore::q_travel_bytes(s, 2) + 3 * part;  // q double buffer (and one decoded), o|lse partials
}

void travel_q_forward(RingCore& core, RingTravelBuffers& bufs, const Tensor& q, const Tensor& k, const Tensor& v,
                      Tensor& o, int hops) {
  Backend& b = core.backend();
  Communicator& c = core.ring();
  const RingCoreShape& s = core.shape();
  const int R = c.size(), me = c.rank(), h = core.resolve_hops(hops);
  const int next = (me + 1) % R, prev = (me + R - 1) % R;
  const AttnShape a = core.attn_shape();
  const Positions kpos = core.key_positions(me);
  if (h == 0) {  // this rank's own block only: nothing travels
    b.attn_fwd(a, q, k, v, core.block_positions(me), kpos, o, core.lse_out());
    return;
  }
  if (bufs.t.size() != 5) throw std::logic_error("ring travel q: forward needs the core set up with travel q");
  Tensor* qbuf = &bufs.t[0];
  Tensor* part = &bufs.t[2];
  const int64_t part_n = core.partial_elems();
  // Step i: this rank holds the Q block of rank j = me+i (for i > 0 in qbuf, arrived from the
  // next rank) and in part[2] the partial the ranks before it on the Q's path built. It
  // computes its own K,V's contribution into a scratch partial while that partial is still
  // arriving (the same overlap as the backward's dK,dV accumulators), merges the arrived one in,
  // and sends the sum on with the Q: to the previous rank, and after the last step (i = h) back
  // to the owner j. Step 0 is the owner's diagonal block. What arrives last, from rank me-h, is
  // this rank's own Q block's partial with every rank's contribution.
  core.q_depart(q, qbuf[0]);
  Tensor& incoming = part[2];
  RingHop part_hop;
  for (int i = 0; i <= h; ++i) {
    RingHop hop;
    // Step 0 sends qbuf[0] (a copy of q: q itself is the caller's and const) so that the buffer
    // the next step receives into, qbuf[1], is never the one in flight.
    if (i < h) hop = core.post_hop(c, qbuf[i % 2], prev, qbuf[(i + 1) % 2], next, RingCore::kTagQ);
    const int j = (me + i) % R;
    const Positions qpos = core.block_positions(j);
    Tensor& scratch = part[i % 2];  // its send (step i-2) was waited for at step i-1
    Tensor so = core.part_o(scratch), sl = core.part_lse(scratch);
    const bool visible = i == 0 || core.any_visible(qpos, kpos);
    if (visible) {
      // this rank's own Q as formed; an arrived one as it travels (decoded under --comm-dtype)
      const Tensor& cur = i == 0 ? q : core.q_in_hand(qbuf[i % 2]);
      if (so.dtype == s.dtype) {  // the kernel writes the partial's dtype
        b.attn_fwd(a, cur, k, v, qpos, kpos, so, sl);
      } else {  // the kernel writes the run dtype, converted to the partial's
        b.attn_fwd(a, cur, k, v, qpos, kpos, core.block_out(), sl);
        b.convert(so, core.block_out());
      }
    }
    if (i > 0) {
      c.wait(part_hop.recv);
      if (visible) b.attn_merge(a, so, sl, core.part_o(incoming), core.part_lse(incoming));
      else b.copy_2d(scratch, part_n, incoming, part_n, 1, part_n);  // nothing to add: pass it on
      c.wait(part_hop.send);  // frees part[(i-1)%2] for step i+1
    }
    const int to = i < h ? prev : (me + h) % R, from = i < h ? next : (me - h + R) % R;
    part_hop = core.post_hop(c, scratch, to, incoming, from, RingCore::kTagPartial);
    if (i < h) core.wait_hop(c, hop);
  }
  c.wait(part_hop.recv);  // this rank's own Q block, with every rank's contribution
  core.pass_q_end(incoming, o);
  c.wait(part_hop.send);
}

// DESIGN's pass-Q terms (prefill, forward only): each rank's Q block (`tokens_q` = B*Tq new
// tokens, `hq` = query heads * d) goes `hops` (K) hops to the previous rank, and its partial (o
// in `acc` bytes over `ho` = query heads * d_v, lse float32 over `heads` query heads) travels with
// it and is then sent back to the owner, K places ahead: fwd = s_q*K + (acc*Tq*ho +
// 4*Tq*heads)*(K+1), nothing when K = 0; bwd = 0. s_q = elem*Tq*hq, or under --comm-dtype the
// encoded block's kv_transit_bytes.
CommPrediction travel_q_bytes(const RingBlockSizes& sz, int R, int64_t elem, int64_t acc, int hops,
                              const std::string& level) {
  const int h = hops < 0 ? R - 1 : hops;
  CommPrediction p;
  if (R <= 1 || h == 0) return p;
  // Q moves against the ring's K,V direction (to the previous rank); the partial rides along
  // with it on every hop and one last send returns it to its owner, h places ahead.
  const int64_t qb = kv_transit_bytes(sz.tokens_q * sz.hq, elem, sz.transit, sz.scaling);
  const int64_t partial = RingCore::partial_bytes(sz.tokens_q, sz.ho, sz.heads, acc);
  p.add(level, Phase::fwd, -1, (qb + partial) * h);
  return p.add(level, Phase::fwd, h, partial);
}

}  // namespace cpbench
