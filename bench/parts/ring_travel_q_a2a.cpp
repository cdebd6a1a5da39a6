// The q-a2a travel policy, Meta's pass-Q (--ring-pass q-a2a; arXiv:2411.01783, ring_travel.h,
// DESIGN "Inference passes"): the Q blocks travel `hops` hops to the previous rank as under q,
// but no partial travels with them: each rank keeps the float32 partial (o, lse) it computes for
// every visiting Q block, and after the ring one exchange returns each partial to its owner, who
// merges its h + 1 partials (its own first). The exchange is an all-to-all over the ring when
// every position visits every other (h = R-1), else h sends and receives, to the owners 1..h
// places ahead. A hop's send waits for no merge, and each partial moves once. Single ring only.
#include <stdexcept>

#include "bench/parts/ring_core.h"

namespace cpbench {

// Buffers: t[0], t[1] the Q blocks (double buffer, as under q: encoded under --comm-dtype); t[2] the partials this rank
// computed, chunk j for the Q block of position j (chunk me its own), and t[3] those returned to
// it, chunk j computed by position j; R chunks of partial_elems() each. hops: the point-to-point
// return's (a truncated ring), one per place ahead.
void travel_q_a2a_setup(RingCore& core, RingTravelBuffers& bufs, int R) {
  Backend& be = core.backend();
  const int64_t part = core.partial_elems();
  bufs.t.clear();
  for (int i = 0; i < 2; ++i) bufs.t.push_back(core.alloc_q_travel());
  for (int i = 0; i < 2; ++i) bufs.t.push_back(be.alloc({R * part}, core.partial_dtype(), MemKind::comm));
  bufs.hops.resize(size_t(R));
}

int64_t travel_q_a2a_buffer_bytes(const RingCoreShape& s, int R) {
  const int64_t o = s.o_elems(), rows = s.B * s.hq * s.n;
  const int64_t part = o * int64_t(dtype_size(s.partial_dtype)) + rows * 4;
  return RingCore::q_travel_bytes(s, 2) + 2 * int64_t(R) * part;  // q double buffer (one decoded), R partials sent and received
}

void travel_q_a2a_forward(RingCore& core, RingTravelBuffers& bufs, const Tensor& q, const Tensor& k,
                          const Tensor& v, Tensor& o, int hops) {
  Backend& b = core.backend();
  Communicator& c = core.ring();
  const int R = c.size(), me = c.rank(), h = core.resolve_hops(hops);
  const int next = (me + 1) % R, prev = (me + R - 1) % R;
  const AttnShape a = core.attn_shape();
  if (h == 0) {  // this rank's own block only: nothing travels
    b.attn_fwd(a, q, k, v, core.block_positions(me), core.key_positions(me), o, core.lse_out());
    return;
  }
  if (bufs.t.size() != 4) throw std::logic_error("ring travel q-a2a: forward needs the core set up with travel q-a2a");
  Tensor* qbuf = &bufs.t[0];
  Tensor& sent = bufs.t[2];
  Tensor& returned = bufs.t[3];
  const int64_t part_n = core.partial_elems();
  auto chunk = [&](const Tensor& buf, int j) { return buf.view(int64_t(j) * part_n, {part_n}); };
  // The ring: at step i this rank holds the Q block of position me+i and writes its K,V's
  // contribution into the send chunk for that owner (chunk (me+i) mod R, where an all-to-all
  // takes it), while the next Q block arrives.
  core.q_depart(q, qbuf[0]);
  for (int i = 0; i <= h; ++i) {
    RingHop hop;
    if (i < h) hop = core.post_hop(c, qbuf[i % 2], prev, qbuf[(i + 1) % 2], next, RingCore::kTagQ);
    const int j = (me + i) % R;
    Tensor part = chunk(sent, j);
    // this rank's own Q as formed; an arrived one as it travels (decoded under --comm-dtype, and
    // only when a pair is visible: q_block writes the empty partial otherwise, reading no Q)
    const bool visible = i == 0 || core.any_visible(core.block_positions(j), core.key_positions(me));
    core.q_block(visible && i > 0 ? core.q_in_hand(qbuf[i % 2]) : q, j, k, v, part);
    if (i < h) core.wait_hop(c, hop);
  }
  // The return: every partial to its owner in one exchange. Chunk j of the receive buffer is the
  // partial position j computed for this rank's Q block (j = me: its own, already here).
  if (h == R - 1) {
    c.all_to_all(sent, returned);
  } else {
    for (int i = 1; i <= h; ++i) {
      Tensor recv = chunk(returned, (me - i + R) % R);
      bufs.hops[size_t(i)] =
          core.post_hop(c, chunk(sent, (me + i) % R), (me + i) % R, recv, (me - i + R) % R, RingCore::kTagPartial);
    }
    for (int i = 1; i <= h; ++i) core.wait_hop(c, bufs.hops[size_t(i)]);
  }
  // Merge: the own partial first, then those of the positions the Q block visited (me-1 .. me-h).
  Tensor acc = chunk(sent, me);
  Tensor ao = core.part_o(acc), al = core.part_lse(acc);
  for (int i = 1; i <= h; ++i) {
    const Tensor in = chunk(returned, (me - i + R) % R);
    b.attn_merge(a, ao, al, core.part_o(in), core.part_lse(in));
  }
  core.pass_q_end(acc, o);
}

// The Q block K hops to the previous rank, then one partial to each of the K owners ahead:
// fwd = s_q*K + (acc*Tq*hq + 4*Tq*heads)*K (s_q as travel_q_bytes: elem*Tq*hq or encoded); bwd = 0.
CommPrediction travel_q_a2a_bytes(const RingBlockSizes& sz, int R, int64_t elem, int64_t acc, int hops,
                                  const std::string& level) {
  const int h = hops < 0 ? R - 1 : hops;
  CommPrediction p;
  if (R <= 1 || h == 0) return p;
  // Q moves against the ring's K,V direction (to the previous rank); each partial goes once to its
  // owner, i places ahead for the Q block of position me+i.
  const int64_t qb = kv_transit_bytes(sz.tokens_q * sz.hq, elem, sz.transit, sz.scaling);
  const int64_t partial = RingCore::partial_bytes(sz.tokens_q, sz.ho, sz.heads, acc);
  p.add(level, Phase::fwd, -1, qb * h);
  for (int i = 1; i <= h; ++i) p.add(level, Phase::fwd, i, partial);
  return p;
}

}  // namespace cpbench
