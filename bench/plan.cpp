#include "bench/plan.h"

#include "bench/parts/sublayer_mesh.h"

namespace cpbench {

namespace {
// The request among the meshes `strat` declares on P ranks (a single and a double ring level for
// usp) whose resolved label is `entry` ("usp[t2xu2xr2]"): the label is formatted in one place
// (Strategy::label), so a named mesh is read back through it rather than parsed a second way.
MeshSpec named_mesh(const Strategy& strat, const std::string& entry, const MeshSpec& base, const LayerShape& shape,
                    int P) {
  std::vector<MeshSpec> candidates = strat.mesh_candidates(base, P);
  if (strat.capabilities().mesh) {
    MeshSpec dbl = base;
    dbl.usp_ring = base.usp_ring == UspRing::double_ ? UspRing::single : UspRing::double_;
    for (const MeshSpec& m : strat.mesh_candidates(dbl, P)) candidates.push_back(m);
  }
  std::string labels;
  for (const MeshSpec& req : candidates) {
    std::string label;
    try {
      label = strat.mesh_label(strat.resolve_mesh(req, shape, P));
    } catch (const ConstraintError&) {
      continue;
    }
    if (label == entry) return req;
    labels += (labels.empty() ? "" : ", ") + label;
  }
  throw ConstraintError(strat.name() + ": no mesh on P=" + std::to_string(P) + " ranks is labelled '" + entry +
                        "' (its meshes: " + labels + ")");
}
}  // namespace

// The strategies that run --attention mla (latent: --mla-travel latent), from their capabilities.
static std::string mla_strategies(bool latent = false) {
  std::string names;
  for (const auto& i : strategy_registry())
    if (latent ? i.can.mla_latent : i.can.mla) names += (names.empty() ? "" : ", ") + i.name;
  return names;
}

std::vector<Job> plan_jobs(const RunConfig& cfg, int P, int host_ranks_per_node) {
  std::vector<Job> jobs;
  for (int64_t seq : cfg.seqs) {
    const LayerShape shape = cfg.shape(seq);
    for (const auto& entry : cfg.strategies) {
      const StrategyInfo* info = find_strategy(strategy_entry_name(entry));
      auto strat = info->make();
      const Capabilities& can = info->can;
      // --mesh all: the meshes the strategy declares (usp: every U x R; double-ring: every w).
      MeshSpec base{cfg.ulysses, cfg.ring, cfg.tp > 0 ? cfg.tp : 1, cfg.placement, cfg.ring_layout};
      base.inner_ring = cfg.inner_ring;
      base.usp_ring = cfg.usp_ring == "double" ? UspRing::double_ : UspRing::single;
      base.ranks_per_node = cfg.ranks_per_node > 0 ? cfg.ranks_per_node : host_ranks_per_node;
      if (!can.mesh) base.tp = 1;  // --tp is usp's level (config.cpp): the others run without it
      std::vector<MeshSpec> requests{base};
      bool enumerate = false;
      if (entry != strategy_entry_name(entry)) {  // a named mesh: the declared one with that label
        requests = {named_mesh(*strat, entry, base, shape, P)};
      } else {
        const std::vector<MeshSpec> candidates = strat->mesh_candidates(base, P);
        enumerate = cfg.mesh_all && (can.mesh || candidates.size() > 1);
        if (enumerate) requests = candidates;
      }
      // Named explicitly: the strategy itself, or the mesh (--ulysses/--ring) of a mesh strategy.
      const bool named = !enumerate && (cfg.strategies_explicit || (can.mesh && (cfg.ulysses || cfg.ring || cfg.tp)));
      for (const MeshSpec& req : requests) {
        Job job{info, seq, req, strat->name(), ""};
        try {
          job.mesh = strat->resolve_mesh(req, shape, P);
          // The MLP's own mesh (--mlp-tp): every strategy that shards the block (single, the
          // replicated reference, runs unchanged).
          job.mesh.mlp_tp = resolve_mlp_tp(cfg.mlp_tp, job.mesh, !strat->describe().replicated);
          job.label = strat->label(job.mesh);
          if (shape.decode() && !can.decode)
            throw ConstraintError(strat->name() + ": --pass decode is built for the ring family, usp, ulysses and megatron-sp only "
                                  "(ring, ring-zigzag, ring-striped, double-ring, usp, ulysses, megatron-sp)");
          if (!shape.decode() && shape.pass.cached > 0 && !can.cached)
            throw ConstraintError(strat->name() + ": --cached " + std::to_string(shape.pass.cached) +
                                  " is built for the ring family only (ring, ring-zigzag, ring-striped, double-ring, usp, ulysses)");
          if (shape.mla && !can.mla)
            throw ConstraintError(strat->name() + ": --attention mla is built for " + mla_strategies() + " only");
          if (shape.mla_latent && !can.mla_latent)
            throw ConstraintError(strat->name() + ": --mla-travel latent is built for " + mla_strategies(true) +
                                  " only (its levels move expanded heads: use --mla-travel expanded)");
          if (shape.kv_transit != KvTransit::run && !can.kv_transit)
            throw ConstraintError(strat->name() + ": --comm-dtype " + (shape.kv_transit == KvTransit::fp8 ? "fp8" : "bf16") +
                                  " is built for ring, ring-zigzag, ring-striped, double-ring, usp and allgather-kv only (a K,V ring or gather)");
          strat->check(shape, P, job.mesh);  // for the shape's pass (--cached, decode)
          check_mlp_mesh(strat->name(), shape, P, job.mesh);
          if (shape.queries_travel() && !can.pass_q)
            throw ConstraintError(strat->name() + ": --ring-pass " + ring_travel(shape.pass.travel).flag +
                                  " is built for the ring family only (ring, ring-zigzag, ring-striped, double-ring, usp)");
          if (shape.balance != BalanceScheme::none && !can.supports(shape.balance)) {
            const std::string b = balance_name(shape.balance);
            const bool dynamic = shape.balance == BalanceScheme::dynamic;
            throw ConstraintError(strat->name() + ": --balance " + b +
                                  (strat->name() == "ring-zigzag" || strat->name() == "ring-striped"
                                       ? " replaces its layout: the same layout as ring under --balance " + b
                                   : dynamic ? " is built for ring only (one ring per CP group of documents; the "
                                               "other strategies' groups are fixed by their mesh)"
                                             : " is built for ring, double-ring and usp only (its layout replaces the static one)"));
          }
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
