// The double ring (LoongTrain, Gu et al. 2024): the R ranks of a ring split into W windows of w
// consecutive ring positions (rho = o*w + i: window o, inner index i). The K,V blocks circulate
// inside each window over the inner ring while, once per round, each rank passes the block it
// started the round with to the same inner index of the next window over the outer ring; the
// outer hop travels during the round's inner hops and their compute. W rounds of w blocks: every
// rank sees all R blocks. The block math (online merge, float32 running output, FlashAttention-2
// backward) is RingCore's steps; only the order of hops differs.
//
// Backward: K,V travel the same way; the float32 dK,dV accumulator of a block makes a full inner
// circle with it each round (w inner hops, back to the round's starter), then one outer hop to
// the next window, where the same block starts the next round and the partial sum is added to
// it; after the last round that outer hop reaches the block's owner.
//
// Hop truncation (DESIGN's K_eff on the two-level schedule, DoubleRingHops): at round t, inner
// step j, rank (o, i) holds the block of ring position ((o-t) mod W)*w + (i-j) mod w. The pair
// (t, j) is needed when some rank has a visible pair with the block it holds there. The schedule
// runs rounds 0..T (T = the last round with a needed pair: T outer hops) and, in round t, inner
// steps 0..J(t) (J(t) = the last needed step of round t, 0 when none: J(t) inner hops); a block
// no rank sees at (t, j) beyond those is never sent. Backward: the accumulator of a round goes
// J(t) hops with its block, then one send back J(t) places to the round's starter (for
// J(t) = w-1 that is the next rank: the full circle); after round T, one outer send T windows
// back to the block's owner (for T = W-1, the next window). Without a window or documents every
// pair is needed: T = W-1, J(t) = w-1, the full double ring.
//
// Bytes per rank (T_k = B*n tokens, 2hk = kv heads * (d + d_v) its k|v row, S = sum over t of J(t)):
//   fwd = s*T_k*2hk*(S + T)     (inner S hops, outer T hops; full: W*(w-1) + W-1 = R-1)
//   bwd = fwd + s_acc*T_k*2hk*(A_in + A_out), A_in = sum over t of (J(t)+1 if J(t) > 0 else 0),
//         A_out = T+1 if T > 0 else 0 (full: A_in = R when w > 1, A_out = W when W > 1).
#pragma once
#include <functional>
#include <vector>

#include "bench/parts/ring_core.h"

