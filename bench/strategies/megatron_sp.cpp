// megatron-sp — Megatron-LM tensor parallelism with sequence parallelism (Korthikanti et al.
// 2022) over the P ranks of the CP group, as the reference point for the CP strategies: it
// shards the WEIGHTS (by heads) as well as the token-local activations, at the price of moving
// the model dimension D instead of only K,V.
//   x, y, dx, dy are sequence shards [B, N/P, D] (contiguous tokens); rmsnorm is local.
//   f: all_gather xn -> [B,N,D]; column-parallel QKV with this rank's columns of w_qkv (query
//      heads [r*H/P, (r+1)*H/P) and kv heads [r*G/P, (r+1)*G/P): the GQA mapping stays local);
//      RoPE at global positions; attention over the whole sequence for those heads;
//      row-parallel w_o (rows of this rank's heads) -> partial [B,N,D] -> reduce_scatter.
//   b: all_gather dy; do = dy_full w_o_shard^T, dw_o_shard; attention backward; inverse RoPE;
//      dxn partial = dqkv w_qkv_shard^T -> reduce_scatter; xn is all-gathered AGAIN for
//      dw_qkv_shard = xn_full^T dqkv (the forward dropped its gathered copy: Megatron's
//      activation-memory saving); rmsnorm backward local.
// Weights and their gradients exist only as shards (MemKind::weights), which is what the
// memory report shows; dnorm_w is a per-rank partial sum (verification sums it).
// Bytes per rank: fwd = 2*s*T*D*(P-1); bwd = 3*s*T*D*(P-1).
#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "bench/inputs.h"
#include "bench/strategies/layout.h"
#include "bench/strategy.h"
#include "comm/communicator.h"

namespace cpbench {

namespace {

// Largest u dividing P, H and G (the widest head split these heads allow).
class MegatronSP final : public Strategy {
 public:
  std::string name() const override { return "megatron-sp"; }

  void check(const LayerShape& s, int P, const MeshSpec&) const override {
    std::ostringstream e;
    if (s.H % P != 0)
      e << "megatron-sp: P=" << P << " does not divide heads=" << s.H;
    else if (s.G % P != 0)
      e << "megatron-sp: P=" << P << " does not divide kv_heads=" << s.G << "; "
        << (max_ulysses_degree(P, s) == 1 ? std::string("use a ring strategy (or usp with ulysses=1)")
                                          : "use usp with ulysses<=" + std::to_string(max_ulysses_degree(P, s)));
    else if (s.N % P != 0)
      e << "megatron-sp: seq=" << s.N << " is not divisible by P=" << P;
    if (!e.str().empty()) throw ConstraintError(e.str());
  }

  CommPrediction predicted_bytes(const LayerShape& s, int P, const MeshSpec&, int64_t elem,
                                 int64_t) const override {
    const int64_t sTD = elem * (s.B * s.N / P) * s.D;
    return {2 * sTD * (P - 1), 3 * sTD * (P - 1)};
  }

  int64_t activation_bytes_estimate(const LayerShape& s, int P, const MeshSpec&) const override {
    // Token-local, kept: x, dy, xn, y, dxn, dx (run dtype), rstd (float32).
    // Whole sequence for this rank's heads, kept: qkv, dqkv, q, k, v, o, do (run dtype); dq, dk,
    // dv, lse, delta (float32).
    // Transient [B,N,D] buffers at the backward's peak: the re-gathered xn and the dgrad partial
    // sum, plus the reduce_scatter's reordered send buffer when B > 1.
    const int64_t es = int64_t(dtype_size(s.dtype)), T = s.N / P, BT = s.B * T, BN = s.B * s.N;
    const int64_t hl = s.H / P, gl = s.G / P, Cl = (hl + 2 * gl) * s.d;
    const int64_t local = BT * 6 * s.D * es + BT * 4;
    const int64_t heads = BN * (2 * Cl + (3 * hl + 2 * gl) * s.d) * es +
                          BN * (hl + 2 * gl) * s.d * 4 + 2 * s.B * hl * s.N * 4;
    const int64_t transient = (s.B > 1 ? 3 : 2) * BN * s.D * es;
    return local + heads + transient;
  }

