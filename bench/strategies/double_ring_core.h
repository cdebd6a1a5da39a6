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
// Bytes per rank (T = B*n tokens, hk = kv heads * d): fwd = s*T*2hk*(R-1) (inner W*(w-1) + outer
// W-1 hops: the ring's total); bwd = fwd + s_acc*T*2hk*(A_in + A_out), A_in = R when w > 1 (else
// 0), A_out = W when W > 1 (else 0): R for a single window or windows of one, R + W otherwise.
#pragma once
#include "bench/strategies/ring_core.h"

namespace cpbench {

class DoubleRingCore {
 public:
  // `inner` (w ranks) and `outer` (W ranks) are this rank's groups; ring position = outer.rank()*w
  // + inner.rank(); block_pos(rho) are the tokens of ring position rho.
  void setup(Backend& be, Communicator& inner, Communicator& outer, const RingCoreShape& s,
             BlockPositions block_pos);
  // Same contracts as RingCore::forward / backward (the full double ring).
  void forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& o);
  void backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o, const Tensor& dout,
                Tensor& dq, Tensor& dk, Tensor& dv);
  const Tensor& lse() const { return steps_.lse(); }
  void teardown();

  static int64_t activation_bytes(const RingCoreShape& s, int w, int W);
  static CommPrediction predicted_bytes(int64_t tokens, int64_t hk, int w, int W, int64_t elem, int64_t acc);

 private:
  int owner(int t, int j) const;  // ring position of the block held at round t, inner step j
  void pack_kv(const Tensor& k, const Tensor& v, Tensor& buf);

  Backend* be_ = nullptr;
  Communicator* inner_ = nullptr;
  Communicator* outer_ = nullptr;
  RingCoreShape s_;
  RingCore steps_;
  Tensor round_[2];  // k|v: the round's starting block / the next round's, arriving (outer)
  Tensor hop_[2];    // k|v: the inner ring's double buffer
  Tensor acc_[3];    // dk|dv float32: [0],[1] computed on / in flight (inner), [2] arriving (inner)
  Tensor acc_out_;   // dk|dv float32 arriving over the outer ring
};

}  // namespace cpbench
