#include "bench/tiers.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace cpbench {

std::vector<RankTiers> predict_tiers(const CommPrediction& p, const MeshDesc& d, int P,
                                     const std::vector<int>& node_of) {
  std::vector<int> all(static_cast<size_t>(P));
  std::iota(all.begin(), all.end(), 0);
  std::vector<RankTiers> out(static_cast<size_t>(P));
  for (int rank = 0; rank < P; ++rank) {
    for (const CommShare& c : p.shares) {
      const std::vector<int> members = c.level == "cp" ? all : Mesh::group_of(rank, d, c.level);
      const int g = static_cast<int>(members.size());
      const int me = static_cast<int>(std::find(members.begin(), members.end(), rank) - members.begin());
      if (g < 2) continue;
      // A spread share is (g-1) equal chunks, one per other member: the split of an all-to-all,
      // all-gather or reduce-scatter (split_by_tier); a hop goes to one member.
      TierBytes t;
      if (c.to == 0) {
        if (c.bytes % (g - 1) != 0)
          throw std::logic_error("predict_tiers: " + std::to_string(c.bytes) + " bytes on level '" + c.level +
                                 "' do not split evenly over " + std::to_string(g - 1) + " peers");
        t = split_by_tier(OpKind::all_gather, c.bytes / (g - 1), members, me, -1, node_of);
      } else {
        const int peer = ((me + c.to) % g + g) % g;
        t = split_by_tier(OpKind::send, c.bytes, members, me, peer, node_of);
      }
      RankTiers& r = out[static_cast<size_t>(rank)];
      TierBytes& dst = c.phase == Phase::fwd ? r.fwd : c.phase == Phase::recompute ? r.rec : r.bwd;
      dst.intra += t.intra;
      dst.inter += t.inter;
    }
  }
  return out;
}

std::string placement_warning(const std::string& strategy, const MeshDesc& d, int P, const std::vector<int>& node_of) {
  if (node_of.empty()) return "";
  auto spans = [&](const std::vector<int>& members) {
    for (int m : members)
      if (node_of.at(size_t(m)) != node_of.at(size_t(members.front()))) return true;
    return false;
  };
  auto any_spans = [&](const std::string& level) {
    for (int r = 0; r < P; ++r)
      if (spans(Mesh::group_of(r, d, level))) return true;
    return false;
  };
  std::vector<int> all(static_cast<size_t>(P));
  std::iota(all.begin(), all.end(), 0);
  if (strategy == "megatron-sp" && spans(all))
    return "megatron-sp's tensor-parallel all-gather/reduce-scatter spans nodes (it belongs inside one node)";
  if (d.has("tp") && d.size_of("tp") > 1 && any_spans("tp"))
    return "tp groups of " + std::to_string(d.size_of("tp")) +
           " ranks span nodes: the tensor-parallel all-gather/reduce-scatter belongs inside one node (a tp degree "
           "that divides the ranks per node)";
  if (!d.has("ulysses") || d.size_of("ulysses") < 2 || !any_spans("ulysses")) return "";
  bool has_ring = false, rings_inside = true;  // a ring level of more than one rank, all inside nodes
  for (const char* level : {"ring", "ring_inner", "ring_outer"})
    if (d.has(level) && d.size_of(level) > 1) {
      has_ring = true;
      rings_inside = rings_inside && !any_spans(level);
    }
  if (!has_ring || !rings_inside) return "";
  return "Ulysses groups of " + std::to_string(d.size_of("ulysses")) +
         " ranks span nodes while the ring groups stay inside them: the all-to-all belongs on the fast "
         "intra-node links (try --placement ulysses-inner, or a Ulysses degree that divides the ranks per node)";
}

}  // namespace cpbench
