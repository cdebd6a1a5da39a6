// ring-zigzag — ring attention on the zigzag layout (zhuzilin/ring-flash-attention, Llama 3's
// load balancing): the sequence is cut into 2P chunks of N/(2P) and rank r holds chunks r and
// 2P-1-r, an early and a late one, so under the causal mask every rank has the same number of
// visible query-key pairs. The ring algorithm and its bytes are ring's (ring_core.h):
// fwd = s*T*2hk*(P-1); bwd = s*T*2hk*(P-1) + s_acc*T*2hk*P.
#include "bench/strategies/ring_core.h"

namespace cpbench {

namespace {

class RingZigzag final : public RingLayer {
 public:
  std::string name() const override { return "ring-zigzag"; }
  std::string summary() const override {
    return "Ring attention with rank r holding chunks r and 2P-1-r of 2P:\n"
           "the causal work is balanced (ring-flash-attention, Llama 3).";
  }
  std::string tiers() const override { return "K,V to the next rank only: intra-node except at node boundaries, where a rank sends all its hops across"; }
  std::string constraints() const override { return "2P divides seq"; }
  void check(const LayerShape& s, int P, const MeshSpec&) const override {
    require_seq_multiple(s, 2 * int64_t(P), "2*P");
  }

 protected:
  Positions rank_positions(const LayerShape& s, int P, int j) const override {
    const int64_t c = s.N / (2 * int64_t(P));
    return Positions::two(j * c, c, (2 * int64_t(P) - 1 - j) * c, c);
  }
};

}  // namespace

std::unique_ptr<Strategy> make_strategy_ring_zigzag() { return std::make_unique<RingZigzag>(); }

}  // namespace cpbench
