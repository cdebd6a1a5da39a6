// ring — ring attention (Liu et al. 2023) on the contiguous layout: rank r holds tokens
// [r*N/P, (r+1)*N/P). K,V circulate P-1 hops in the forward; in the backward they circulate
// again and the dK,dV accumulators travel P hops back to their owner (ring_core.h).
// Under the causal mask rank r computes r full blocks and one half (diagonal) block, so the last
// rank does (2P-1)/P times the mean work; ring-zigzag and ring-striped fix that by layout alone.
// Bytes per rank: fwd = s*T*2hk*(P-1); bwd = s*T*2hk*(P-1) + s_acc*T*2hk*P.
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
  bool supports_balance() const override { return true; }
  void check(const LayerShape& s, int P, const MeshSpec&) const override {
    require_seq_multiple(s, P, "P");
  }

 protected:
  Positions rank_positions(const LayerShape& s, int P, int j) const override {
    const int64_t T = s.N / P;
    return Positions::contiguous(j * T, T);
  }
};

}  // namespace

std::unique_ptr<Strategy> make_strategy_ring() { return std::make_unique<Ring>(); }

}  // namespace cpbench
