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
#include <sstream>

#include "bench/strategies/double_ring_core.h"
#include "bench/strategies/layout.h"

namespace cpbench {

namespace {

class DoubleRing final : public Block {
 public:
  std::string name() const override { return "double-ring"; }
  std::string summary() const override {
    return "LoongTrain double ring: K,V circulate in windows of w ranks (inner ring) while\n"
           "blocks hop between windows (outer ring), overlapped; zigzag layout.";
  }
  std::string tiers() const override { return "inner rings inside a node; each rank sends only its R/w-1 outer blocks across nodes, not all R-1"; }
  std::string constraints() const override { return "2P divides seq (P under --balance); inner ring w divides P"; }
  // --balance: ring position o*w + i (= the rank) takes the balanced layout's position.
  bool supports_balance(BalanceScheme b) const override { return b != BalanceScheme::dynamic; }
  bool supports_decode() const override { return true; }
  bool supports_cached() const override { return true; }
  // --ring-pass q: the Q blocks on the two-level schedule (DoubleRingCore::forward_pass_q).
  bool supports_pass_q() const override { return true; }
  std::string label(const MeshSpec& m) const override {
    return name() + "[w" + std::to_string(m.inner_ring) + "]";
  }
  // --mesh all: every window size w dividing P (w = P and w = 1 are single rings over the inner
  // or the outer level).
  std::vector<MeshSpec> mesh_candidates(const MeshSpec& base, int P) const override {
    std::vector<MeshSpec> all;
    for (int w = 1; w <= P; ++w) {
      if (P % w) continue;
      MeshSpec m = base;
      m.inner_ring = w;
      all.push_back(m);
    }
    return all;
  }
  MeshSpec resolve_mesh(const MeshSpec& req, const LayerShape&, int P) const override {
    MeshSpec m = req;
    m.U = 1;
    m.R = P;
    m.usp_ring = UspRing::double_;
    m.inner_ring = resolve_inner_ring(m, name());
    return m;
  }
  void check(const LayerShape& s, int P, const MeshSpec&) const override {
    if (s.balance != BalanceScheme::none && s.N % P != 0) {
      std::ostringstream e;
      e << name() << ": seq=" << s.N << " is not divisible by P=" << P << " (--balance " << balance_name(s.balance)
        << ": every rank holds seq/P tokens)";
      throw ConstraintError(e.str());
    }
    if (s.balance == BalanceScheme::none && s.N % (2 * int64_t(P)) != 0) {
      std::ostringstream e;
      e << name() << ": seq=" << s.N << " is not divisible by 2*P=" << 2 * P;
      throw ConstraintError(e.str());
    }
  }
  CommPrediction predicted_bytes(const LayerShape& s, int P, const MeshSpec& m, int64_t elem,
                                 int64_t acc) const override {
    if (s.decode()) return decode_prediction(s, {{"cp", P}}, 1, elem, acc);  // the cache over all P ranks, as the ring's
    const int w = m.inner_ring > 0 ? m.inner_ring : P;
    // pass-Q: a rank's Q block is its new tokens (B*(N-C)/P), H heads.
    if (s.ring_pass_q)
      return DoubleRingCore::predicted_bytes_pass_q(s.B * s.new_tokens() / P, int64_t(s.H) * s.d, s.H, w, P / w, elem,
                                                    acc, model_hops(s, P, w));
    // Under --cached a K,V block is a rank's cache shard and its new tokens: N/P tokens, as without.
    return DoubleRingCore::predicted_bytes(s.B * s.N / P, int64_t(s.G) * s.d, w, P / w, elem, acc,
                                           model_hops(s, P, w));
  }

