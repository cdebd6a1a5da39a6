#include "bench/block/block.h"
#include "bench/block/mla.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "bench/inputs.h"
#include "bench/parts/layout.h"
#include "bench/parts/ring_core.h"
#include "bench/parts/sublayer_mesh.h"
#include "bench/parts/ulysses_level.h"
#include "comm/communicator.h"

namespace cpbench {

// ---- export rules and the registry ------------------------------------------------------------

ExportRule ExportRule::tokens(const Positions& pos, int64_t global_cols, int64_t col0, int64_t width,
                              bool this_rank) {
  ExportRule r;
  r.how = How::token_rows;
  r.this_rank = this_rank;
  r.pos = pos;
  r.global_cols = global_cols;
  r.col0 = col0;
  r.width = width;
  return r;
}

ExportRule ExportRule::slice(int64_t offset, bool this_rank) {
  ExportRule r;
  r.how = How::slice;
  r.this_rank = this_rank;
  r.offset = offset;
  return r;
}

namespace {
MemKind memory_kind(Held h) {
  switch (h) {
    case Held::weight:
    case Held::grad: return MemKind::weights;
    case Held::activation: return MemKind::activations;
    case Held::comm: return MemKind::comm;
  }
  throw std::logic_error("memory_kind: unknown Held");
}
}  // namespace

TensorRegistry::Entry* TensorRegistry::find(const std::string& name) {
  for (Entry& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

Tensor& TensorRegistry::add(const std::string& name, std::vector<int64_t> shape, DType dt, Held held,
                            const std::string& dump, ExportRule rule) {
  return add_view(name, be_->alloc(std::move(shape), dt, memory_kind(held)), held, dump, std::move(rule));
}

Tensor& TensorRegistry::add_view(const std::string& name, Tensor t, Held held, const std::string& dump,
                                 ExportRule rule) {
  if (find(name)) throw std::logic_error("TensorRegistry: tensor '" + name + "' registered twice");
  if (!dump.empty() && by_dump(dump))
    throw std::logic_error("TensorRegistry: dump name '" + dump + "' registered twice");
  if (!dump.empty() && rule.how == ExportRule::How::none)
    throw std::logic_error("TensorRegistry: dump tensor '" + dump + "' has no export rule");
  entries_.push_back(Entry{name, held, dump, std::move(rule), std::move(t)});
  return entries_.back().t;
}

Tensor& TensorRegistry::operator[](const std::string& name) {
  Entry* e = find(name);
  if (!e) throw std::logic_error("TensorRegistry: no tensor '" + name + "'");
  return e->t;
}

bool TensorRegistry::has(const std::string& name) const {
  for (const Entry& e : entries_)
    if (e.name == name) return true;
  return false;
}

int64_t TensorRegistry::elements(Held held) const {
  int64_t n = 0;
  for (const Entry& e : entries_)
    if (e.held == held) n += e.t.numel();
  return n;
}

const TensorRegistry::Entry* TensorRegistry::by_dump(const std::string& dump) const {
  for (const Entry& e : entries_)
    if (e.dump == dump) return &e;
  return nullptr;
}

bool TensorRegistry::export_share(const std::string& dump, std::vector<float>& global, const LayerShape& s) {
  const Entry* e = by_dump(dump);
  if (!e) return false;
  const ExportRule& r = e->rule;
  if (!r.this_rank) return true;  // replicated data another rank exports
  const std::vector<float> h = be_->download(e->t);
  switch (r.how) {
    case ExportRule::How::token_rows:
      add_token_rows(global, h, s.B, s.token_rows(), r.global_cols, r.pos, r.col0, r.width);
      return true;
    case ExportRule::How::slice:
      if (r.offset + int64_t(h.size()) > int64_t(global.size()))
        throw std::logic_error("export '" + dump + "': slice beyond the global tensor");
      for (size_t i = 0; i < h.size(); ++i) global[static_cast<size_t>(r.offset) + i] += h[i];
      return true;
    case ExportRule::How::columns:
      if (r.rows * r.local_cols != int64_t(h.size()) || r.rows * r.global_cols != int64_t(global.size()))
        throw std::logic_error("export '" + dump + "': column blocks do not match the tensors");
      for (const ExportRule::ColBlock& c : r.blocks) {
        if (!c.this_rank) continue;
        for (int64_t i = 0; i < r.rows; ++i)
          for (int64_t j = 0; j < c.width; ++j)
            global[static_cast<size_t>(i * r.global_cols + c.global0 + j)] +=
                h[static_cast<size_t>(i * r.local_cols + c.local0 + j)];
      }
      return true;
    case ExportRule::How::none: break;
  }
  throw std::logic_error("export '" + dump + "': no export rule");
}

// ---- sub-layers ---------------------------------------------------------------------------------

// One sub-layer: reads its input tensor `in`, writes its output `out` (both [B, T, D] token
// rows, registered by the block); backward reads d<out> and writes d<in>.
class Block::SubLayer {
 public:
  SubLayer(Block& b, std::string in, std::string out) : b_(b), in_(std::move(in)), out_(std::move(out)) {}
  virtual ~SubLayer() = default;
  virtual void setup() = 0;
  virtual void forward() = 0;
  virtual void backward() = 0;

 protected:
  Block& b_;
  std::string in_, out_;
};

// The attention sub-layer. Column-parallel w_qkv (this rank's heads' columns), row-parallel w_o
// (their rows); with no TP group both are whole.
class Block::AttentionSubLayer final : public Block::SubLayer {
 public:
  using SubLayer::SubLayer;

  void setup() override {
    Block& k = b_;
    const LayerShape& s = k.shape();
    TensorRegistry& reg = k.reg_;
    const int t = k.tp_.size(), tr = k.tp_.rank();
    const bool root = k.env_.world->rank() == 0;
    const int64_t T = k.T_, BT = s.B * T, n = k.tp_.span() * T, BW = s.B * n;
    const int64_t Hd = int64_t(s.H) * s.d, Gd = int64_t(s.G) * s.d, Cq = s.qkv_cols();
    const int64_t Hl = int64_t(k.hl_) * s.d, Gl = int64_t(k.gl_) * s.d, Cl = Hl + 2 * Gl;
    // The values' and outputs' widths (MLA: d_v per head; every GQA model: d).
    const int64_t vd = s.vdim(), Hv = int64_t(s.H) * vd, Hvl = int64_t(k.hl_) * vd;
    // KV replication (t > G): kv_copies ranks hold one KV head; the first of them exports the
    // replicated data (k, v, the w_qkv columns), every one its partial gradients.
    const int copies = replicated_kv_heads(t, s) / s.G;
    const int64_t kv0 = first_kv_head(s, t, tr);  // first global KV head of this rank
    const bool kv_exporter = tr % copies == 0;
    // Weight shards are replicated over the TP groups (every rank when t = 1): the first group
    // (world ranks 0 .. t-1, TP innermost) exports them.
    const bool weights_exporter = k.env_.world->rank() < t;
    const Positions wide = s.decode() ? k.pos_ : k.wide_positions();  // decode: the step's one token
    auto law = [&](InputId id) { return input_law(id, s.D, Hv); };
    Backend& be = k.be();

    Tensor& norm_w = reg.add("norm_w", {s.D}, s.dtype, Held::weight, "norm_w", ExportRule::slice(0, root));
    upload_seeded(be, [&] { return input_matrix_block(k.env_.seed, InputId::norm_w, s.D, 0, 1, 0, s.D, law(InputId::norm_w)); },
                  norm_w);
    if (s.mla) {  // instead of w_qkv (mla.h); latent travel where the strategy's levels move the latent
      LayerShape ms = s;  // (single, the reference, runs the same shape with nothing traveling)
      // Decode forms the new token's latent for the cache and no k, v (the absorbed form: below)
      ms.mla_latent = (s.mla_latent && k.describe().can.mla_latent) || s.latent_cache();
      // (a Ulysses member expands and contracts its group's rows: U x B x n)
      mla_.setup(reg, be, k.env_.seed, ms, s.B, n, {t, tr, weights_exporter}, s.B * n * k.mesh().size_of("ulysses"));
      if (ms.mla_latent && !s.decode()) k.latent_keys_ = &mla_;  // what the levels move (latent_keys.h)
    }
    // w_qkv's columns of this rank's heads: q heads, then k heads, then v heads.
    const ExportRule::ColBlock qcols{int64_t(tr) * Hl, 0, Hl, weights_exporter};
    const ExportRule::ColBlock kcols{Hd + kv0 * s.d, Hl, Gl, weights_exporter && kv_exporter};
    const ExportRule::ColBlock vcols{Hd + Gd + kv0 * s.d, Hl + Gl, Gl, weights_exporter && kv_exporter};
    ExportRule wcols;
    wcols.how = ExportRule::How::columns;
    wcols.rows = s.D;
    wcols.local_cols = Cl;
    wcols.global_cols = Cq;
    wcols.blocks = {qcols, kcols, vcols};
    if (!s.mla) {
      Tensor& w_qkv = reg.add("w_qkv", {s.D, Cl}, s.dtype, Held::weight, "w_qkv", wcols);
      upload_seeded(be, [&] {  // this rank's column blocks of the global w_qkv (t = 1: all of it)
        if (t == 1) return input_matrix_block(k.env_.seed, InputId::w_qkv, Cq, 0, s.D, 0, Cq, law(InputId::w_qkv));
        std::vector<float> wq(static_cast<size_t>(s.D * Cl));
        for (const ExportRule::ColBlock& c : wcols.blocks) {
          const std::vector<float> blk = input_matrix_block(k.env_.seed, InputId::w_qkv, Cq, 0, s.D, c.global0,
                                                            c.width, law(InputId::w_qkv));
          for (int64_t i = 0; i < s.D; ++i)
            std::copy_n(&blk[static_cast<size_t>(i * c.width)], c.width, &wq[static_cast<size_t>(i * Cl + c.local0)]);
        }
        return wq;
      }, w_qkv);
    }
    // w_o's rows of this rank's heads (Helix: of the H/P heads it owns; no rank holds another's).
    const int64_t o0 = k.helix_ ? int64_t(k.hx0_) * vd : tr * Hvl, Ol = k.helix_ ? int64_t(k.hx_) * vd : Hvl;
    Tensor& w_o = reg.add("w_o", {Ol, s.D}, s.dtype, Held::weight, "w_o",
                          ExportRule::slice(o0 * s.D, k.helix_ || weights_exporter));
    upload_seeded(be, [&] { return input_matrix_block(k.env_.seed, InputId::w_o, s.D, o0, Ol, 0, s.D, law(InputId::w_o)); },
                  w_o);
    if (s.sinks) {  // every head's logit on every rank (root exports); each rank's gradient share
      k.sink_logits_ = reg.add("sinks", {s.H}, DType::f32, Held::weight, "sinks", ExportRule::slice(0, root));
      upload_seeded(be, [&] { return input_matrix_block(k.env_.seed, InputId::sinks, s.H, 0, 1, 0, s.H, law(InputId::sinks)); },
                    k.sink_logits_);
      k.sink_grad_ = reg.add("dsinks", {s.H}, DType::f32, Held::grad, "dsinks", ExportRule::slice(0));
      k.sinks_ = SinkHeads(k.sink_logits_, k.sink_grad_, tr * k.hl_, k.hl_);
    }

    // Forward activations kept for backward: xn, rstd on this rank's tokens; qkv, q, k, v, o
    // on the wide rows for this rank's heads.
    reg.add("xn", {BT, s.D}, s.dtype, Held::activation);
    reg.add("rstd", {BT}, DType::f32, Held::activation);
    Tensor qkv = s.mla ? Tensor{} : reg.add("qkv", {BW, Cl}, s.dtype, Held::activation);
    // Token rows of this rank's heads, `w` wide per head (d for q and k, vd for v and o).
    auto heads_q = [&](bool this_rank, int64_t w = 0) {
      w = w > 0 ? w : s.d;
      return ExportRule::tokens(wide, int64_t(s.H) * w, tr * k.hl_ * w, k.hl_ * w, this_rank);
    };
    auto heads_kv = [&](bool this_rank, int64_t w = 0) {
      w = w > 0 ? w : s.d;
      return ExportRule::tokens(wide, int64_t(s.G) * w, kv0 * w, k.gl_ * w, this_rank);
    };
    // (Latent travel on a Ulysses level: no rank forms its own tokens' k, v, dk, dv: zero rows.)
    const int64_t nkv = k.holds_local_kv(s) ? n : 0;
    k.q_ = reg.add("q", {s.B, n, k.hl_, s.d}, s.dtype, Held::activation, "q", heads_q(true));
    k.k_ = reg.add("k", {s.B, nkv, k.gl_, s.d}, s.dtype, Held::activation, "k", heads_kv(kv_exporter));
    k.v_ = reg.add("v", {s.B, nkv, k.gl_, vd}, s.dtype, Held::activation, "v", heads_kv(kv_exporter, vd));
    k.o_ = reg.add("o", {s.B, n, k.helix_ ? k.hx_ : k.hl_, vd}, s.dtype, Held::activation, "o", heads_q(true, vd));
    k.do_ = reg.add("do", {s.B, n, k.hl_, vd}, s.dtype, Held::activation, "do", heads_q(true, vd));
    k.dq_ = reg.add("dq", {s.B, n, k.hl_, s.d}, DType::f32, Held::activation, "dq", heads_q(true));
    k.dk_ = reg.add("dk", {s.B, nkv, k.gl_, s.d}, DType::f32, Held::activation, "dk", heads_kv(true));
    k.dv_ = reg.add("dv", {s.B, nkv, k.gl_, vd}, DType::f32, Held::activation, "dv", heads_kv(true, vd));
    if (s.pass.cached > 0 && !k.core_holds_cache()) {
      // The KV cache shard (t = 1 under --cached: every head on this rank), seeded as the roped
      // k and v a previous prefill would have written; the new rows are filled every forward.
      // Its rows: the Cr cached tokens, then the new ones (prefill: this rank's n; decode: the
      // slots of the steps this rank owns).
      // Decode shards the heads over the head group too: dgk_ KV heads from original head dkv0_.
      const int ch = s.decode() ? k.dgk_ : k.gl_, h0 = s.decode() ? k.dkv0_ : 0;
      std::vector<int64_t> heads(static_cast<size_t>(ch));
      for (int c = 0; c < ch; ++c) heads[size_t(c)] = h0 + c;
      k.cache_.setup(reg, be, k.env_.seed, s, k.cache_pos_, k.key_pos_.count() - k.cache_pos_.count(), heads);
      k.kc_ = k.cache_.k();
      k.vc_ = k.cache_.v();
    } else {
      k.kc_ = k.k_;
      k.vc_ = k.v_;
    }
    if (!s.mla) reg.add("dqkv", {BW, Cl}, s.dtype, Held::activation);
    reg.add("dxn", {BT, s.D}, s.dtype, Held::activation);
    reg.add("dnorm_w", {s.D}, DType::f32, Held::grad, "dnorm_w", ExportRule::slice(0));
    ExportRule gcols = wcols;  // gradients: partial sums from every holder
    for (ExportRule::ColBlock& c : gcols.blocks) c.this_rank = true;
    if (!s.mla) reg.add("dw_qkv", {s.D, Cl}, DType::f32, Held::grad, "dw_qkv", gcols);
    reg.add("dw_o", {Hvl, s.D}, DType::f32, Held::grad, "dw_o", ExportRule::slice(tr * Hvl * s.D));
    if (s.dtype != DType::f32 && s.mla) {  // no qkv to reuse: their own (a strategy's level converts into them)
      k.dq_run_ = reg.add("dq_run", {s.B, n, k.hl_, s.d}, s.dtype, Held::activation);
      k.dk_run_ = reg.add("dk_run", {s.B, nkv, k.gl_, s.d}, s.dtype, Held::activation);
      k.dv_run_ = reg.add("dv_run", {s.B, nkv, k.gl_, vd}, s.dtype, Held::activation);
    }
    if (s.dtype != DType::f32 && !s.mla) {
      k.dq_run_ = reg.add_view("dq_run", reuse_as(qkv, s.dtype, {s.B, n, k.hl_, s.d}), Held::activation);
      k.dk_run_ = reg.add_view("dk_run", reuse_as(qkv, s.dtype, {s.B, n, k.gl_, s.d}, k.dq_run_.bytes()),
                               Held::activation);
      k.dv_run_ = reg.add_view("dv_run", reuse_as(qkv, s.dtype, {s.B, n, k.gl_, s.d},
                                                  k.dq_run_.bytes() + k.dk_run_.bytes()), Held::activation);
    }
  }

  void forward() override {
    Block& k = b_;
    const LayerShape& s = k.shape();
    TensorRegistry& reg = k.reg_;
    Backend& b = k.be();
    const int64_t BT = s.B * k.T_, BW = BT * k.tp_.span();
    Tensor &in = reg[in_], &out = reg[out_], &xn = reg["xn"];
    b.rmsnorm_fwd(in.reshape({BT, s.D}), reg["norm_w"], s.eps, xn, reg["rstd"]);
    // column-parallel QKV on the group's tokens (xn gathered into slot 0; dead after the GEMM:
    // backward gathers again)
    const Tensor& xw = k.tp_.gather(b, xn, 0, 1);
    const Positions rows_pos = s.decode() ? k.pos_ : k.wide_positions();
    if (s.mla) {
      mla_.forward(b, xw, rows_pos, k.q_, k.k_, k.v_);
    } else {
      Tensor& qkv = reg["qkv"];
      const int64_t Cl = qkv.shape[1];
      b.gemm(false, false, BW, Cl, s.D, 1.0f, xw, s.D, reg["w_qkv"], Cl, 0.0f, qkv, Cl, k.qkv_model_share_);
      rope_and_split_qkv(b, qkv_layout(), s.rope, rows_pos, s.rope_theta, qkv, k.q_, k.k_, k.v_);
      // --dtype fp8: the roped q, k, v cast to e4m3 where they are formed, before anything travels
      // (the QKV GEMM's fp8 output in TransformerEngine; FlashAttention-3 takes them so).
      if (s.fp8)
        for (Tensor* t : {&k.q_, &k.k_, &k.v_}) b.quantize_fp8(*t, s.fp8_scaling);
    }
    // The new tokens' k, v into this rank's cache, per batch row: under prefill its n rows after
    // the cache shard; under decode the step's one row, written by the slot's owner only (0 bytes).
    const bool writes = s.decode() ? k.step_ % k.decode_p_ == k.decode_r_ : s.pass.cached > 0 && !k.core_holds_cache();
    if (writes) {  // decode: this member's dgk_ KV heads from k_'s dkv_local_, out of its gl_
      const int64_t n = k.q_.shape[1];
      const int64_t first = s.decode() ? k.cache_.cached_rows() + k.step_ / k.decode_p_ : k.kc_.shape[1] - n;
      if (s.latent_cache()) k.cache_.write_latent(b, mla_.local(), first);  // MLA: the token's latent
      else k.cache_.write(b, k.k_, k.v_, first, s.decode() ? k.dkv_local_ : 0);
    }
    if (s.decode()) k.decode_attention();
    else k.core_forward();
    // row-parallel w_o: this rank's heads' share, summed over the group into out (Helix: its H/P
    // heads' share, summed over all P ranks: the MLP's group)
    TpLevel& og = k.helix_ ? k.mlp_group() : k.tp_;
    const int64_t Ol = reg["w_o"].shape[0];
    Tensor out2 = out.reshape({BT, s.D});
    Tensor partial = og.partial(0, out2);
    b.gemm(false, false, BW, s.D, Ol, 1.0f, k.o_, Ol, reg["w_o"], s.D, 0.0f, partial, s.D);
    og.reduce(b, partial, 1, out2);
    b.add(out, out, in);
  }

  void backward() override {
    Block& k = b_;
    const LayerShape& s = k.shape();
    TensorRegistry& reg = k.reg_;
    Backend& b = k.be();
    const int64_t BT = s.B * k.T_, BW = BT * k.tp_.span();
    const int64_t Hl = int64_t(k.hl_) * s.vdim();  // w_o's rows on this rank: its heads' values
    Tensor &dout = reg["d" + out_], &din = reg["d" + in_];
    Tensor &xn = reg["xn"], &dxn = reg["dxn"];
    {  // through the output projection (dout gathered over the group)
      const Tensor& dw = k.tp_.gather(b, dout, 0, 1);
      b.gemm(false, true, BW, Hl, s.D, 1.0f, dw, s.D, reg["w_o"], s.D, 0.0f, k.do_, Hl);
      b.gemm(true, false, Hl, s.D, BW, 1.0f, k.o_, Hl, dw, s.D, 0.0f, reg["dw_o"], s.D);
    }
    if (k.sinks_.on()) b.fill(k.sink_grad_, 0.0f);  // the core's level adds its rows' share
    if (s.recompute == Recompute::selective) k.recompute_forward({"o"}, [&] { k.core_forward(); });
    if (k.latent_keys_) mla_.begin_backward(b);  // the levels' contractions add to dW_UK, dW_UV
    k.core_backward();
    if (s.mla) {  // MLA's projections (mla.h); under a tp level each rank's dxn is a partial sum
      const Tensor& xw = k.tp_.gather(b, xn, 0, 1);
      Tensor partial = k.tp_.partial(1, dxn);
      mla_.backward(b, xw, k.wide_positions(), k.dq_, k.dk_, k.dv_, partial);
      k.tp_.reduce(b, partial, 2, dxn);
      finish_norm(dout, din);
      return;
    }
    Tensor &dqkv = reg["dqkv"], &w_qkv = reg["w_qkv"];
    const int64_t Cl = reg["qkv"].shape[1];
    // dq, dk, dv -> dqkv (run dtype), then un-rotate
    merge_and_unrope_dqkv(b, qkv_layout(), s.rope, k.wide_positions(), s.rope_theta,
                          in_dtype(b, s.dtype, k.dq_, k.dq_run_), in_dtype(b, s.dtype, k.dk_, k.dk_run_),
                          in_dtype(b, s.dtype, k.dv_, k.dv_run_), dqkv);
    {
      // Megatron's order under TP: the all-gather of xn is issued before the dgrad GEMM (which it
      // can overlap), the reduce-scatter of dxn before the wgrad GEMM (likewise). xn lives in
      // slot 0 until the wgrad GEMM; the dgrad partial sum in slot 1 (reordered copy: slot 2).
      const Tensor& xw = k.tp_.gather(b, xn, 0, 1);
      Tensor partial = k.tp_.partial(1, dxn);
      b.gemm(false, true, BW, s.D, Cl, 1.0f, dqkv, Cl, w_qkv, Cl, 0.0f, partial, s.D, k.qkv_model_share_);
      k.tp_.reduce(b, partial, 2, dxn);
      b.gemm(true, false, s.D, Cl, BW, 1.0f, xw, s.D, dqkv, Cl, 0.0f, reg["dw_qkv"], Cl, k.qkv_model_share_);
    }
    finish_norm(dout, din);
  }

 private:
  MlaProjections mla_;  // --attention mla: the projections that replace w_qkv (mla.h)

  // din = rmsnorm's backward of dxn + the residual's dout.
  void finish_norm(Tensor& dout, Tensor& din) {
    Block& k = b_;
    const LayerShape& s = k.shape();
    TensorRegistry& reg = k.reg_;
    Backend& b = k.be();
    const int64_t BT = s.B * k.T_;
    Tensor& dnorm_w = reg["dnorm_w"];
    b.fill(dnorm_w, 0.0f);
    Tensor din2 = din.reshape({BT, s.D});
    b.rmsnorm_bwd(reg[in_].reshape({BT, s.D}), reg["norm_w"], reg["rstd"], reg["dxn"], din2, dnorm_w);
    b.add(din, din, dout);
  }

  QkvLayout qkv_layout() const {  // this rank's heads on the wide rows
    const LayerShape& s = b_.shape();
    QkvLayout l;
    l.B = s.B; l.T = b_.T_ * b_.tp_.span(); l.hq = b_.hl_; l.hk = b_.gl_; l.d = s.d; l.docs = s.mask.docs;
    return l;
  }
};

// The SwiGLU MLP sub-layer (--block full):
//   hn = rmsnorm(h)*norm2_w;  a = hn @ w_gate;  b = hn @ w_up;  y = h + (silu(a)*b) @ w_down
// Column-parallel w_gate, w_up (this rank's F/t columns), row-parallel w_down (their rows): the
// same gather / reduce-scatter around them as around w_qkv and w_o, on the MLP's TP group
// (mlp_group(): its own mesh's under --mlp-tp, bench/parts/sublayer_mesh.h; else the
// attention's). Without a TP group the MLP is token-local and sends nothing.
class Block::MlpSubLayer final : public Block::SubLayer {
 public:
  using SubLayer::SubLayer;

  void setup() override {
    Block& k = b_;
    const LayerShape& s = k.shape();
    TensorRegistry& reg = k.reg_;
    TpLevel& tp = k.mlp_group();  // its own mesh's group under --mlp-tp, else the attention's
    const int t = tp.size(), tr = tp.rank();
    const bool root = k.env_.world->rank() == 0, weights_exporter = k.env_.world->rank() < t;
    const int64_t BT = s.B * k.T_, BW = BT * tp.span(), Fl = s.F / t, Hd = int64_t(s.H) * s.d;
    auto law = [&](InputId id) { return input_law(id, s.D, Hd, s.F); };
    Backend& be = k.be();
    const uint64_t seed = k.env_.seed;

    Tensor& norm2_w = reg.add("norm2_w", {s.D}, s.dtype, Held::weight, "norm2_w", ExportRule::slice(0, root));
    upload_seeded(be, [&] { return input_matrix_block(seed, InputId::norm2_w, s.D, 0, 1, 0, s.D, law(InputId::norm2_w)); },
                  norm2_w);
    auto columns = [&](bool this_rank) {  // [D, F/t] -> columns [tr*F/t, (tr+1)*F/t) of [D, F]
      ExportRule r;
      r.how = ExportRule::How::columns;
      r.rows = s.D;
      r.local_cols = Fl;
      r.global_cols = s.F;
      r.blocks = {{int64_t(tr) * Fl, 0, Fl, this_rank}};
      return r;
    };
    Tensor& w_gate = reg.add("w_gate", {s.D, Fl}, s.dtype, Held::weight, "w_gate", columns(weights_exporter));
    upload_seeded(be, [&] { return input_matrix_block(seed, InputId::w_gate, s.F, 0, s.D, tr * Fl, Fl, law(InputId::w_gate)); },
                  w_gate);
    Tensor& w_up = reg.add("w_up", {s.D, Fl}, s.dtype, Held::weight, "w_up", columns(weights_exporter));
    upload_seeded(be, [&] { return input_matrix_block(seed, InputId::w_up, s.F, 0, s.D, tr * Fl, Fl, law(InputId::w_up)); },
                  w_up);
    Tensor& w_down = reg.add("w_down", {Fl, s.D}, s.dtype, Held::weight, "w_down",
                             ExportRule::slice(tr * Fl * s.D, weights_exporter));
    upload_seeded(be, [&] { return input_matrix_block(seed, InputId::w_down, s.D, tr * Fl, Fl, 0, s.D, law(InputId::w_down)); },
                  w_down);

    reg.add("hn", {BT, s.D}, s.dtype, Held::activation);
    reg.add("rstd2", {BT}, DType::f32, Held::activation);
    Tensor& a = reg.add("a", {BW, Fl}, s.dtype, Held::activation);
    Tensor& b = reg.add("b", {BW, Fl}, s.dtype, Held::activation);
    Tensor& g = reg.add("g", {BW, Fl}, s.dtype, Held::activation);
    // Backward: dg in g's memory (g is dead once dw_down = g^T dy is computed), da and db in a's
    // and b's (swiglu_bwd reads each element before it writes it): no [B*T, F] buffer more.
    reg.add_view("dg", g, Held::activation);
    reg.add_view("da", a, Held::activation);
    reg.add_view("db", b, Held::activation);
    reg.add("dhn", {BT, s.D}, s.dtype, Held::activation);
    reg.add("dnorm2_w", {s.D}, DType::f32, Held::grad, "dnorm2_w", ExportRule::slice(0));
    reg.add("dw_gate", {s.D, Fl}, DType::f32, Held::grad, "dw_gate", columns(true));
    reg.add("dw_up", {s.D, Fl}, DType::f32, Held::grad, "dw_up", columns(true));
    reg.add("dw_down", {Fl, s.D}, DType::f32, Held::grad, "dw_down", ExportRule::slice(tr * Fl * s.D));
  }

  void forward() override {
    Block& k = b_;
    const LayerShape& s = k.shape();
    TensorRegistry& reg = k.reg_;
    Backend& be = k.be();
    TpLevel& tp = k.mlp_group();
    const int64_t BT = s.B * k.T_, BW = BT * tp.span(), Fl = s.F / tp.size();
    Tensor &in = reg[in_], &out = reg[out_], &hn = reg["hn"], &a = reg["a"], &b = reg["b"], &g = reg["g"];
    be.rmsnorm_fwd(in.reshape({BT, s.D}), reg["norm2_w"], s.eps, hn, reg["rstd2"]);
    const Tensor& hw = tp.gather(be, hn, 0, 1);  // dead after the two GEMMs: backward gathers again
    be.gemm(false, false, BW, Fl, s.D, 1.0f, hw, s.D, reg["w_gate"], Fl, 0.0f, a, Fl);
    be.gemm(false, false, BW, Fl, s.D, 1.0f, hw, s.D, reg["w_up"], Fl, 0.0f, b, Fl);
    be.swiglu_fwd(a, b, g);
    Tensor out2 = out.reshape({BT, s.D});
    Tensor partial = tp.partial(0, out2);
    be.gemm(false, false, BW, s.D, Fl, 1.0f, g, Fl, reg["w_down"], s.D, 0.0f, partial, s.D);
    tp.reduce(be, partial, 1, out2);
    be.add(out, out, in);
  }

  void backward() override {
    Block& k = b_;
    const LayerShape& s = k.shape();
    TensorRegistry& reg = k.reg_;
    Backend& be = k.be();
    TpLevel& tp = k.mlp_group();
    const int64_t BT = s.B * k.T_, BW = BT * tp.span(), Fl = s.F / tp.size();
    Tensor &in = reg[in_], &dout = reg["d" + out_], &din = reg["d" + in_];
    Tensor &a = reg["a"], &b = reg["b"], &g = reg["g"], &dg = reg["dg"], &da = reg["da"], &db = reg["db"];
    Tensor &dhn = reg["dhn"], &w_gate = reg["w_gate"], &w_up = reg["w_up"];
    {  // through w_down (dout gathered over the group)
      const Tensor& dw = tp.gather(be, dout, 0, 1);
      be.gemm(true, false, Fl, s.D, BW, 1.0f, g, Fl, dw, s.D, 0.0f, reg["dw_down"], s.D);
      be.gemm(false, true, BW, Fl, s.D, 1.0f, dw, s.D, reg["w_down"], s.D, 0.0f, dg, Fl);
    }
    be.swiglu_bwd(a, b, dg, da, db);
    {  // through w_gate and w_up: dgrad partial sum reduce-scattered, hn gathered again for wgrad
      const Tensor& hw = tp.gather(be, reg["hn"], 0, 1);
      Tensor partial = tp.partial(1, dhn);
      be.gemm(false, true, BW, s.D, Fl, 1.0f, da, Fl, w_gate, Fl, 0.0f, partial, s.D);
      be.gemm(false, true, BW, s.D, Fl, 1.0f, db, Fl, w_up, Fl, 1.0f, partial, s.D);
      tp.reduce(be, partial, 2, dhn);
      be.gemm(true, false, s.D, Fl, BW, 1.0f, hw, s.D, da, Fl, 0.0f, reg["dw_gate"], Fl);
      be.gemm(true, false, s.D, Fl, BW, 1.0f, hw, s.D, db, Fl, 0.0f, reg["dw_up"], Fl);
    }
    Tensor& dnorm2_w = reg["dnorm2_w"];
    be.fill(dnorm2_w, 0.0f);
    Tensor din2 = din.reshape({BT, s.D});
    be.rmsnorm_bwd(in.reshape({BT, s.D}), reg["norm2_w"], reg["rstd2"], dhn, din2, dnorm2_w);
    be.add(din, din, dout);
  }
};

// ---- the block ----------------------------------------------------------------------------------

Block::Block() = default;
Block::~Block() = default;

Tensor Block::alloc(std::vector<int64_t> shape, MemKind kind) {
  return be().alloc(std::move(shape), env_.shape.dtype, kind);
}
Tensor Block::alloc_f32(std::vector<int64_t> shape, MemKind kind) {
  return be().alloc(std::move(shape), DType::f32, kind);
}

Positions Block::cache_positions(const LayerShape& s, const Mesh& m) const {
  return Positions::segments({cache_shard(s, m.P, m.cp->rank())});
}

void Block::setup(StrategyEnv& env) {
  env_ = env;
  reg_ = TensorRegistry(env_.be);
  const LayerShape& s = env_.shape;
  if (s.decode()) {
    // Decode: one token per sequence per step (pos_ moves with the step); the keys are the cache
    // shard, then one slot per step this rank owns: steps decode_r_, decode_r_ + p, ... at
    // positions C + i. A slot not written yet holds a later position, so the causal mask hides it.
    decode_groups_ = decode_groups();
    const DecodeGroups& g = decode_groups_;
    const int inner = g.merge ? g.merge->size() : 1, outer = g.merge_outer ? g.merge_outer->size() : 1;
    decode_p_ = inner * outer;
    decode_r_ = (g.merge_outer ? g.merge_outer->rank() * inner : 0) + (g.merge ? g.merge->rank() : 0);
    decode_u_ = g.heads ? g.heads->size() : 1;
    decode_ui_ = g.heads ? g.heads->rank() : 0;
    // Under a TP group of t the head group splits the TP rank's H/t heads: member (tr, u) of the
    // t*U head shards holds query heads [(tr*U + u)*H/(tU), +H/(tU)), dq0_ of them into q_'s.
    const Communicator* tpc = tp_group();
    const int t = tpc ? tpc->size() : 1, tr = tpc ? tpc->rank() : 0, shards = t * decode_u_;
    const int member = tr * decode_u_ + decode_ui_;
    const int Ge = replicated_kv_heads(shards, s);  // KV heads after replication over the t*U shards
    dhq_ = s.H / shards;
    dq0_ = decode_ui_ * dhq_;
    dgk_ = Ge / shards;
    dkv0_ = member * dgk_ / (Ge / s.G);
    // k_'s first head: the TP rank's first KV head (its max(G,t)/t, replicated when t > G).
    dkv_local_ = dkv0_ - int(first_kv_head(s, t, tr));
    dkv_exporter_ = (member * dgk_) % (Ge / s.G) == 0;
    if (s.uneven_heads && decode_u_ > 1) {  // the Ulysses level's split of the TP rank's heads
      const UlyssesShape us = UlyssesShape::uneven_split(s.H / t, replicated_kv_heads(t, s) / t, decode_u_);
      const HeadSplit q = us.q_split(), kv = us.kv_split();
      const int u = decode_ui_;
      dhq_ = q.count[size_t(u)];
      dq0_ = q.first[size_t(u)];
      dgk_ = kv.count[size_t(u)];
      dkv_local_ = kv.first[size_t(u)];
      dkv0_ = int(first_kv_head(s, t, tr)) + dkv_local_;
      dgrep_ = us.head_rep();
      dhead0_ = us.head0(u);
      // The first copy over tp exports (t > G), and a straddled head by the earlier member.
      dkv_exporter_ = (tr * us.G) % (replicated_kv_heads(t, s) / s.G) == 0;
      dkv_skip_ = u > 0 && kv.first[size_t(u)] == kv.first[size_t(u) - 1] + kv.count[size_t(u) - 1] - 1 ? 1 : 0;
      // The gather of the merged o in uneven shares: this member's B x dhq_ heads to every member;
      // member m's B x count_m arrive at B*d*first_m (the TP rank's heads in order).
      const int64_t vd = s.vdim(), on = s.B * int64_t(dhq_) * vd;
      ogather_send_off_.assign(size_t(decode_u_), 0);
      ogather_send_n_.assign(size_t(decode_u_), on);
      ogather_recv_off_.clear();
      ogather_recv_n_.clear();
      for (int m = 0; m < decode_u_; ++m) {
        ogather_recv_off_.push_back(s.B * int64_t(q.first[size_t(m)]) * vd);
        ogather_recv_n_.push_back(s.B * int64_t(q.count[size_t(m)]) * vd);
      }
    }
    if (s.latent_cache()) {  // MLA: one latent shared by every query head, whole on every member
      dgk_ = 1;
      dkv0_ = dkv_local_ = dgrep_ = dhead0_ = dkv_skip_ = 0;
      dkv_exporter_ = false;  // no k, v to export: the cache holds latents
    }
    helix_ = helix(s, env_.spec, env_.world->size());
    if (helix_) {  // slice decode_r_ of the member's dhq_ heads (check_mlp_mesh: P divides H)
      hx_ = dhq_ / decode_p_;
      hx0_ = tr * (s.H / t) + dq0_ + decode_r_ * hx_;
    }
    cache_pos_ = Positions::segments({cache_shard(s, decode_p_, decode_r_)});  // the merge group's split
    step_ = 0;
    pos_ = Positions::contiguous(s.pass.cached, 1);
    const int64_t slots = (s.pass.steps + decode_p_ - 1) / decode_p_;
    key_pos_ = cache_then(cache_pos_, Positions::strided(s.pass.cached + decode_r_, decode_p_, slots));
  } else {
    // Under --cached the keys are this rank's cache shard, then its new tokens (kc_ above).
    cache_pos_ = s.pass.cached > 0 ? cache_positions(s, mesh()) : Positions();
    pos_ = token_positions(s, mesh());
    key_pos_ = s.pass.cached > 0 ? cache_then(cache_pos_, pos_) : pos_;
  }
  T_ = pos_.count();
  const int64_t Hd = int64_t(s.H) * s.d;
  tp_.setup(be(), tp_group(), s, T_);
  mlp_own_mesh_ = env_.spec.mlp_tp > 0;
  if (mlp_own_mesh_) mlp_own_.setup(be(), env_.spec.mlp_tp > 1 ? &mesh().group("mlp_tp") : nullptr, s, T_);
  hl_ = s.H / tp_.size();
  gl_ = replicated_kv_heads(tp_.size(), s) / tp_.size();
  qkv_model_share_ = (hl_ + 2.0 * s.G / tp_.size()) / (hl_ + 2 * gl_);

  // The block's input and the gradient of its output (seeded), then its sub-layers in order.
  auto law = [&](InputId id) { return input_law(id, s.D, Hd); };
  auto rows = [&](const std::string& name, const std::string& dump) {
    reg_.add(name, {s.B, T_, s.D}, s.dtype, Held::activation, dump,
             dump.empty() ? ExportRule{} : ExportRule::tokens(pos_, s.D, 0, s.D));
  };
  // The block's input and output. Under decode x, y hold every step's new tokens [B, S, D]
  // (x seeded at positions C .. C+S-1, replicated; exported by rank 0 as rows 0 .. S-1) and the
  // sub-layers run one step at a time on x_step -> y_step [B, 1, D].
  std::string in = "x", out = "y";
  if (s.decode()) {
    const Positions steps = Positions::contiguous(0, s.pass.steps);
    const bool root = env_.world->rank() == 0;
    Tensor& x = reg_.add("x", {s.B, s.pass.steps, s.D}, s.dtype, Held::activation, "x",
                         ExportRule::tokens(steps, s.D, 0, s.D, root));
    upload_seeded(be(), [&] {
      return input_token_rows(env_.seed, InputId::x, s.B, s.pass.cached + s.pass.steps, s.D,
                              Positions::contiguous(s.pass.cached, s.pass.steps), 0, s.D, law(InputId::x));
    }, x);
    reg_.add("y", {s.B, s.pass.steps, s.D}, s.dtype, Held::activation, "y", ExportRule::tokens(steps, s.D, 0, s.D, root));
    rows("x_step", "");
    rows("y_step", "");
    in = "x_step", out = "y_step";
  } else {
    Tensor& x = reg_.add("x", {s.B, T_, s.D}, s.dtype, Held::activation, "x", ExportRule::tokens(pos_, s.D, 0, s.D));
    upload_seeded(be(), [&] { return input_token_rows(env_.seed, InputId::x, s.B, s.N, s.D, pos_, 0, s.D, law(InputId::x)); },
                  x);
    Tensor& dy = reg_.add("dy", {s.B, T_, s.D}, s.dtype, Held::activation, "dy", ExportRule::tokens(pos_, s.D, 0, s.D));
    upload_seeded(be(), [&] { return input_token_rows(env_.seed, InputId::dy, s.B, s.N, s.D, pos_, 0, s.D, law(InputId::dy)); },
                  dy);
    // The residual stream between sub-layers and its gradient: token rows [B, T, D]. y and dx
    // are the block's output and input gradient; under --block full h = x + attn(x) and dh sit
    // between the attention and the MLP sub-layer.
    rows("y", "y");
    rows("dx", "dx");
  }
  sublayers_.clear();
  if (s.full_block) {
    rows("h", "");
    rows("dh", "");
    sublayers_.push_back(std::make_unique<AttentionSubLayer>(*this, in, "h"));
    sublayers_.push_back(std::make_unique<MlpSubLayer>(*this, "h", out));
  } else {
    sublayers_.push_back(std::make_unique<AttentionSubLayer>(*this, in, out));
  }
  for (const auto& l : sublayers_) l->setup();
  if (s.decode()) {
    decode_setup();  // the strategy's own core does not run under decode
    return;
  }
  // The core's own activations (lse, received or gathered blocks, a Ulysses member's heads): what
  // --recompute selective need not keep across the layer (the memory estimate's term).
  const int64_t before = be().mem().stats().live[int(MemKind::activations)];
  core_setup();
  core_activations_ = be().mem().stats().live[int(MemKind::activations)] - before;
}

void Block::forward() {
  const LayerShape& s = env_.shape;
  if (!s.decode()) {
    for (const auto& l : sublayers_) l->forward();
    return;
  }
  // Decode: S steps from the same C-token cache (each forward writes the same slots again).
  Tensor &x = reg_["x"], &y = reg_["y"], &xs = reg_["x_step"], &ys = reg_["y_step"];
  const int64_t S = s.pass.steps, D = s.D;
  for (step_ = 0; step_ < S; ++step_) {
    pos_ = Positions::contiguous(s.pass.cached + step_, 1);
    be().copy_2d(xs, D, x.view(step_ * D, {(s.B - 1) * S * D + D}), S * D, s.B, D);
    for (const auto& l : sublayers_) l->forward();
    Tensor yd = y.view(step_ * D, {(s.B - 1) * S * D + D});
    be().copy_2d(yd, S * D, ys, D, s.B, D);
  }
}

Block::DecodeGroups Block::decode_groups() { return {mesh().cp.get(), nullptr}; }

CommPrediction Block::predicted_bytes(const LayerShape& s, int P, const MeshSpec& m, int64_t elem, int64_t acc,
                                      int rank) const {
  const CommPrediction attn = attention_bytes(s, P, m, elem, acc, rank);
  CommPrediction p = attn;
  p.add(mlp_bytes(s, P, m, elem));
  if (s.forward_only() || s.recompute == Recompute::none) return p;
  // --recompute repeats forward shares inside the backward (Block::backward): full, every one of
  // the block's; selective, the attention core's: the attention's but its tp level's (the gathers
  // and reduce-scatters around w_qkv and w_o, which the core does not run).
  const bool full = s.recompute == Recompute::full;
  CommPrediction rec;
  for (const CommShare& c : (full ? p : attn).shares)
    if (c.phase == Phase::fwd && (full || c.level != "tp")) rec.add(c.level, Phase::recompute, c.to, c.bytes);
  return p.add(rec);
}

CommPrediction Block::decode_prediction(const LayerShape& s, int P, const MeshSpec& m,
                                        const std::vector<MergeLevel>& merges, int U, int64_t elem, int64_t acc,
                                        int member) {
  if (helix(s, m, P))  // one merge level (usp's check refuses Helix on a double ring level)
    return merges.empty() ? helix_attention_bytes(s, P, "cp", 1, elem, acc)
                          : helix_attention_bytes(s, P, merges[0].level, merges[0].size, elem, acc);
  CommPrediction p;
  const int t = m.tp;
  int64_t hq = s.H / (int64_t(t) * U);  // query heads of one member of the head group
  if (s.uneven_heads && U > 1) {  // this member's own (the busiest: the most)
    const std::vector<int> n = UlyssesShape::uneven_split(s.H / t, replicated_kv_heads(t, s) / t, U).q_split().count;
    hq = member >= 0 ? n.at(size_t(member)) : *std::max_element(n.begin(), n.end());
  }
  const int64_t partial = acc * s.B * hq * s.vdim() + 4 * s.B * hq;  // o (s_part; d_v wide) and lse of one step
  for (const MergeLevel& l : merges)
    if (l.size > 1) p.add(l.level, Phase::fwd, 0, s.pass.steps * partial * (l.size - 1));
  if (U > 1) p.add(ulysses_decode_bytes(s, t, U, elem, int(hq)));
  // The tp level: an all-reduce of w_o's B x D output rows (the MLP's: mlp_bytes).
  return p.add(tp_sublayer_bytes(s, P, t, "tp", elem));
}

void Block::decode_setup() {
  const LayerShape& s = env_.shape;
  const DType pd = s.partial_dtype;
  const int64_t vd = s.vdim(), S = s.pass.steps, hd = int64_t(dhq_) * vd, part_n = RingCore::partial_elems(s.B * hd, s.B * dhq_, pd);
  // This rank's partial (o, then lse), every merge-group member's after the all-gather, the
  // running merge; allocated once (the timed steps allocate nothing).
  part_ = reg_.add("decode_partial", {part_n}, pd, Held::comm);
  const DecodeGroups& g = decode_groups_;
  const int levels = std::max(g.merge ? g.merge->size() : 1, g.merge_outer ? g.merge_outer->size() : 1);
  // The heads a rank ends with: its member's dhq_, or under Helix the hx_ it owns.
  const int merged = helix_ ? hx_ : dhq_;
  if (helix_) {  // the partial's chunks by destination, and those that arrive (as many)
    helix_send_ = reg_.add("helix_send", {part_n}, pd, Held::comm);
    helix_recv_ = reg_.add("helix_recv", {part_n}, pd, Held::comm);
  } else {
    gathered_ = reg_.add("decode_gathered", {levels * part_n}, pd, Held::comm);
  }
  o_acc_ = reg_.add("decode_o_acc", {s.B, 1, merged, vd}, pd, Held::activation);
  lse_acc_ = reg_.add("decode_lse", {s.B, merged, 1}, DType::f32, Held::activation);
  o_steps_ = reg_.add("decode_o_steps", {s.B, S, helix_ ? hx_ : hl_, vd}, s.dtype, Held::activation);
  lse_steps_ = reg_.add("decode_lse_steps", {s.B, merged, S}, DType::f32, Held::activation);
  // This member's query heads, and (not under Helix, whose owners merge by heads) the head
  // group's merged o.
  if (decode_u_ > 1) q_heads_ = reg_.add("decode_q_heads", {s.B, 1, dhq_, s.d}, s.dtype, Held::activation);
  if (decode_u_ > 1 && !helix_)  // every member's merged o (uneven shares: the TP rank's hl_ heads)
    o_heads_ = reg_.add("decode_o_heads", {s.uneven_heads ? s.B * hl_ * vd : decode_u_ * s.B * hd}, s.dtype, Held::comm);
  if (decode_u_ > 1 || s.dtype != DType::f32)
    o_part_run_ = reg_.add("decode_o_run", {s.B, 1, dhq_, vd}, s.dtype, Held::activation);
  if (s.latent_cache()) {  // MLA's absorbed queries [q_C·W_UKᵀ | q_R] and the latent output
    const MlaDims& m = s.mla_dims;
    q_abs_ = reg_.add("decode_q_absorbed", {s.B, 1, dhq_, s.latent_width()}, s.dtype, Held::activation);
    o_lat_ = reg_.add("decode_o_latent", {s.B, 1, dhq_, m.kv_rank}, s.dtype, Held::activation);
  }
}

void Block::decode_attention() {
  const LayerShape& s = env_.shape;
  Backend& b = be();
  AttnShape a;
  a.B = s.B; a.nq = 1; a.nk = key_pos_.count(); a.hq = dhq_; a.hk = dgk_; a.d = s.d; a.d_v = s.d_v;
  a.rep = dgrep_; a.head0 = dhead0_;
  a.causal = true;  // a decode token sees every earlier key; the mask hides slots not written yet
  a.window = s.mask.window;
  const int64_t vd = s.vdim(), qd = int64_t(dhq_) * s.d, Qd = int64_t(hl_) * s.d;  // q's widths
  const int64_t hd = int64_t(dhq_) * vd, Hd = int64_t(hl_) * vd, on = s.B * hd, ln = s.B * dhq_;  // o's
  const int64_t part_n = RingCore::partial_elems(on, ln, part_.dtype);
  // This member's query heads (the head group's u-th H/U of q's).
  const Tensor* q = &q_;
  if (decode_u_ > 1) {
    b.copy_2d(q_heads_, qd, q_.view(int64_t(dq0_) * s.d, {(s.B - 1) * Qd + qd}), Qd, s.B, qd);
    q = &q_heads_;
  }
  // This rank's shard: its partial o (the partial dtype) and lse, straight into the send buffer.
  Tensor po = part_.view(0, {s.B, 1, dhq_, vd}), pl = RingCore::lse_view(part_, on, ln, {s.B, dhq_, 1});
  if (s.latent_cache()) {  // MLA: the absorbed form over the cached latents
    absorbed_attention(a, *q, po, pl);
  } else if (po.dtype == s.dtype) {  // the kernel writes the partial's dtype
    b.attn_fwd(a, *q, kc_, vc_, pos_, key_pos_, po, pl);
  } else {  // the kernel writes the run dtype, converted to the partial's
    b.attn_fwd(a, *q, kc_, vc_, pos_, key_pos_, o_part_run_, pl);
    b.convert(po, o_part_run_);
  }
  if (helix_) {
    helix_merge(a);
    return;
  }
  // Every merge-group member's partial, then the online-softmax merge in member order (the same
  // order on every rank, so every member holds the same o); with an outer merge level the merged
  // partial goes round it the same way.
  const DecodeGroups& g = decode_groups_;
  b.copy_2d(o_acc_, on, part_, on, 1, on);
  b.copy_2d(lse_acc_, ln, pl, ln, 1, ln);
  for (Communicator* level : {g.merge, g.merge_outer}) {
    if (!level || level->size() == 1) continue;
    if (level == g.merge_outer) {  // the inner level's merged partial is what travels
      b.copy_2d(part_, on, o_acc_, on, 1, on);
      b.copy_2d(pl, ln, lse_acc_, ln, 1, ln);
    }
    Tensor all = gathered_.view(0, {level->size() * part_n});
    level->all_gather(part_, all);
    b.copy_2d(o_acc_, on, all, on, 1, on);
    b.copy_2d(lse_acc_, ln, RingCore::lse_view(all, on, ln, {ln}), ln, 1, ln);
    for (int r = 1; r < level->size(); ++r)
      b.attn_merge(a, o_acc_, lse_acc_, all.view(r * part_n, {s.B, 1, dhq_, vd}),
                   RingCore::lse_view(all, r * part_n + on, ln, {s.B, dhq_, 1}));
  }
  // Every member now holds the same merged rows of its dhq_ heads: the sinks, once (on float32,
  // or under bf16 partials on the bf16 merge).
  sinks_.narrow(dq0_, dhq_).forward(b, a, o_acc_, lse_acc_);
  if (decode_u_ == 1) {
    if (o_.dtype == o_acc_.dtype) b.copy_2d(o_, on, o_acc_, on, 1, on);
    else b.convert(o_, o_acc_);
  } else {  // the head group's merged o (run dtype), member u's heads into o's columns [u*hd, +hd)
    if (o_part_run_.dtype == o_acc_.dtype) b.copy_2d(o_part_run_, on, o_acc_, on, 1, on);
    else b.convert(o_part_run_, o_acc_);
    if (!s.uneven_heads) {
      g.heads->all_gather(o_part_run_, o_heads_);
      for (int m = 0; m < decode_u_; ++m) {
        Tensor od = o_.view(m * hd, {(s.B - 1) * Hd + hd});
        b.copy_2d(od, Hd, o_heads_.view(m * on, {on}), hd, s.B, hd);
      }
    } else {  // uneven shares (from setup): member m's B x count_m heads at o_heads_'s B*d*first_m
      exchange_uneven(b, *g.heads, o_part_run_, ogather_send_off_, ogather_send_n_, o_heads_, ogather_recv_off_,
                      ogather_recv_n_);
      for (int m = 0; m < decode_u_; ++m) {
        const int64_t w = ogather_recv_n_[size_t(m)] / s.B, c0 = ogather_recv_off_[size_t(m)] / s.B;
        Tensor od = o_.view(c0, {(s.B - 1) * Hd + w});
        b.copy_2d(od, Hd, o_heads_.view(ogather_recv_off_[size_t(m)], {ogather_recv_n_[size_t(m)]}), w, s.B, w);
      }
    }
  }
  // Kept for verification: this step's o and lse as column step_ of o_steps_, lse_steps_.
  const int64_t S = s.pass.steps;
  Tensor od = o_steps_.view(step_ * Hd, {(s.B - 1) * S * Hd + Hd});
  b.copy_2d(od, S * Hd, o_, Hd, s.B, Hd);
  Tensor ld = lse_steps_.view(step_, {(ln - 1) * S + 1});
  b.copy_2d(ld, S, lse_acc_, 1, ln, 1);
}

// MLA's absorbed decode (DeepSeek-V2 §2.1.2's weight absorption; FlashMLA's kernel shape): with
// k_C = c_kv·W_UK_h and v = c_kv·W_UV_h, each head's scores q_C·k_C + q_R·k_R equal
// (q_C·W_UK_hᵀ)·c_kv + q_R·k_R and its output P·v equals (P·c_kv)·W_UV_h, so the attention runs
// over the cached latents [c_kv | k_R] as one key head r_kv + d_rope wide whose values are its first
// r_kv columns (v_in_k: read once), at the expanded layer's scale 1/sqrt(d_nope + d_rope); the
// latent output is up-projected per head before the merge (merging is a convex combination, so
// the order does not change o, and the partials that travel are d_v wide, not r_kv).
void Block::absorbed_attention(const AttnShape& a, const Tensor& q, Tensor& po, Tensor& pl) {
  const LayerShape& s = env_.shape;
  const MlaDims& m = s.mla_dims;
  Backend& b = be();
  const int64_t dn = m.d_nope, dr = m.d_rope, rkv = m.kv_rank, dqk = s.d, w = s.latent_width(), dv = s.vdim();
  const int64_t hq = dhq_, H = hl_;  // this member's heads; the TP rank's (W_UK's, W_UV's columns)
  const Tensor &w_uk = reg_["w_uk"], &w_uv = reg_["w_uv"];
  auto tail = [](const Tensor& t, int64_t off) { return t.view(off, {t.numel() - off}); };
  // Per head h: q_C·W_UK_hᵀ [B, r_kv] into the absorbed query's first columns (one batched GEMM
  // over the heads, as serving engines run it: one launch, not one per head).
  b.gemm_batched(false, true, s.B, rkv, dn, 1.0f, q, hq * dqk, dqk, tail(w_uk, dq0_ * dn), H * dn, dn, 0.0f, q_abs_,
                 hq * w, w, hq);
  Tensor qa_rope = tail(q_abs_, rkv);  // then q_R
  b.copy_2d(qa_rope, w, tail(q, dn), dqk, s.B * hq, dr);
  AttnShape ab = a;
  ab.d = int(w);
  ab.d_v = int(rkv);
  ab.hk = 1;
  ab.rep = ab.head0 = 0;
  ab.v_in_k = true;
  ab.scale = float(1.0 / std::sqrt(double(dqk)));
  b.attn_fwd(ab, q_abs_, kc_, kc_, pos_, key_pos_, o_lat_, pl);
  Tensor& o = po.dtype == s.dtype ? po : o_part_run_;  // up-projected in the run dtype, as the kernel writes
  b.gemm_batched(false, false, s.B, dv, rkv, 1.0f, o_lat_, hq * rkv, rkv, tail(w_uv, dq0_ * dv), H * dv, dv, 0.0f, o,
                 hq * dv, dv, hq);  // per head h: õ_h·W_UV,h
  if (&o != &po) b.convert(po, o);
}

void Block::helix_merge(const AttnShape& a) {
  const LayerShape& s = env_.shape;
  Backend& b = be();
  const int R = decode_p_;
  const int64_t vd = s.vdim(), hd = int64_t(dhq_) * vd, on = s.B * hd, xd = int64_t(hx_) * vd, ln = s.B * dhq_;
  const int64_t xo = s.B * xd, xl = s.B * hx_, chunk = RingCore::partial_elems(xo, xl, part_.dtype);  // one destination's o, lse
  const Tensor pl = RingCore::lse_view(part_, on, ln, {ln});
  // Chunk j of the send buffer: heads [j*hx_, (j+1)*hx_) of this rank's partial, o then lse, for
  // merge-group member j (who owns them).
  for (int j = 0; j < R; ++j) {
    Tensor od = helix_send_.view(j * chunk, {xo}), ld = RingCore::lse_view(helix_send_, j * chunk + xo, xl, {xl});
    b.copy_2d(od, xd, part_.view(j * xd, {on - j * xd}), hd, s.B, xd);
    b.copy_2d(ld, hx_, pl.view(j * hx_, {ln - j * hx_}), dhq_, s.B, hx_);
  }
  // One all-to-all: chunk r of helix_recv_ is member r's partial of the heads this rank owns;
  // merged in member order as the all-gather path merges.
  if (R > 1) decode_groups_.merge->all_to_all(helix_send_, helix_recv_);
  else b.copy_2d(helix_recv_, chunk, helix_send_, chunk, 1, chunk);  // one member: its own heads
  AttnShape m = a;
  m.hq = hx_;
  m.hk = 1;  // the merge reads no keys: only the query heads count
  b.copy_2d(o_acc_, xo, helix_recv_, xo, 1, xo);
  b.copy_2d(lse_acc_, xl, RingCore::lse_view(helix_recv_, xo, xl, {xl}), xl, 1, xl);
  for (int r = 1; r < R; ++r)
    b.attn_merge(m, o_acc_, lse_acc_, helix_recv_.view(r * chunk, {s.B, 1, hx_, vd}),
                 RingCore::lse_view(helix_recv_, r * chunk + xo, xl, {s.B, hx_, 1}));
  // The owner's merged rows of its hx_ heads (global from hx0_): the sinks, once.
  if (sinks_.on()) SinkHeads(sink_logits_, sink_grad_, hx0_, hx_).forward(b, m, o_acc_, lse_acc_);
  if (o_.dtype == o_acc_.dtype) b.copy_2d(o_, xo, o_acc_, xo, 1, xo);
  else b.convert(o_, o_acc_);
  // Kept for verification: this step's o and lse as column step_ of o_steps_, lse_steps_.
  const int64_t S = s.pass.steps;
  Tensor od = o_steps_.view(step_ * xd, {(s.B - 1) * S * xd + xd});
  b.copy_2d(od, S * xd, o_, xd, s.B, xd);
  Tensor ld = lse_steps_.view(step_, {(xl - 1) * S + 1});
  b.copy_2d(ld, S, lse_acc_, 1, xl, 1);
}

void Block::export_decode(const std::string& name, std::vector<float>& global) {
  const LayerShape& s = env_.shape;
  const int64_t S = s.pass.steps, vd = s.vdim();  // o: d_v per head
  if (name == "k" || name == "v") {
    if (s.latent_cache()) return;  // MLA: the cache holds latents, no k, v (verify leaves them out)
    // The new tokens' k, v from the slots this rank owns (slot j holds step decode_r_ + j * p),
    // its dgk_ KV heads from dkv0_; replicated heads by the first of their copies.
    if (!dkv_exporter_) return;
    const std::vector<float> c = be().download(name == "k" ? kc_ : vc_);
    const int64_t Cr = cache_pos_.count(), nk = key_pos_.count(), w = int64_t(dgk_) * s.d, gw = int64_t(s.G) * s.d;
    const int64_t c0 = int64_t(dkv0_) * s.d;
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t i = decode_r_, j = 0; i < S; i += decode_p_, ++j)
        for (int64_t e = int64_t(dkv_skip_) * s.d; e < w; ++e)  // a straddled head: the earlier member's
          global[size_t((b * S + i) * gw + c0 + e)] += c[size_t((b * nk + Cr + j) * w + e)];
    return;
  }
  if (helix_) {  // every rank its own hx_ heads from hx0_, o and lse
    const std::vector<float> h = be().download(name == "o" ? o_steps_ : lse_steps_);
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t hh = 0; hh < hx_; ++hh)
        for (int64_t i = 0; i < S; ++i) {
          if (name == "lse") {
            global[size_t((b * s.H + hx0_ + hh) * S + i)] += h[size_t((b * hx_ + hh) * S + i)];
          } else {
            for (int64_t e = 0; e < vd; ++e)
              global[size_t(((b * S + i) * s.H + hx0_ + hh) * vd + e)] += h[size_t(((b * S + i) * hx_ + hh) * vd + e)];
          }
        }
    return;
  }
  // Query heads: this member's from global head tp rank * hl_ + dq0_ (lse), its TP rank's hl_
  // from tp rank * hl_ (o).
  const int64_t tp_q0 = int64_t(tp_.rank()) * hl_;
  if (name == "lse") {  // this member's heads, from one member of its merge group
    if (decode_r_ != 0) return;
    const std::vector<float> h = be().download(lse_steps_);
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t hh = 0; hh < dhq_; ++hh)
        for (int64_t i = 0; i < S; ++i)
          global[size_t((b * s.H + tp_q0 + dq0_ + hh) * S + i)] += h[size_t((b * dhq_ + hh) * S + i)];
    return;
  }
  // o: every member of a TP rank's merge and head groups holds its hl_ heads after the head
  // group's gather; the first of them adds them.
  if (decode_r_ != 0 || decode_ui_ != 0) return;
  const std::vector<float> h = be().download(o_steps_);
  const int64_t Hd = int64_t(s.H) * vd, w = int64_t(hl_) * vd;
  if (h.size() * size_t(tp_.size()) != global.size()) throw std::logic_error("export_tensor: decode 'o' size mismatch");
  for (int64_t r = 0; r < s.B * S; ++r)
    for (int64_t e = 0; e < w; ++e) global[size_t(r * Hd + tp_q0 * vd + e)] += h[size_t(r * w + e)];
}

