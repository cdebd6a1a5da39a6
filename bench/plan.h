// Planning: the config expanded into jobs (strategy, mesh, seq), each runnable or skipped with
// the constraint that stops it.
#pragma once
#include <string>
#include <vector>

#include "bench/config.h"

namespace cpbench {

// One planned result: a strategy at one sequence length and mesh.
struct Job {
  const StrategyInfo* info;
  int64_t seq;
  MeshSpec mesh;       // resolved
  std::string label;   // the strategy's label for this mesh: "usp[u2xr2]"
  std::string skip;    // non-empty: skipped, with this reason
};

// Expands the config into jobs. Constraint violations of explicitly requested strategies or
// meshes throw ConstraintError (the caller exits before any work); those chosen by default are
// returned as skipped.
// host_ranks_per_node: ranks sharing this host (the double ring's default inner ring when
// --ranks-per-node is not given; 0 = unknown).
std::vector<Job> plan_jobs(const RunConfig& cfg, int P, int host_ranks_per_node = 0);

}  // namespace cpbench