  void setup(StrategyEnv& env) override {
    env_ = env;
    const LayerShape& s = env_.shape;
    Communicator& c = *env_.mesh->cp;
    P_ = c.size();
    r_ = c.rank();
    T_ = s.N / P_;
    hl_ = s.H / P_;
    gl_ = s.G / P_;
    pos_ = Positions::contiguous(r_ * T_, T_);
    const int64_t BT = s.B * T_, BN = s.B * s.N, Hd = int64_t(s.H) * s.d, Cq = s.qkv_cols();
    const int64_t Hl = int64_t(hl_) * s.d, Gl = int64_t(gl_) * s.d, Cl = Hl + 2 * Gl;
    Backend& b = be();
    auto law = [&](InputId id) { return input_law(id, s.D, Hd); };

    x_ = alloc({s.B, T_, s.D});
    b.upload(input_token_rows(env_.seed, InputId::x, s.B, s.N, s.D, pos_, 0, s.D, law(InputId::x)), x_);
    dy_ = alloc({s.B, T_, s.D});
    b.upload(input_token_rows(env_.seed, InputId::dy, s.B, s.N, s.D, pos_, 0, s.D, law(InputId::dy)), dy_);
    norm_w_ = alloc({s.D}, MemKind::weights);  // replicated, as in Megatron
    b.upload(input_matrix_block(env_.seed, InputId::norm_w, s.D, 0, 1, 0, s.D, law(InputId::norm_w)), norm_w_);
    // Column shard of w_qkv: this rank's q, k and v head columns side by side.
    std::vector<float> wq(static_cast<size_t>(s.D * Cl));
    for (int part = 0; part < 3; ++part) {
      const int64_t width = part == 0 ? Hl : Gl;
      const std::vector<float> blk = input_matrix_block(env_.seed, InputId::w_qkv, Cq, 0, s.D,
                                                        qkv_global_col(part), width, law(InputId::w_qkv));
      for (int64_t i = 0; i < s.D; ++i)
        std::copy_n(&blk[static_cast<size_t>(i * width)], width, &wq[static_cast<size_t>(i * Cl + qkv_local_col(part))]);
    }
    w_qkv_ = alloc({s.D, Cl}, MemKind::weights);
    b.upload(wq, w_qkv_);
    // Row shard of w_o: the rows of this rank's heads.
    w_o_ = alloc({Hl, s.D}, MemKind::weights);
    b.upload(input_matrix_block(env_.seed, InputId::w_o, s.D, r_ * Hl, Hl, 0, s.D, law(InputId::w_o)), w_o_);

    xn_ = alloc({BT, s.D});
    rstd_ = alloc_f32({BT});
    qkv_ = alloc({BN, Cl});
    q_ = alloc({s.B, s.N, hl_, s.d});
    k_ = alloc({s.B, s.N, gl_, s.d});
    v_ = alloc({s.B, s.N, gl_, s.d});
    o_ = alloc({s.B, s.N, hl_, s.d});
    lse_ = alloc_f32({s.B, hl_, s.N});
    y_ = alloc({s.B, T_, s.D});
    do_ = alloc({s.B, s.N, hl_, s.d});
    delta_ = alloc_f32({s.B, hl_, s.N});
    dq_ = alloc_f32({s.B, s.N, hl_, s.d});
    dk_ = alloc_f32({s.B, s.N, gl_, s.d});
    dv_ = alloc_f32({s.B, s.N, gl_, s.d});
    dqkv_ = alloc({BN, Cl});
    dxn_ = alloc({BT, s.D});
    dx_ = alloc({s.B, T_, s.D});
    dnorm_w_ = alloc_f32({s.D}, MemKind::weights);
    dw_qkv_ = alloc_f32({s.D, Cl}, MemKind::weights);
    dw_o_ = alloc_f32({Hl, s.D}, MemKind::weights);
  }