 protected:
  // Zigzag chunks of ring position j (= the rank: windows are consecutive ranks).
  Positions rank_positions(const LayerShape& s, int P, int j) const {
    const int64_t c = s.N / (2 * int64_t(P));
    return Positions::two(j * c, c, (2 * int64_t(P) - 1 - j) * c, c);
  }
  // DESIGN's hop truncation on the two-level schedule: a pure function of the layout and the
  // mask (every rank computes the same; the strategy runs it).
  DoubleRingHops ring_hops(const LayerShape& s, int P, int w) const {
    return DoubleRingCore::effective_hops(w, P / w, [&](int j) { return layout(s, P, j); },
                                          [&](int j) { return keys(s, P, j); }, s, s.ring_pass_q);
  }
  // The schedule predicted_bytes uses: ring_hops, but under --balance the layout's own model
  // (TokenLayout::sees, interval arithmetic on its runs), which shares nothing with the mask scan
  // the strategy runs, so that bytes = model compares the two.
  DoubleRingHops model_hops(const LayerShape& s, int P, int w) const {
    if (s.balance == BalanceScheme::none) return ring_hops(s, P, w);
    const TokenLayout l = TokenLayout::build(s.balance, s, P);
    const bool q_travel = s.ring_pass_q;  // pass-Q: the visiting queries of `held` meet `me`'s keys
    return DoubleRingHops::from_needs(w, P / w, [&](int me, int held) { return q_travel ? l.sees(held, me) : l.sees(me, held); });
  }
  // The tokens of ring position j: its zigzag chunks, the balanced layout's position j under
  // --balance, or under --cached C those of the N - C new tokens, placed after the cache
  // (positions C..N-1).
  Positions layout(const LayerShape& s, int P, int j) const {
    if (s.balance != BalanceScheme::none) return balanced_positions(s, P)[size_t(j)];
    if (s.cached == 0) return rank_positions(s, P, j);
    return after_cache(rank_positions(s.without_cache(), P, j), s.cached);
  }
  // Its keys: its tokens, or under --cached its cache shard (the contiguous split) then its new tokens.
  Positions keys(const LayerShape& s, int P, int j) const {
    if (s.cached == 0) return layout(s, P, j);
    return cache_then(Positions::segments({cache_shard(s, P, j)}), layout(s, P, j));
  }
  Positions token_positions(const LayerShape& s, const Mesh& m) const override {
    return layout(s, m.P, m.cp->rank());
  }
  void core_setup() override {
    const LayerShape& s = shape();
    RingCoreShape cs;
    cs.B = s.B; cs.n = T_; cs.hq = s.H; cs.hk = s.G; cs.d = s.d; cs.causal = s.causal; cs.dtype = s.dtype;
    cs.window = s.window; cs.docs = s.docs;
    cs.nk = key_pos_.count();
    cs.pass_q = s.ring_pass_q;
    const int P = mesh().P;
    Communicator& inner = mesh().group("ring_inner");
    std::vector<Positions> qtab, ktab;  // every position's tokens and keys, once
    for (int j = 0; j < P; ++j) qtab.push_back(layout(s, P, j)), ktab.push_back(keys(s, P, j));
    core_.setup(be(), inner, mesh().group("ring_outer"), cs, [qtab](int j) { return qtab[size_t(j)]; },
                [ktab](int j) { return ktab[size_t(j)]; });
    hops_ = ring_hops(s, P, inner.size());
  }
  // kc_, vc_ are k_, v_ themselves without a cache (block.h).
  void core_forward() override {
    if (shape().ring_pass_q) core_.forward_pass_q(q_, kc_, vc_, o_, hops_);
    else core_.forward(q_, kc_, vc_, o_, hops_);
  }
  void core_backward() override { core_.backward(q_, k_, v_, o_, do_, dq_, dk_, dv_, hops_); }
  void export_lse(std::vector<float>& global) override {
    const LayerShape& s = shape();
    add_lse_rows(global, be().download(core_.lse()), s.B, s.H, s.N, 0, s.H, pos_);
  }
  int64_t core_activation_bytes(const LayerShape& s, int P, const MeshSpec& m) const override {
    RingCoreShape cs;
    cs.B = s.B; cs.n = s.new_tokens() / P; cs.hq = s.H; cs.hk = s.G; cs.d = s.d; cs.dtype = s.dtype;
    cs.nk = s.N / P;  // = n without a cache; under --cached the cache shard too
    const int w = m.inner_ring > 0 ? m.inner_ring : P;
    return DoubleRingCore::activation_bytes(cs, w, P / w);
  }

  DoubleRingCore core_;
  DoubleRingHops hops_;
};

}  // namespace

std::unique_ptr<Strategy> make_strategy_double_ring() { return std::make_unique<DoubleRing>(); }

}  // namespace cpbench
