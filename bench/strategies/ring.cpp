// ring — ring attention (Liu et al. 2023) on the contiguous layout: rank r holds tokens
// [r*N/P, (r+1)*N/P). K,V circulate P-1 hops in the forward; in the backward they circulate
// again and the dK,dV accumulators travel P hops back to their owner (ring_core.h).
// Under the causal mask rank r computes r full blocks and one half (diagonal) block, so the last
// rank does (2P-1)/P times the mean work; ring-zigzag and ring-striped fix that by layout alone.
// Bytes per rank: fwd = s*T*2hk*(P-1); bwd = s*T*2hk*(P-1) + s_acc*T*2hk*P.
//
// Under --balance dynamic the one ring becomes one ring per CP group size (the groups schedule,
// bench/parts/ring_schedule.h): a document of group size c circulates only inside its group of
// c ranks, c = 1 documents not at all, and the ranks hold the different token counts the layout
// gives them (balance.h).
#include "bench/strategies/ring_family.h"

namespace cpbench {

std::unique_ptr<Strategy> make_strategy_ring() {
  return std::make_unique<RingFamily>(RingPreset{
      "ring",
      "Ring attention on contiguous token shards: K,V circulate P-1 hops, dK,dV\n"
      "accumulators P hops back to their owner; causal work is imbalanced.",
      "K,V to the next rank only: intra-node except at node boundaries, where a rank sends all its hops across",
      RingOrder::contiguous, /*double_ring=*/false, /*balance=*/true, /*balance_dynamic=*/true});
}

}  // namespace cpbench