  void forward() override {
    const LayerShape& s = env_.shape;
    const int64_t BT = s.B * T_, BN = s.B * s.N;
    const int64_t Hl = int64_t(hl_) * s.d, Gl = int64_t(gl_) * s.d, Cl = Hl + 2 * Gl;
    const Positions all = Positions::contiguous(0, s.N);
    Backend& b = be();
    b.rmsnorm_fwd(x_.reshape({BT, s.D}), norm_w_, s.eps, xn_, rstd_);
    {
      Tensor xn_full = gather_tokens(xn_);  // dropped after the GEMM; backward gathers again
      b.gemm(false, false, BN, Cl, s.D, 1.0f, xn_full, s.D, w_qkv_, Cl, 0.0f, qkv_, Cl);
    }
    if (s.rope) {
      Tensor qpart = qkv_.view(0, {qkv_.numel()});
      Tensor kpart = qkv_.view(Hl, {qkv_.numel() - Hl});
      b.rope(qpart, s.B, s.N, hl_, s.d, Cl, all, s.rope_theta, false);
      b.rope(kpart, s.B, s.N, gl_, s.d, Cl, all, s.rope_theta, false);
    }
    b.copy_2d(q_, Hl, qkv_, Cl, BN, Hl);
    b.copy_2d(k_, Gl, qkv_.view(Hl, {qkv_.numel() - Hl}), Cl, BN, Gl);
    b.copy_2d(v_, Gl, qkv_.view(Hl + Gl, {qkv_.numel() - Hl - Gl}), Cl, BN, Gl);
    b.attn_fwd(attn_shape(), q_, k_, v_, all, all, o_, lse_);
    {
      Tensor partial = alloc({BN, s.D}, MemKind::comm);  // this rank's heads' share of o @ w_o
      b.gemm(false, false, BN, s.D, Hl, 1.0f, o_, Hl, w_o_, s.D, 0.0f, partial, s.D);
      reduce_scatter_tokens(partial, y_);
    }
    b.add(y_, y_, x_);
  }

  void backward() override {
    const LayerShape& s = env_.shape;
    const int64_t BT = s.B * T_, BN = s.B * s.N;
    const int64_t Hl = int64_t(hl_) * s.d, Gl = int64_t(gl_) * s.d, Cl = Hl + 2 * Gl;
    const Positions all = Positions::contiguous(0, s.N);
    Backend& b = be();
    {
      Tensor dy_full = gather_tokens(dy_);
      b.gemm(false, true, BN, Hl, s.D, 1.0f, dy_full, s.D, w_o_, s.D, 0.0f, do_, Hl);
      b.gemm(true, false, Hl, s.D, BN, 1.0f, o_, Hl, dy_full, s.D, 0.0f, dw_o_, s.D);
    }
    b.attn_bwd_delta(attn_shape(), o_, do_, delta_);
    b.fill(dq_, 0.0f);
    b.fill(dk_, 0.0f);
    b.fill(dv_, 0.0f);
    b.attn_bwd(attn_shape(), q_, k_, v_, do_, lse_, delta_, all, all, dq_, dk_, dv_);
    // dq, dk, dv -> dqkv (run dtype), then un-rotate
    Tensor dq = in_run_dtype(dq_), dk = in_run_dtype(dk_), dv = in_run_dtype(dv_);
    b.copy_2d(dqkv_, Cl, dq, Hl, BN, Hl);
    Tensor dk_dst = dqkv_.view(Hl, {dqkv_.numel() - Hl});
    b.copy_2d(dk_dst, Cl, dk, Gl, BN, Gl);
    Tensor dv_dst = dqkv_.view(Hl + Gl, {dqkv_.numel() - Hl - Gl});
    b.copy_2d(dv_dst, Cl, dv, Gl, BN, Gl);
    if (s.rope) {
      Tensor qpart = dqkv_.view(0, {dqkv_.numel()});
      b.rope(qpart, s.B, s.N, hl_, s.d, Cl, all, s.rope_theta, true);
      b.rope(dk_dst, s.B, s.N, gl_, s.d, Cl, all, s.rope_theta, true);
    }
    {
      // Megatron's order: the all-gather of xn is issued before the dgrad GEMM (which it can
      // overlap), the reduce-scatter of dxn before the wgrad GEMM (likewise).
      Tensor xn_full = gather_tokens(xn_);
      {
        Tensor partial = alloc({BN, s.D}, MemKind::comm);
        b.gemm(false, true, BN, s.D, Cl, 1.0f, dqkv_, Cl, w_qkv_, Cl, 0.0f, partial, s.D);
        reduce_scatter_tokens(partial, dxn_);
      }
      b.gemm(true, false, s.D, Cl, BN, 1.0f, xn_full, s.D, dqkv_, Cl, 0.0f, dw_qkv_, Cl);
    }
    b.fill(dnorm_w_, 0.0f);
    Tensor dx2 = dx_.reshape({BT, s.D});
    b.rmsnorm_bwd(x_.reshape({BT, s.D}), norm_w_, rstd_, dxn_, dx2, dnorm_w_);
    b.add(dx_, dx_, dy_);
  }

