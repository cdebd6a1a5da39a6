// single — the reference. Every rank computes the whole layer on the whole sequence; nothing
// is communicated. Its results are what every other strategy is verified against, and its step
// time is the baseline for strong scaling.
#include "bench/block/block.h"
#include "bench/parts/layout.h"

namespace cpbench {

namespace {

class Single final : public Block {
 public:
  StrategyDesc describe() const override {
    StrategyDesc d{"single",
                   "Reference: every rank computes the whole layer on the whole sequence.\n"
                   "Nothing travels; the strong-scaling baseline.",
                   "none", "nothing crosses any link", {}};
    // Nothing circulates: under --ring-pass q it stays the reference every ring result is compared with.
    d.can.pass_q = true;
    d.can.balance = d.can.balance_dynamic = true;  // the reference: one rank holds every token
    d.can.cached = true;                           // the whole cache and every new token
    d.can.decode = true;                           // the whole cache: nothing to merge
    d.can.mla = true;                              // every projection whole on the rank
    d.replicated = true;
    return d;
  }
  // Any shape, any pass (under --cached and decode too: it holds the whole cache).
  void check(const LayerShape&, int, const MeshSpec&) const override {}
  CommPrediction attention_bytes(const LayerShape&, int, const MeshSpec&, int64_t, int64_t, int) const override {
    return {};
  }

 protected:
  bool replicated() const override { return true; }
  DecodeGroups decode_groups() override { return {}; }  // the whole cache, every head: nothing to merge
  // Every token, or under --cached the new ones after the cache (which it holds whole).
  Positions token_positions(const LayerShape& s, const Mesh&) const override {
    return Positions::contiguous(s.pass.cached, s.new_tokens());
  }
  Positions cache_positions(const LayerShape& s, const Mesh&) const override {
    return Positions::contiguous(0, s.pass.cached);
  }
  AttnShape attn_shape() const {
    const LayerShape& s = shape();
    AttnShape a;
    a.B = s.B; a.nq = T_; a.nk = key_pos_.count(); a.hq = s.H; a.hk = s.G; a.d = s.d; a.d_v = s.d_v; a.causal = s.mask.causal;
    a.window = s.mask.window; a.docs = s.mask.docs;
    return a;
  }
  void core_setup() override {
    const LayerShape& s = shape();
    lse_ = alloc_f32({s.B, s.H, T_});
    delta_ = alloc_f32({s.B, s.H, T_});
  }
  void core_forward() override {
    be().attn_fwd(attn_shape(), q_, kc_, vc_, pos_, key_pos_, o_, lse_);
    sinks_.forward(be(), attn_shape(), o_, lse_);
  }
  void core_backward() override {
    Backend& b = be();
    sinks_.backward(b, attn_shape(), o_, do_, lse_);
    b.attn_bwd_delta(attn_shape(), o_, do_, delta_);
    b.fill(dq_, 0.0f);
    b.fill(dk_, 0.0f);
    b.fill(dv_, 0.0f);
    b.attn_bwd(attn_shape(), q_, k_, v_, do_, lse_, delta_, pos_, pos_, dq_, dk_, dv_);
  }
  void export_lse(std::vector<float>& global) override {
    const LayerShape& s = shape();
    add_lse_rows(global, be().download(lse_), s.B, s.H, s.N, 0, s.H, pos_);
  }
  int64_t core_activation_bytes(const LayerShape& s, int, const MeshSpec&) const override {
    return 2 * s.B * s.H * s.new_tokens() * 4;  // lse, delta (of the new tokens under --cached)
  }
  int64_t activation_bytes_estimate(const LayerShape& s, int, const MeshSpec& m) const override {
    return Block::activation_bytes_estimate(s, 1, m);  // the whole sequence on each rank
  }

  Tensor lse_, delta_;
};

}  // namespace

std::unique_ptr<Strategy> make_strategy_single() { return std::make_unique<Single>(); }

}  // namespace cpbench