void Block::recompute_forward(std::initializer_list<const char*> regenerated, const std::function<void()>& forward) {
  // The phase and the FLOP counting while the forward repeats; restored on every exit (a failing
  // forward leaves the next job's counting as it found it).
  struct Repeat {
    CommLog* log;
    Backend& be;
    Phase interrupted;
    Repeat(CommLog* l, Backend& b) : log(l), be(b), interrupted(l ? l->phase() : Phase::bwd) {
      if (log) log->set_phase(Phase::recompute);
      be.set_phase(int(Phase::recompute));
      be.set_model_flops_counted(false);  // hardware FLOPs: HFU counts the repeat, MFU does not
    }
    ~Repeat() {
      be.set_model_flops_counted(true);
      if (log) log->set_phase(interrupted);
      be.set_phase(int(interrupted));
    }
  } repeat(mesh().log, be());
  // Verify (the backend poisons): what the repeated forward writes is NaN first, so a backward
  // that read a kept copy instead, or a forward that wrote less, fails the comparison.
  if (be().poisoning())
    for (const char* name : regenerated)
      if (reg_.has(name)) be().fill(reg_[name], std::numeric_limits<float>::quiet_NaN());
  forward();
}

void Block::backward() {
  if (env_.shape.pass.cached > 0)  // the config refuses it; a core reaching here would use stale keys
    throw std::logic_error("block: --cached is prefill or decode (forward only): no backward");
  if (env_.shape.recompute == Recompute::full)  // every sub-layer's forward again, before any backward
    recompute_forward({"xn", "rstd", "qkv", "q", "k", "v", "o", "h", "hn", "rstd2", "a", "b", "g"}, [&] {
      for (const auto& l : sublayers_) l->forward();
    });
  for (auto it = sublayers_.rbegin(); it != sublayers_.rend(); ++it) (*it)->backward();
}