  void teardown() override {
    for (Tensor* t : {&x_, &norm_w_, &w_qkv_, &w_o_, &dy_, &xn_, &rstd_, &qkv_, &q_, &k_, &v_, &o_,
                      &lse_, &y_, &do_, &delta_, &dq_, &dk_, &dv_, &dqkv_, &dxn_, &dx_, &dnorm_w_,
                      &dw_qkv_, &dw_o_})
      *t = Tensor{};
  }

  void export_tensor(const std::string& name, std::vector<float>& global) override {
    const LayerShape& s = env_.shape;
    const int64_t Hd = int64_t(s.H) * s.d, Gd = int64_t(s.G) * s.d, Cq = s.qkv_cols();
    const int64_t Hl = int64_t(hl_) * s.d, Gl = int64_t(gl_) * s.d, Cl = Hl + 2 * Gl;
    const Positions all = Positions::contiguous(0, s.N);
    auto tokens = [&](const Tensor& t) {  // token shard [B, T, D]
      add_token_rows(global, be().download(t), s.B, s.N, s.D, pos_, 0, s.D);
    };
    auto heads = [&](const Tensor& t, int64_t C, int64_t width) {  // [B, N, local heads, d]
      add_token_rows(global, be().download(t), s.B, s.N, C, all, r_ * width, width);
    };
    auto qkv_cols = [&](const Tensor& t) {  // [D, Cl] -> columns of [D, Cq]
      const std::vector<float> h = be().download(t);
      for (int part = 0; part < 3; ++part) {
        const int64_t width = part == 0 ? Hl : Gl, g0 = qkv_global_col(part), l0 = qkv_local_col(part);
        for (int64_t i = 0; i < s.D; ++i)
          for (int64_t c = 0; c < width; ++c)
            global[static_cast<size_t>(i * Cq + g0 + c)] += h[static_cast<size_t>(i * Cl + l0 + c)];
      }
    };
    auto o_rows = [&](const Tensor& t) {  // [Hl, D] -> rows [r*Hl, (r+1)*Hl) of [Hd, D]
      const std::vector<float> h = be().download(t);
      for (size_t i = 0; i < h.size(); ++i) global[static_cast<size_t>(r_ * Hl * s.D) + i] += h[i];
    };
    auto whole = [&](const Tensor& t, bool only_root) {
      if (only_root && r_ != 0) return;
      const std::vector<float> h = be().download(t);
      for (size_t i = 0; i < h.size(); ++i) global[i] += h[i];
    };
    if (name == "x") tokens(x_);
    else if (name == "dy") tokens(dy_);
    else if (name == "y") tokens(y_);
    else if (name == "dx") tokens(dx_);
    else if (name == "norm_w") whole(norm_w_, true);
    else if (name == "dnorm_w") whole(dnorm_w_, false);
    else if (name == "w_qkv") qkv_cols(w_qkv_);
    else if (name == "dw_qkv") qkv_cols(dw_qkv_);
    else if (name == "w_o") o_rows(w_o_);
    else if (name == "dw_o") o_rows(dw_o_);
    else if (name == "q") heads(q_, Hd, Hl);
    else if (name == "o") heads(o_, Hd, Hl);
    else if (name == "do") heads(do_, Hd, Hl);
    else if (name == "dq") heads(dq_, Hd, Hl);
    else if (name == "k") heads(k_, Gd, Gl);
    else if (name == "v") heads(v_, Gd, Gl);
    else if (name == "dk") heads(dk_, Gd, Gl);
    else if (name == "dv") heads(dv_, Gd, Gl);
    else if (name == "lse") add_lse_rows(global, be().download(lse_), s.B, s.H, s.N, r_ * hl_, hl_, all);
    else throw std::invalid_argument("export_tensor: unknown tensor '" + name + "'");
  }

