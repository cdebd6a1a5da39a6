// The ring-attention core (Liu et al. 2023; the ring-flash-attention algorithm) shared by ring,
// ring-zigzag, ring-striped and usp, and the SeqShardedLayer base of the three ring strategies.
//
// R ranks of a ring each hold the q, k, v of n tokens per batch row. Forward: the K,V blocks
// (k|v packed in one run-dtype buffer) travel R-1 hops to the next rank while the block in hand
// is computed; partial (o, lse) are merged online. Backward (FlashAttention-2, with the FINAL o
// and lse): K,V travel the ring again, and the float32 dK,dV accumulator of each block travels
// WITH it: every rank adds its contribution to the accumulator of the block it holds and passes
// it on, so after R hops the accumulator is back at the block's owner. The causal mask comes
// from the global positions of query rows and key columns only, so the token layout alone
// decides the work balance.
//
// Bytes per rank (DESIGN, with T the B*n tokens of a ring rank, hk = kv heads * d):
//   fwd = s*T*2hk*(R-1);  bwd = s*T*2hk*(R-1) + s_acc*T*2hk*R;  both 0 when R = 1.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "bench/strategies/seq_sharded_layer.h"
#include "comm/communicator.h"

namespace cpbench {

// What one ring rank works on. Heads are the LOCAL head counts (usp: H/U, G/U).
struct RingCoreShape {
  int64_t B = 1, n = 0;  // batch, tokens per batch row on each ring rank
  int hq = 0, hk = 0, d = 0;
  bool causal = true;
  DType dtype = DType::f32;
};

// Global positions of the n tokens ring rank j holds, in storage order.
using BlockPositions = std::function<Positions(int j)>;

class RingCore {
 public:
  // Allocates the core's buffers (lse, delta, one block result, comm buffers when R > 1).
  void setup(Backend& be, Communicator& ring, const RingCoreShape& s, BlockPositions block_pos);
  // q [B,n,hq,d], k, v [B,n,hk,d] (run dtype) -> o [B,n,hq,d] (run dtype); lse() [B,hq,n] f32.
  void forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& o);
  // With the forward's final o (and lse, kept here) and dout [B,n,hq,d]:
  // dq [B,n,hq,d], dk, dv [B,n,hk,d] float32, overwritten.
  void backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv);
  const Tensor& lse() const { return lse_; }
  void teardown();

  // Bytes the core keeps allocated per rank: lse, delta, block o and lse, and when R > 1 two
  // k|v buffers (run dtype) and three dk|dv accumulators (float32).
  static int64_t activation_bytes(const RingCoreShape& s, int R);
  // DESIGN's ring terms for R ranks, `tokens` = B*n per rank, `hk` = kv heads * d.
  static CommPrediction predicted_bytes(int64_t tokens, int64_t hk, int R, int64_t elem, int64_t acc);

 private:
  AttnShape attn_shape() const;
  Tensor kv_view(Tensor& buf, int which) const;   // which 0: k, 1: v, shaped [B,n,hk,d]
  void pack_kv(const Tensor& k, const Tensor& v, Tensor& buf);

  Backend* be_ = nullptr;
  Communicator* ring_ = nullptr;
  RingCoreShape s_;
  BlockPositions block_pos_;
  Tensor lse_, delta_, o_blk_, lse_blk_;
  Tensor kv_[2];   // k|v blocks, run dtype (double buffer: one computed on, one arriving)
  Tensor acc_[3];  // dk|dv accumulators, float32: [0],[1] computed on / in flight, [2] arriving
};

// ring, ring-zigzag, ring-striped: a SeqShardedLayer whose core is a RingCore over the whole CP
// group. A subclass fixes the token layout (rank_positions) and its constraint.
class RingLayer : public SeqShardedLayer {
 public:
  CommPrediction predicted_bytes(const LayerShape& s, int P, const MeshSpec& m, int64_t elem,
                                 int64_t acc) const override;

 protected:
  // Positions of the N/P tokens rank j of P holds (storage order).
  virtual Positions rank_positions(const LayerShape& s, int P, int j) const = 0;

  Positions token_positions(const LayerShape& s, const Mesh& m) const override {
    return rank_positions(s, m.P, m.cp->rank());
  }
  void core_setup() override;
  void core_forward() override { core_.forward(q_, k_, v_, o_); }
  void core_backward() override { core_.backward(q_, k_, v_, o_, do_, dq_, dk_, dv_); }
  void core_teardown() override { core_.teardown(); }
  void export_lse(std::vector<float>& global) override;
  int64_t core_activation_bytes(const LayerShape& s, int P, const MeshSpec& m) const override;

  // Throws ConstraintError("<name>: seq=N is not divisible by <what>=<multiple>") unless
  // `multiple` divides N.
  void require_seq_multiple(const LayerShape& s, int64_t multiple, const std::string& what) const;

  RingCore core_;
};

}  // namespace cpbench