void Block::export_tensor(const std::string& name, std::vector<float>& global) {
  const LayerShape& s = env_.shape;
  if (s.decode() && (name == "k" || name == "v" || name == "o" || name == "lse")) {
    if (!replicated() || env_.world->rank() == 0) export_decode(name, global);  // single: rank 0 all
    return;
  }
  // (Under decode x and y are replicated: their rules let rank 0 add them; the weights are
  // added by the first TP group, as in training.)
  if (replicated() && env_.world->rank() != 0) return;
  if (name == "lse") {
    export_lse(global);
    return;
  }
  if (!reg_.export_share(name, global, env_.shape))
    throw std::invalid_argument("export_tensor: unknown tensor '" + name + "'");
}

Block::CacheHeld Block::cache_held() {
  if (env_.shape.pass.cached == 0) return {};
  return {cache_.held_bytes(), cache_.cached_rows()};
}

Block::HeldShare Block::held_share() {
  const CacheHeld c = cache_held();
  auto elements = [&](std::initializer_list<const char*> names) {  // of the weights present (attn: no MLP)
    int64_t n = 0;
    for (const char* name : names)
      if (const TensorRegistry::Entry* e = reg_.by_dump(name)) n += e->t.numel();
    return n;
  };
  HeldShare h;
  h.parameters = reg_.elements(Held::weight);
  h.input_bytes = int64_t(reg_["x"].bytes());
  // Held whole by every rank: the two norms and, under MLA, its down-projections and their norms
  // (mla.h: replicated over a tp level), which the estimate's "norms" group shards over every rank.
  h.norm_parameters = elements({"norm_w", "norm2_w", "w_dq", "q_norm_w", "w_dkv", "kv_norm_w", "w_kr"});
  h.mlp_parameters = elements({"w_gate", "w_up", "w_down"});
  h.tp = tp_.size();
  h.mlp_tp = mlp_group().size();
  h.kv_cache_bytes = c.bytes;
  h.cache_tokens = c.tokens;
  h.core_activations = core_activations_;
  return h;
}

