// ring-striped — ring attention on the striped layout (Brandon et al. 2023, Striped Attention):
// token t lives on rank t mod P, so every block pair is an almost-triangular causal problem and
// the work is balanced without reordering chunks. The ring algorithm and its bytes are ring's
// (ring_core.h): fwd = s*T*2hk*(P-1); bwd = s*T*2hk*(P-1) + s_acc*T*2hk*P.
#include "bench/strategies/ring_family.h"

namespace cpbench {

std::unique_ptr<Strategy> make_strategy_ring_striped() {
  return std::make_unique<RingFamily>(RingPreset{
      "ring-striped",
      "Ring attention with token t on rank t mod P (Striped Attention):\n"
      "the causal work is balanced without reordering chunks.",
      "K,V to the next rank only: intra-node except at node boundaries, where a rank sends all its hops across",
      RingOrder::striped, /*double_ring=*/false, /*balance=*/false, /*balance_dynamic=*/false});
}

}  // namespace cpbench
