#include "bench/plan.h"

namespace cpbench {

std::vector<int> divisors(int p) {
  std::vector<int> d;
  for (int i = 1; i <= p; ++i)
    if (p % i == 0) d.push_back(i);
  return d;
}

std::vector<Job> plan_jobs(const RunConfig& cfg, int P) {
  std::vector<Job> jobs;
  for (int64_t seq : cfg.seqs) {
    const LayerShape shape = cfg.shape(seq);
    for (const auto& name : cfg.strategies) {
      const StrategyInfo* info = find_strategy(name);
      auto strat = info->make();
      std::vector<MeshSpec> requests;
      const bool enumerate = strat->uses_mesh() && cfg.mesh_all;
      if (enumerate) {
        for (int u : divisors(P)) requests.push_back({u, P / u, cfg.placement, cfg.ring_layout});
      } else {
        requests.push_back({cfg.ulysses, cfg.ring, cfg.placement, cfg.ring_layout});
      }
      // Named explicitly: the strategy itself, or the mesh (--ulysses/--ring) of a mesh strategy.
      const bool named = !enumerate && (cfg.strategies_explicit || (strat->uses_mesh() && (cfg.ulysses || cfg.ring)));
      for (const MeshSpec& req : requests) {
        Job job{info, seq, req, strat->name(), ""};
        try {
          job.mesh = strat->resolve_mesh(req, shape, P);
          job.label = strat->label(job.mesh);
          strat->check(shape, P, job.mesh);
        } catch (const ConstraintError& e) {
          if (named) throw;
          job.skip = e.what();
          if (enumerate) job.label = strat->label(req);
        }
        jobs.push_back(job);
      }
    }
  }
  return jobs;
}

}  // namespace cpbench