int64_t Block::activation_bytes_estimate(const LayerShape& s, int P, const MeshSpec& m) const {
  // Token-local tensors kept across the layer, per rank: x, dy, xn, qkv, q, k, v, o, y, do,
  // dqkv, dxn, dx (run dtype) and rstd, dq, dk, dv (float32); v, o, do, dv d_v wide per head.
  // Under --cached, T counts the new tokens, and k_cache, v_cache hold the cache shard too.
  if (s.decode()) {  // the cache's tokens over P/(tU) ranks, its heads over tU (usp); single: P = 1
    const int t = m.tp > 0 && P % m.tp == 0 ? m.tp : 1, U = m.U > 0 && (P / t) % m.U == 0 ? m.U : 1;
    return decode_activation_bytes(s, P / t / U, U, t);
  }
  const int64_t T = s.new_tokens() / P, BT = s.B * T, es = int64_t(dtype_size(s.dtype));
  const int64_t cache = s.pass.cached > 0 ? s.B * (s.pass.cached / P + T) * int64_t(s.G) * (s.d + s.vdim()) * es : 0;
  const int64_t local = BT * 6 * s.D * es + BT * 4;  // x, dy, xn, y, dxn, dx; rstd
  // (latent travel: a Ulysses member contracts its group's U x B x T rows and holds no k, v of its own)
  return local + tp_heads_activation_bytes(s, BT, s.H, holds_local_kv(s) ? s.G : 0, BT * std::max(1, m.U)) + cache +
         core_activation_bytes(s, P, m) +
         mlp_activation_bytes(s, BT, m);
}