 private:
  Backend& be() { return *env_.be; }
  Tensor alloc(std::vector<int64_t> shape, MemKind kind = MemKind::activations) {
    return be().alloc(std::move(shape), env_.shape.dtype, kind);
  }
  Tensor alloc_f32(std::vector<int64_t> shape, MemKind kind = MemKind::activations) {
    return be().alloc(std::move(shape), DType::f32, kind);
  }
  Tensor in_run_dtype(const Tensor& acc) {  // float32 accumulator in the run dtype
    if (env_.shape.dtype == DType::f32) return acc;
    Tensor t = alloc(acc.shape);
    be().convert(t, acc);
    return t;
  }

  // Columns of part 0 (q), 1 (k), 2 (v) of this rank's heads: first column in the global
  // w_qkv [D, (H+2G)d] and in the local shard [D, Cl].
  int64_t qkv_global_col(int part) const {
    const LayerShape& s = env_.shape;
    const int64_t Hd = int64_t(s.H) * s.d, Gd = int64_t(s.G) * s.d;
    if (part == 0) return r_ * int64_t(hl_) * s.d;
    return Hd + (part == 2 ? Gd : 0) + r_ * int64_t(gl_) * s.d;
  }
  int64_t qkv_local_col(int part) const {
    const int64_t Hl = int64_t(hl_) * env_.shape.d, Gl = int64_t(gl_) * env_.shape.d;
    return part == 0 ? 0 : Hl + (part == 2 ? Gl : 0);
  }

  AttnShape attn_shape() const {
    const LayerShape& s = env_.shape;
    AttnShape a;
    a.B = s.B; a.nq = s.N; a.nk = s.N; a.hq = hl_; a.hk = gl_; a.d = s.d; a.causal = s.causal;
    return a;
  }

  // All-gathers a token shard [B*T, D] into the whole sequence [B*N, D] in natural order. With
  // B = 1 the rank-ordered gather already is natural order.
  Tensor gather_tokens(const Tensor& local) {
    const LayerShape& s = env_.shape;
    Tensor gathered = alloc({s.B * s.N, s.D}, MemKind::comm);
    env_.mesh->cp->all_gather(local, gathered);
    if (s.B == 1) return gathered;
    Tensor natural = alloc({s.B * s.N, s.D});
    gathered_to_natural(be(), gathered, s.B, T_, s.D, P_, RankChunks::contiguous, natural);
    return natural;
  }

  // Reduce-scatters partial sums over the whole sequence [B*N, D] (natural order) into this
  // rank's token shard `out` [B*T, D].
  void reduce_scatter_tokens(const Tensor& partial, Tensor& out) {
    const LayerShape& s = env_.shape;
    Tensor send = partial;
    if (s.B > 1) {
      send = alloc({s.B * s.N, s.D}, MemKind::comm);
      natural_to_gathered(be(), partial, s.B, T_, s.D, P_, RankChunks::contiguous, send);
    }
    env_.mesh->cp->reduce_scatter(send, out);
  }

  StrategyEnv env_;
  int P_ = 1, r_ = 0, hl_ = 0, gl_ = 0;
  int64_t T_ = 0;
  Positions pos_;
  Tensor x_, norm_w_, w_qkv_, w_o_, dy_;                            // inputs; weight shards
  Tensor xn_, rstd_, qkv_, q_, k_, v_, o_, lse_, y_;                // forward
  Tensor do_, delta_, dq_, dk_, dv_, dqkv_, dxn_, dx_;               // backward
  Tensor dnorm_w_, dw_qkv_, dw_o_;                                  // gradients (shards)
};

}  // namespace

std::unique_ptr<Strategy> make_megatron_sp() { return std::make_unique<MegatronSP>(); }

}  // namespace cpbench
