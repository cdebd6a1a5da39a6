// ring-zigzag — ring attention on the zigzag layout (zhuzilin/ring-flash-attention, Llama 3's
// load balancing): the sequence is cut into 2P chunks of N/(2P) and rank r holds chunks r and
// 2P-1-r, an early and a late one, so under the causal mask every rank has the same number of
// visible query-key pairs. The ring algorithm and its bytes are ring's (ring_core.h):
// fwd = s*T*2hk*(P-1); bwd = s*T*2hk*(P-1) + s_acc*T*2hk*P.
#include "bench/strategies/ring_family.h"

namespace cpbench {

std::unique_ptr<Strategy> make_strategy_ring_zigzag() {
  return std::make_unique<RingFamily>(RingPreset{
      "ring-zigzag",
      "Ring attention with rank r holding chunks r and 2P-1-r of 2P:\n"
      "the causal work is balanced (ring-flash-attention, Llama 3).",
      "K,V to the next rank only: intra-node except at node boundaries, where a rank sends all its hops across",
      RingOrder::zigzag, /*double_ring=*/false, /*balance=*/false, /*balance_dynamic=*/false});
}

}  // namespace cpbench
