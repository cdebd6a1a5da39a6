// usp — Unified Sequence Parallelism (Fang & Zhao 2024, yunchang; LoongTrain's 2D attention):
// the P ranks form a U x R mesh; Ulysses all-to-all inside each group of U ranks, ring attention
// (zigzag when causal) across the R groups; the ring level a single ring or (usp_ring = double)
// LoongTrain's double ring. The algorithm, layouts and byte model are ulysses_ring_layer.h's;
// this file chooses the mesh.
#include <sstream>

#include "bench/strategies/ulysses_ring_layer.h"

namespace cpbench {

namespace {

std::string ulysses_hint(int P, const LayerShape& s) {
  const int u = max_ulysses_degree(P, s);
  return u == 1 ? "use ulysses=1 (a pure ring)" : "use ulysses<=" + std::to_string(u);
}

class Usp final : public UlyssesRingLayer {
 public:
  std::string name() const override { return "usp"; }
  std::string summary() const override {
    return "Unified sequence parallelism: Ulysses all-to-all inside U groups, ring attention\n"
           "(zigzag when causal) across R groups; U x R = P (--ulysses, --ring, --mesh all).";
  }
  std::string tiers() const override { return "all-to-all inside Ulysses groups (keep them in a node: --placement ulysses-inner), ring hops across the R groups"; }
  std::string constraints() const override {
    return "U divides heads; U divides kv_heads or is a multiple (kv heads replicated); U*R = P; "
           "2P divides seq (zigzag) or P divides seq";
  }
  bool uses_mesh() const override { return true; }
  std::string label(const MeshSpec& m) const override {
    return "usp[u" + std::to_string(m.U) + "xr" + std::to_string(m.R) +
           (m.inner_ring > 0 ? "w" + std::to_string(m.inner_ring) : std::string()) + "]";
  }
  // --mesh all: every U x R = P; with a double ring, every inner ring w dividing R as well.
  std::vector<MeshSpec> mesh_candidates(const MeshSpec& base, int P) const override {
    std::vector<MeshSpec> all;
    for (int u = 1; u <= P; ++u) {
      if (P % u) continue;
      MeshSpec m = base;
      m.U = u;
      m.R = P / u;
      if (base.usp_ring == UspRing::double_) {
        for (int w = 1; w <= m.R; ++w)
          if (m.R % w == 0) {
            m.inner_ring = w;
            all.push_back(m);
          }
      } else {
        all.push_back(m);
      }
    }
    return all;
  }

  // Both degrees given: they must multiply to P. One given: the other is P divided by it.
  // Neither: U is the largest degree dividing P, H and G (the all-to-all as wide as the heads
  // allow without replicating KV heads, the rest ring).
  MeshSpec resolve_mesh(const MeshSpec& req, const LayerShape& s, int P) const override {
    MeshSpec m = req;
    std::ostringstream e;
    if (req.U < 0 || req.R < 0) {
      e << "usp: ulysses=" << req.U << " and ring=" << req.R << " must be positive";
    } else if (req.U > 0 && req.R > 0) {
      if (int64_t(req.U) * req.R != P)
        e << "usp: ulysses=" << req.U << " x ring=" << req.R << " = " << int64_t(req.U) * req.R
          << " ranks, but P=" << P;
    } else if (req.U > 0) {
      if (P % req.U != 0) e << "usp: ulysses=" << req.U << " does not divide P=" << P;
      else m.R = P / req.U;
    } else if (req.R > 0) {
      if (P % req.R != 0) e << "usp: ring=" << req.R << " does not divide P=" << P;
      else m.U = P / req.R;
    } else {
      m.U = max_ulysses_degree(P, s);
      m.R = P / m.U;
    }
    if (!e.str().empty()) throw ConstraintError(e.str());
    // The ring level: a single ring, or a double ring of inner rings of w ranks.
    m.inner_ring = m.usp_ring == UspRing::double_ ? resolve_inner_ring(m, "usp") : 0;
    return m;
  }

  void check(const LayerShape& s, int P, const MeshSpec& m) const override {
    check_mesh_and_shape(s, P, m, ulysses_hint(P, s));
  }
};

}  // namespace

std::unique_ptr<Strategy> make_strategy_usp() { return std::make_unique<Usp>(); }

}  // namespace cpbench