namespace cpbench {

// Which hops a double ring of W windows of w runs (see above): rounds 0..rounds, round t with
// inner steps 0..inner[t].
struct DoubleRingHops {
  int rounds = 0;          // T: outer hops of the K,V blocks
  std::vector<int> inner;  // J(t), t = 0..rounds: inner hops of round t
  int inner_total() const;  // S, the sum of inner[]
  bool fits(int w, int W) const;  // rounds in [0, W-1], rounds+1 inner counts, each in [0, w-1]
  bool operator==(const DoubleRingHops& o) const { return rounds == o.rounds && inner == o.inner; }
  // The full double ring: rounds = W-1, inner[t] = w-1.
  static DoubleRingHops full(int w, int W);
  // The truncated schedule from a visibility relation: (t, j) is needed when some ring position
  // `me` = o*w + i needs the block it holds there, that of `held` = ((o-t) mod W)*w + (i-j) mod w,
  // i.e. when needs(me, held). DoubleRingCore::effective_hops passes the kernels' mask on the
  // blocks' positions; a balanced layout's model (balance.h) passes its own interval arithmetic.
  static DoubleRingHops from_needs(int w, int W, const std::function<bool(int me, int held)>& needs);
};

class DoubleRingCore {
 public:
  // `inner` (w ranks) and `outer` (W ranks) are this rank's groups; ring position = outer.rank()*w
  // + inner.rank(); block_pos(rho) are the tokens of ring position rho; key_pos(rho) its keys
  // when they differ (--cached: its cache shard, then its new tokens; s.nk of them), else empty.
  // `latent` (s.latent > 0): MLA's latent travel (latent_keys.h), as RingCore::setup.
  void setup(Backend& be, Communicator& inner, Communicator& outer, const RingCoreShape& s,
             BlockPositions block_pos, BlockPositions key_pos = {}, const LatentBlock& latent = {});
  // Same contracts as RingCore::forward / backward, running the hops `hops` (a valid schedule
  // for this w, W: rounds <= W-1, one inner[t] in [0, w-1] per round; the same on every rank).
  void forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& o, const DoubleRingHops& hops);
  void backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o, const Tensor& dout,
                Tensor& dq, Tensor& dk, Tensor& dv, const DoubleRingHops& hops);
  // pass-Q (--ring-pass q; setup with s.travel q): the same result as forward(), with the Q blocks
  // on backward()'s K,V path and their float32 partial (o, lse) on its dK,dV accumulator path:
  // each round a Q block goes J(t) inner hops to the next rank, every rank merging in its own
  // K,V's contribution, and its partial then goes back J(t) places to the round's starter; the
  // round's starting block (and, after the round, its partial) go one outer hop to the next
  // window; after the last round the partial goes T windows back to its owner. K,V stay.
  void forward_pass_q(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& o, const DoubleRingHops& hops);
  const Tensor& lse() const { return steps_.lse(); }
  // Frees the buffers (a fresh core), for a test that sets one core object up again.
  void teardown();

  // DESIGN's hop truncation for the double ring: the needed (round, inner step) pairs of the
  // blocks `block_pos` (ring position -> positions) under the mask of `s`. A pure function of
  // the layout and the mask: every rank computes the same schedule. full(w, W) without a window
  // or documents (every block is seen by some rank in these layouts).
  static DoubleRingHops effective_hops(int w, int W, const BlockPositions& block_pos, const LayerShape& s);
  // The same with the keys of a ring position apart from its queries (--cached).
  // queries_travel: pass-Q's schedule (the held block is a Q block met by the holder's keys).
  static DoubleRingHops effective_hops(int w, int W, const BlockPositions& q_pos, const BlockPositions& k_pos,
                                       const LayerShape& s, bool queries_travel = false);
  static int64_t activation_bytes(const RingCoreShape& s, int w, int W);
  // The bytes above for `hops`, by level (ring_inner, ring_outer) and destination offset.
  static CommPrediction predicted_bytes(int64_t tokens, int64_t kv_row, int w, int W, int64_t elem, int64_t acc,
                                        const DoubleRingHops& hops, KvTransit transit = KvTransit::run,
                                        Fp8Scaling scaling = Fp8Scaling::block);
  // pass-Q's bytes (forward only), with Qb = elem*Tq*hq (a Q block: `tokens_q` = B*Tq, `hq` =
  // query heads * d) and Pb = acc*Tq*ho + 4*Tq*heads (its partial, `ho` = query heads * d_v):
  // ring_inner to +1 (Qb+Pb)*S and
  // to -J(t) Pb for each round with J(t) > 0; ring_outer to +1 (Qb+Pb)*T and, T > 0, to -T Pb.
  static CommPrediction predicted_bytes_pass_q(int64_t tokens_q, int64_t hq, int64_t ho, int64_t heads, int w, int W,
                                               int64_t elem, int64_t acc, const DoubleRingHops& hops);

 private:
  int owner(int t, int j) const;  // ring position of the block held at round t, inner step j
  void check_hops(const DoubleRingHops& hops) const;  // throws std::logic_error on a bad schedule

  Backend* be_ = nullptr;
  Communicator* inner_ = nullptr;
  Communicator* outer_ = nullptr;
  RingCoreShape s_;
  RingCore steps_;
  Tensor round_[2];  // k|v: the round's starting block / the next round's, arriving (outer)
  Tensor hop_[2];    // k|v: the inner ring's double buffer
  Tensor acc_[3];    // dk|dv float32: [0],[1] computed on / in flight (inner), [2] arriving (inner)
  Tensor acc_out_;   // dk|dv float32 arriving over the outer ring
  // pass-Q: Q blocks (run dtype) as round_/hop_, partials (float32) as acc_/acc_out_.
  Tensor qround_[2], qhop_[2], part_[3], part_out_;
};

}  // namespace cpbench
