// ring — ring attention (Liu et al. 2023) on the contiguous layout: rank r holds tokens
// [r*N/P, (r+1)*N/P). K,V circulate P-1 hops in the forward; in the backward they circulate
// again and the dK,dV accumulators travel P hops back to their owner (ring_core.h).
// Under the causal mask rank r computes r full blocks and one half (diagonal) block, so the last
// rank does (2P-1)/P times the mean work; ring-zigzag and ring-striped fix that by layout alone.
// Bytes per rank: fwd = s*T*2hk*(P-1); bwd = s*T*2hk*(P-1) + s_acc*T*2hk*P.
//
// Under --balance dynamic the one ring becomes one ring per CP group size (dynamic_ring_core.h):
// a document of group size c circulates only inside its group of c ranks, c = 1 documents not at
// all, and the ranks hold the different token counts the layout gives them (balance.h).
#include <algorithm>

#include "bench/strategies/dynamic_ring_core.h"
#include "bench/strategies/layout.h"
#include "bench/strategies/ring_core.h"

namespace cpbench {

namespace {

class Ring final : public RingLayer {
 public:
  std::string name() const override { return "ring"; }
  std::string summary() const override {
    return "Ring attention on contiguous token shards: K,V circulate P-1 hops, dK,dV\n"
           "accumulators P hops back to their owner; causal work is imbalanced.";
  }
  std::string tiers() const override { return "K,V to the next rank only: intra-node except at node boundaries, where a rank sends all its hops across"; }
  std::string constraints() const override { return "P divides seq"; }
  bool supports_balance(BalanceScheme) const override { return true; }
  void check(const LayerShape& s, int P, const MeshSpec&) const override {
    require_seq_multiple(s, P, "P");
    if (s.balance == BalanceScheme::dynamic && s.ring_pass_q)
      throw ConstraintError("ring: --balance dynamic circulates K,V inside each document's group; --ring-pass q "
                            "is built for the static and doc-zigzag/greedy layouts only");
  }
  CommPrediction predicted_bytes(const LayerShape& s, int P, const MeshSpec& m, int64_t elem,
                                 int64_t acc) const override {
    if (s.balance != BalanceScheme::dynamic) return RingLayer::predicted_bytes(s, P, m, elem, acc);
    // The busiest rank's (the one figure a plan or dry run shows).
    CommPrediction most;
    for (int r = 0; r < P; ++r) {
      CommPrediction p = predicted_bytes_of_rank(s, P, m, elem, acc, r);
      if (r == 0 || p.fwd + p.bwd > most.fwd + most.bwd) most = p;
    }
    return most;
  }
  CommPrediction predicted_bytes_of_rank(const LayerShape& s, int P, const MeshSpec& m, int64_t elem, int64_t acc,
                                         int rank) const override {
    if (s.balance != BalanceScheme::dynamic) return RingLayer::predicted_bytes(s, P, m, elem, acc);
    return TokenLayout::build(s.balance, s, P).dynamic_ring_bytes(rank, s.B, 2 * int64_t(s.G) * s.d, elem, acc);
  }
  bool predicts_per_rank(const LayerShape& s) const override { return s.balance == BalanceScheme::dynamic; }

 protected:
  Positions rank_positions(const LayerShape& s, int P, int j) const override {
    const int64_t T = s.N / P;
    return Positions::contiguous(j * T, T);
  }
  void core_setup() override {
    if (shape().balance != BalanceScheme::dynamic) return RingLayer::core_setup();
    const LayerShape& s = shape();
    const int P = mesh().P, me = mesh().cp->rank();
    const TokenLayout layout = TokenLayout::build(s.balance, s, P);
    std::vector<DynamicRing> rings;
    int64_t offset = layout.tokens_of(me, 1);  // the rank's rows: group size 1 first, then ascending
    for (int c : layout.ring_groups()) {
      const DynamicGroup g = dynamic_group_of(me, c, P);
      if (g.c > 0) {
        DynamicRing r{c, g.first, g.member(me), offset, {}};
        for (int m = 0; m < c; ++m) r.pos.push_back(layout.positions_of(g.first + m, c));
        rings.push_back(r);
      }
      offset += layout.tokens_of(me, c);
    }
    RingCoreShape cs;
    cs.B = s.B; cs.n = T_; cs.hq = s.H; cs.hk = s.G; cs.d = s.d; cs.causal = s.causal; cs.dtype = s.dtype;
    cs.window = s.window; cs.docs = s.docs;
    dynamic_.setup(be(), *mesh().cp, cs, pos_, std::move(rings));
  }
  void core_forward() override {
    if (shape().balance != BalanceScheme::dynamic) return RingLayer::core_forward();
    dynamic_.forward(q_, k_, v_, o_);
  }
  void core_backward() override {
    if (shape().balance != BalanceScheme::dynamic) return RingLayer::core_backward();
    dynamic_.backward(q_, k_, v_, o_, do_, dq_, dk_, dv_);
  }
  void export_lse(std::vector<float>& global) override {
    if (shape().balance != BalanceScheme::dynamic) return RingLayer::export_lse(global);
    const LayerShape& s = shape();
    add_lse_rows(global, be().download(dynamic_.lse()), s.B, s.H, s.N, 0, s.H, pos_);
  }
  int64_t core_activation_bytes(const LayerShape& s, int P, const MeshSpec& m) const override {
    if (s.balance != BalanceScheme::dynamic) return RingLayer::core_activation_bytes(s, P, m);
    // The busiest rank's tokens and the largest block it may receive.
    const TokenLayout layout = TokenLayout::build(s.balance, s, P);
    int64_t most = 0, block = 0;
    for (int j = 0; j < P; ++j) {
      most = std::max(most, layout.positions_of(j).count());
      for (int c : layout.ring_groups()) block = std::max(block, layout.tokens_of(j, c));
    }
    RingCoreShape cs;
    cs.B = s.B; cs.n = most; cs.hq = s.H; cs.hk = s.G; cs.d = s.d; cs.dtype = s.dtype;
    const int64_t o = s.B * most * s.H * s.d, rows = s.B * s.H * most;
    const int64_t block_result = o * int64_t(dtype_size(s.dtype)) + rows * 4 + (s.dtype != DType::f32 ? 2 * o * 4 : 0);
    return RingCore::activation_bytes(cs, 1) + block_result + DynamicRingCore::comm_buffer_bytes(cs, block);
  }

 private:
  DynamicRingCore dynamic_;
};

}  // namespace

std::unique_ptr<Strategy> make_strategy_ring() { return std::make_unique<Ring>(); }

}  // namespace cpbench
