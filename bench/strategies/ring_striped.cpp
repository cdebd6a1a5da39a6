// ring-striped — ring attention on the striped layout (Brandon et al. 2023, Striped Attention):
// token t lives on rank t mod P, so every block pair is an almost-triangular causal problem and
// the work is balanced without reordering chunks. The ring algorithm and its bytes are ring's
// (ring_core.h): fwd = s*T*2hk*(P-1); bwd = s*T*2hk*(P-1) + s_acc*T*2hk*P.
#include "bench/strategies/ring_core.h"

namespace cpbench {

namespace {

class RingStriped final : public RingLayer {
 public:
  std::string name() const override { return "ring-striped"; }
  std::string summary() const override {
    return "Ring attention with token t on rank t mod P (Striped Attention):\n"
           "the causal work is balanced without reordering chunks.";
  }
  std::string tiers() const override { return "K,V to the next rank only: intra-node except at node boundaries, where a rank sends all its hops across"; }
  std::string constraints() const override { return "P divides seq"; }
  void check(const LayerShape& s, int P, const MeshSpec&) const override {
    require_seq_multiple(s, P, "P");
  }

 protected:
  Positions rank_positions(const LayerShape& s, int P, int j) const override {
    return Positions::strided(j, P, s.N / P);
  }
};

}  // namespace

std::unique_ptr<Strategy> make_strategy_ring_striped() { return std::make_unique<RingStriped>(); }

}  // namespace cpbench
