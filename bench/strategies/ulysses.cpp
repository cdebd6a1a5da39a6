// ulysses — DeepSpeed Ulysses (Jacobs et al. 2023): the Ulysses all-to-all of
// ulysses_ring_layer.h with its mesh fixed at {ulysses: P, ring: 1}. Rank r holds tokens
// [r*N/P, (r+1)*N/P). Forward: one all-to-all turns q, k, v from "my tokens, all heads" into
// "all tokens, my H/P query heads and max(G,P)/P kv heads" (kv heads replicated P/G times when
// P > G); attention runs on the whole sequence for those heads; a second all-to-all brings o
// back. Backward mirrors it.
// Bytes per rank (fwd = bwd): s*T*(2hq + 2*d*max(G,P))*(P-1)/P.
#include <sstream>

#include "bench/strategies/ulysses_ring_layer.h"

namespace cpbench {

namespace {

class Ulysses final : public UlyssesRingLayer {
 public:
  StrategyDesc describe() const override {
    return {"ulysses",
            "DeepSpeed Ulysses: all-to-all q,k,v from token shards to head shards,\n"
            "attention on the full sequence for H/P heads, all-to-all o back.",
            "P divides heads; P divides kv_heads or is a multiple (kv heads replicated) -- or, with --uneven-heads, "
            "P <= heads; P divides seq",
            "all-to-all over all P ranks: (P-K)/(P-1) of its bytes cross nodes when P > K ranks per node",
            layer_capabilities()};
  }

  // Always the whole CP group as one Ulysses group, tokens contiguous.
  MeshSpec resolve_mesh(const MeshSpec& req, const LayerShape&, int P) const override {
    MeshSpec m;
    m.U = P;
    m.R = 1;
    m.placement = req.placement;
    m.ring_layout = RingLayout::contiguous;
    return m;
  }

  void check(const LayerShape& s, int P, const MeshSpec& m) const override {
    if (s.decode()) return check_decode(s, P, m);
    if (s.pass.cached > 0) return check_new_tokens(s, P, m);  // the layout places the new tokens only
    const int u = max_ulysses_degree(P, s);
    const std::string heads = s.uneven_heads ? heads_error(s, 1, P) : head_sharding_error(P, s, "P");
    std::ostringstream e;
    if (!heads.empty())
      e << "ulysses: " << heads << "; "
        << (u == 1 || s.uneven_heads ? "use a ring strategy" : "use usp with ulysses<=" + std::to_string(u)
                                                                    + " (or --uneven-heads)");
    else if (s.N % P != 0)
      e << "ulysses: P=" << P << " does not divide seq=" << s.N;
    else if (!latent_refusal(s, m).empty())
      e << latent_refusal(s, m);
    if (!e.str().empty()) throw ConstraintError(e.str());
  }
};

}  // namespace

std::unique_ptr<Strategy> make_strategy_ulysses() { return std::make_unique<Ulysses>(); }

}  // namespace cpbench
