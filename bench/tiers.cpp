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
      TierBytes& dst = c.phase == Phase::fwd ? out[static_cast<size_t>(rank)].fwd : out[static_cast<size_t>(rank)].bwd;
      dst.intra += t.intra;
      dst.inter += t.inter;
    }
  }
  return out;
}

}  // namespace cpbench
