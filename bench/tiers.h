// The model's per-tier prediction (DESIGN "Nodes and tiers"): each share of a strategy's
// predicted bytes (strategy.h CommShare) split by destination with the same per-peer rule the
// communicators use for the measured bytes (comm/communicator.h split_by_tier), on the mesh's
// groups. A pure function of the model, the mesh description, P and the node map: no MPI.
#pragma once
#include <string>
#include <vector>

#include "bench/strategy.h"

namespace cpbench {

struct RankTiers {
  TierBytes fwd, bwd, rec;  // rec: Phase::recompute (--recompute)
};

// One entry per world rank. node_of: the node of every world rank (empty: one node).
std::vector<RankTiers> predict_tiers(const CommPrediction& p, const MeshDesc& d, int P,
                                     const std::vector<int>& node_of);

// The seed's placement rule: the heavy all-to-all (and Megatron-SP's tensor-parallel
// collectives) belong on the fast links. Returns a warning when Megatron-SP's group (all P
// ranks) or a tp level's group (usp --tp) spans nodes, or when a Ulysses group spans nodes while
// the mesh's ring groups stay inside them; "" otherwise (also on one node).
std::string placement_warning(const std::string& strategy, const MeshDesc& d, int P, const std::vector<int>& node_of);

}  // namespace cpbench