int64_t Block::tp_heads_activation_bytes(const LayerShape& s, int64_t rows, int64_t hl, int64_t gl, int64_t latent_rows) {
  const int64_t es = int64_t(dtype_size(s.dtype)), d = s.d, dv = s.vdim();
  const int64_t grads = rows * (hl * d + gl * (d + dv));  // dq, dk, dv (and q, k, v) elements
  const int64_t proj = s.mla ? MlaProjections::activation_bytes(s, rows, hl, latent_rows) + (s.dtype != DType::f32 ? grads * es : 0)
                             : 2 * rows * (hl + 2 * gl) * d * es;  // qkv, dqkv
  return grads * es + 2 * rows * hl * dv * es + grads * 4 + proj;
}

int64_t Block::decode_activation_bytes(const LayerShape& s, int R, int U, int t) {
  // x, y of the S steps, o_steps (the TP rank's H/t heads; run dtype) and lse_steps; the cache
  // shard with its slots [B, C/R + ceil(S/R), max(G,tU)/(tU), d] twice; the partials of H/(tU)
  // heads (this rank's and R gathered: o in s_part, lse float32); one step's tensors are B rows
  // and left out.
  // MLA (s.latent_cache()): the cache is one latent row (r_kv + d_rope) per token, whole on every
  // member of the head group; o is d_v wide.
  const int64_t es = int64_t(dtype_size(s.dtype)), S = s.pass.steps, shards = int64_t(t) * U;
  const int64_t Hd = int64_t(s.H) * s.vdim(), slots = (S + R - 1) / R;
  const int64_t part = s.B * (Hd * s.acc_bytes() + s.H * 4) / shards;
  const int64_t heads = replicated_kv_heads(int(shards), s) / shards;
  const int64_t cache_row = s.latent_cache() ? s.latent_width() : heads * (s.d + s.vdim());
  return s.B * S * (2 * s.D + Hd / t) * es + s.B * s.H / shards * S * 4 +
         s.B * (s.pass.cached / R + slots) * cache_row * es + (R > 1 ? R + 1 : 1) * part;
}

int64_t Block::mlp_activation_bytes(const LayerShape& s, int64_t local_rows, const MeshSpec& m) {
  if (!s.full_block) return 0;
  const int t = mlp_degree(m);
  const int64_t wide_rows = local_rows * t;
  // h, dh, hn, dhn on this rank's tokens, a, b, g (da, db, dg in their memory) on the wide rows
  // for F/t columns (run dtype); rstd2 (float32).
  const int64_t es = int64_t(dtype_size(s.dtype));
  return local_rows * 4 * s.D * es + wide_rows * 3 * (s.F / t) * es + local_rows * 4;
}

}  // namespace cpbench
