// double-ring — LoongTrain's double ring (Gu et al. 2024) on the zigzag layout: the P ranks of the
// ring split into windows of w consecutive ranks (mesh levels ring_outer = P/w, ring_inner = w;
// w = --inner-ring, default the ranks of one node). K,V circulate inside each window while the
// block each rank started a round with travels to the next window, overlapped with the round
// (double_ring_core.h). Rank r holds zigzag chunks r and 2P-1-r of 2P, so the causal work is
// balanced as in ring-zigzag. Forward bytes equal the ring's; what changes is where they go:
// each rank sends P/w - 1 blocks across windows (inter-node when windows are nodes) instead of
// the node's boundary ranks sending all of theirs.
// Bytes per rank (full double ring): fwd = s*T*2hk*(P-1); bwd = fwd + s_acc*T*2hk*(A), A = P when
// w = P or w = 1, P + P/w otherwise (the accumulators close the inner circle each round, then hop
// windows). Under a window or documents the schedule skips the hops no rank needs
// (DoubleRingCore::effective_hops; bytes as double_ring_core.h says).
// --balance doc-zigzag|greedy: ring position o*w + i (= the rank) takes the balanced layout's
// position.
#include "bench/strategies/ring_family.h"

namespace cpbench {

std::unique_ptr<Strategy> make_strategy_double_ring() {
  return std::make_unique<RingFamily>(RingPreset{
      "double-ring",
      "LoongTrain double ring: K,V circulate in windows of w ranks (inner ring) while\n"
      "blocks hop between windows (outer ring), overlapped; zigzag layout.",
      "inner rings inside a node; each rank sends only its R/w-1 outer blocks across nodes, not all R-1",
      RingOrder::zigzag, /*double_ring=*/true, /*balance=*/true, /*balance_dynamic=*/false});
}

}  // namespace cpbench
