// usp — Unified Sequence Parallelism (Fang & Zhao 2024, yunchang; LoongTrain's 2D attention):
// the P ranks form a U x R mesh; Ulysses all-to-all inside each group of U ranks, ring attention
// (zigzag when causal) across the R groups; the ring level a single ring or (usp_ring = double)
// LoongTrain's double ring; with --tp t a tensor-parallel level of t ranks innermost (t x U x R
// = P; Megatron TP with sequence parallelism inside each CP position). The algorithm, layouts
// and byte model are ulysses_ring_layer.h's; this file chooses the mesh.
#include <sstream>

#include "bench/strategies/ulysses_ring_layer.h"

namespace cpbench {

namespace {

// The largest Ulysses degree u dividing P/t with t*u sharding the heads (head_sharding_error).
int max_ulysses_degree_tp(int P, int t, const LayerShape& s) {
  if (t <= 1) return max_ulysses_degree(P, s);
  for (int u = P / t; u > 1; --u)
    if ((P / t) % u == 0 && head_sharding_error(t * u, s, "u").empty()) return u;
  return 1;
}

std::string ulysses_hint(int P, int t, const LayerShape& s) {
  const int u = max_ulysses_degree_tp(P, t, s);
  return u == 1 ? "use ulysses=1 (a pure ring)" : "use ulysses<=" + std::to_string(u);
}

class Usp final : public UlyssesRingLayer {
 public:
  StrategyDesc describe() const override {
    StrategyDesc d{"usp",
                   "Unified sequence parallelism: optional tensor-parallel level innermost (--tp t), Ulysses\n"
                   "all-to-all inside U groups, ring (zigzag when causal) across R; t x U x R = P (--mesh all).",
                   "t and t*U divide heads; t, t*U divide kv_heads or are multiples (kv heads replicated) -- with "
                   "--uneven-heads only t, and U <= heads/t; t*U*R = P; "
                   "t divides ffn_dim (--block full); 2P divides seq (zigzag) or P divides seq (contiguous, --balance)",
                   "tp all-gather/reduce-scatter on contiguous ranks (innermost), all-to-all inside Ulysses groups (keep "
                   "them in a node: --placement ulysses-inner), ring hops across the R groups",
                   layer_capabilities()};
    d.can.mesh = true;
    // --ring-pass q on its ring level (single or double): the Q blocks of a ring index, H/U heads, circulate.
    d.can.pass_q = true;
    // --balance doc-zigzag|greedy on its ring level (single or double): ring index rho takes the
    // balanced layout's position rho of R, Ulysses member u the u-th 1/U of it
    // (ulysses_ring_layer.h; Strategy::balance_positions).
    d.can.balance = true;
    // --comm-dtype on its ring level, single or double: the K,V blocks of a ring index, gl heads,
    // encoded by their owner (RingCore, DoubleRingCore; not a double ring's pass-Q: precision_refusal).
    d.can.kv_transit = true;
    return d;
  }
  std::string mesh_label(const MeshSpec& m) const override {
    return "usp[" + (m.tp > 1 ? "t" + std::to_string(m.tp) + "x" : std::string()) + "u" + std::to_string(m.U) +
           "xr" + std::to_string(m.R) +
           (m.inner_ring > 0 ? "w" + std::to_string(m.inner_ring) : std::string()) + "]";
  }
  // --mesh all: every t x U x R = P (t = P included); with a double ring, every inner ring w
  // dividing R as well.
  std::vector<MeshSpec> mesh_candidates(const MeshSpec& base, int P) const override {
    std::vector<MeshSpec> all;
    for (int t = 1; t <= P; ++t) {
      if (P % t) continue;
      for (int u = 1; u <= P / t; ++u) {
        if ((P / t) % u) continue;
        MeshSpec m = base;
        m.tp = t;
        m.U = u;
        m.R = P / t / u;
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
    }
    return all;
  }

  // t = --tp (default 1, never inferred) must divide P; U and R then share Pc = P/t. Both
  // degrees given: they must multiply to Pc. One given: the other is Pc divided by it. Neither:
  // U is the largest degree dividing Pc whose t*U shards the heads (the all-to-all as wide as
  // the heads allow, the rest ring).
  MeshSpec resolve_mesh(const MeshSpec& req, const LayerShape& s, int Pw) const override {
    MeshSpec m = req;
    std::ostringstream e;
    if (req.tp < 1 || Pw % req.tp != 0) {
      e << "usp: tp=" << req.tp << " does not divide P=" << Pw;
      throw ConstraintError(e.str());
    }
    const int P = Pw / req.tp;  // the ranks U x R share
    const std::string of_P = req.tp > 1 ? " (P=" + std::to_string(Pw) + ", tp=" + std::to_string(req.tp) + ")" : "";
    if (req.U < 0 || req.R < 0) {
      e << "usp: ulysses=" << req.U << " and ring=" << req.R << " must be positive";
    } else if (req.U > 0 && req.R > 0) {
      if (int64_t(req.U) * req.R != P)
        e << "usp: ulysses=" << req.U << " x ring=" << req.R << " = " << int64_t(req.U) * req.R
          << " ranks, but " << (req.tp > 1 ? "P/tp=" : "P=") << P << of_P;
    } else if (req.U > 0) {
      if (P % req.U != 0) e << "usp: ulysses=" << req.U << " does not divide " << (req.tp > 1 ? "P/tp=" : "P=") << P << of_P;
      else m.R = P / req.U;
    } else if (req.R > 0) {
      if (P % req.R != 0) e << "usp: ring=" << req.R << " does not divide " << (req.tp > 1 ? "P/tp=" : "P=") << P << of_P;
      else m.U = P / req.R;
    } else {
      m.U = max_ulysses_degree_tp(Pw, req.tp, s);
      m.R = P / m.U;
    }
    if (!e.str().empty()) throw ConstraintError(e.str());
    // The ring level: a single ring, or a double ring of inner rings of w ranks.
    m.inner_ring = m.usp_ring == UspRing::double_ ? resolve_inner_ring(m, "usp") : 0;
    return m;
  }

  void check(const LayerShape& s, int P, const MeshSpec& m) const override {
    if (s.decode()) return check_decode(s, P, m);
    if (s.pass.cached > 0) return check_new_tokens(s, P, m);  // the layout places the new tokens only
    check_mesh_and_shape(s, P, m, ulysses_hint(P, m.tp, s));
  }
};

}  // namespace

std::unique_ptr<Strategy> make_strategy_usp() { return std::make_unique<Usp>(); }

}  // namespace cpbench
