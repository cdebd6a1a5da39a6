// megatron-sp — Megatron-LM tensor parallelism with sequence parallelism (Korthikanti et al.
// 2022) over the P ranks of the CP group, as the reference point for the CP strategies: it
// shards the WEIGHTS (by heads) as well as the token-local activations, at the price of moving
// the model dimension D instead of only K,V.
//   x, y, dx, dy are sequence shards [B, N/P, D] (contiguous tokens); rmsnorm is local.
//   f: all_gather xn -> [B,N,D]; column-parallel QKV with this rank's columns of w_qkv (query
//      heads [r*H/P, (r+1)*H/P) and kv heads [r*G/P, (r+1)*G/P): the GQA mapping stays local;
//      when P > G (G divides P), kv head r*G/P: its columns replicated on P/G ranks, as
//      Megatron replicates KV heads for tensor parallelism beyond the KV head count);
//      RoPE at global positions; attention over the whole sequence for those heads;
//      row-parallel w_o (rows of this rank's heads) -> partial [B,N,D] -> reduce_scatter.
//   b: all_gather dy; do = dy_full w_o_shard^T, dw_o_shard; attention backward; inverse RoPE;
//      dxn partial = dqkv w_qkv_shard^T -> reduce_scatter; xn is all-gathered AGAIN for
//      dw_qkv_shard = xn_full^T dqkv (the forward dropped its gathered copy: Megatron's
//      activation-memory saving); rmsnorm backward local.
// Weights and their gradients exist only as shards (MemKind::weights), which is what the
// memory report shows; dnorm_w is a per-rank partial sum (verification sums it), and so are the
// gradients of replicated KV columns. The timed step allocates nothing: the gathered and
// reduce-scattered [B,N,D] buffers are slots allocated in setup (see setup for the peak).
// Bytes per rank: fwd = 2*s*T*D*(P-1); bwd = 3*s*T*D*(P-1).
#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "bench/inputs.h"
#include "bench/strategies/layout.h"
#include "bench/strategies/qkv.h"
#include "bench/strategy.h"
#include "comm/communicator.h"

namespace cpbench {

namespace {

class MegatronSP final : public Strategy {
 public:
  std::string name() const override { return "megatron-sp"; }
  std::string summary() const override {
    return "Megatron-LM tensor + sequence parallelism: all-gather xn, head-sharded QKV,\n"
           "attention and w_o, reduce-scatter back to token shards; weights sharded.";
  }
  std::string tiers() const override { return "all-gather/reduce-scatter over all P ranks: tensor parallelism, keep its P ranks inside one node"; }
  std::string constraints() const override {
    return "P divides heads; P divides kv_heads or is a multiple (kv heads replicated); P divides seq";
  }

  void check(const LayerShape& s, int P, const MeshSpec&) const override {
    std::ostringstream e;
    const std::string heads = head_sharding_error(P, s, "P");
    if (!heads.empty())
      e << "megatron-sp: " << heads << "; "
        << (max_ulysses_degree(P, s) == 1 ? std::string("use a ring strategy (or usp with ulysses=1)")
                                          : "use usp with ulysses<=" + std::to_string(max_ulysses_degree(P, s)));
    else if (s.N % P != 0)
      e << "megatron-sp: seq=" << s.N << " is not divisible by P=" << P;
    if (!e.str().empty()) throw ConstraintError(e.str());
  }

  CommPrediction predicted_bytes(const LayerShape& s, int P, const MeshSpec&, int64_t elem,
                                 int64_t) const override {
    const int64_t sTD = elem * (s.B * s.N / P) * s.D;
    CommPrediction p;  // all collectives over the whole CP group
    return p.add("cp", Phase::fwd, 0, 2 * sTD * (P - 1)).add("cp", Phase::bwd, 0, 3 * sTD * (P - 1));
  }

  int64_t activation_bytes_estimate(const LayerShape& s, int P, const MeshSpec&) const override {
    // Token-local, kept: x, dy, xn, y, dxn, dx (run dtype), rstd (float32).
    // Whole sequence for this rank's heads, kept: qkv, dqkv, q, k, v, o, do (run dtype); dq, dk,
    // dv, lse, delta (float32).
    // Transient [B,N,D] buffers at the backward's peak: the re-gathered xn and the dgrad partial
    // sum, plus the reduce_scatter's reordered send buffer when B > 1.
    const int64_t es = int64_t(dtype_size(s.dtype)), T = s.N / P, BT = s.B * T, BN = s.B * s.N;
    const int64_t hl = s.H / P, gl = replicated_kv_heads(P, s) / P, Cl = (hl + 2 * gl) * s.d;
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
    gl_ = replicated_kv_heads(P_, s) / P_;  // 1 when P > G: this rank's copy of KV head r*G/P
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
    // Whole-sequence [B*N, D] slots (run dtype) for the gathers and reduce-scatters; their uses
    // never overlap in time (see gather_tokens / reduce_scatter_tokens). Two slots, three when
    // B > 1 (the reordered copy): the same peak as the transient buffers they replace.
    for (int i = 0; i < (s.B > 1 ? 3 : 2); ++i) slot_[i] = alloc({BN, s.D}, MemKind::comm);
    if (s.dtype != DType::f32) {  // dq, dk, dv in the run dtype: in qkv_'s memory, dead by then
      dq_run_ = reuse_as(qkv_, s.dtype, {s.B, s.N, hl_, s.d});
      dk_run_ = reuse_as(qkv_, s.dtype, {s.B, s.N, gl_, s.d}, dq_run_.bytes());
      dv_run_ = reuse_as(qkv_, s.dtype, {s.B, s.N, gl_, s.d}, dq_run_.bytes() + dk_run_.bytes());
    }
  }

  void forward() override {
    const LayerShape& s = env_.shape;
    const int64_t BT = s.B * T_, BN = s.B * s.N;
    const int64_t Hl = int64_t(hl_) * s.d, Gl = int64_t(gl_) * s.d, Cl = Hl + 2 * Gl;
    const Positions all = Positions::contiguous(0, s.N);
    Backend& b = be();
    b.rmsnorm_fwd(x_.reshape({BT, s.D}), norm_w_, s.eps, xn_, rstd_);
    // xn gathered into slot 0 (dead after the GEMM; backward gathers again)
    const Tensor xn_full = gather_tokens(xn_, slot_[0], slot_[1]);
    b.gemm(false, false, BN, Cl, s.D, 1.0f, xn_full, s.D, w_qkv_, Cl, 0.0f, qkv_, Cl);
    rope_and_split_qkv(b, qkv_layout(), s.rope, all, s.rope_theta, qkv_, q_, k_, v_);
    b.attn_fwd(attn_shape(), q_, k_, v_, all, all, o_, lse_);
    Tensor& partial = slot_[0];  // this rank's heads' share of o @ w_o
    b.gemm(false, false, BN, s.D, Hl, 1.0f, o_, Hl, w_o_, s.D, 0.0f, partial, s.D);
    reduce_scatter_tokens(partial, slot_[1], y_);
    b.add(y_, y_, x_);
  }

  void backward() override {
    const LayerShape& s = env_.shape;
    const int64_t BT = s.B * T_, BN = s.B * s.N;
    const int64_t Hl = int64_t(hl_) * s.d, Gl = int64_t(gl_) * s.d, Cl = Hl + 2 * Gl;
    const Positions all = Positions::contiguous(0, s.N);
    Backend& b = be();
    {
      const Tensor dy_full = gather_tokens(dy_, slot_[0], slot_[1]);
      b.gemm(false, true, BN, Hl, s.D, 1.0f, dy_full, s.D, w_o_, s.D, 0.0f, do_, Hl);
      b.gemm(true, false, Hl, s.D, BN, 1.0f, o_, Hl, dy_full, s.D, 0.0f, dw_o_, s.D);
    }
    b.attn_bwd_delta(attn_shape(), o_, do_, delta_);
    b.fill(dq_, 0.0f);
    b.fill(dk_, 0.0f);
    b.fill(dv_, 0.0f);
    b.attn_bwd(attn_shape(), q_, k_, v_, do_, lse_, delta_, all, all, dq_, dk_, dv_);
    // dq, dk, dv -> dqkv (run dtype), then un-rotate
    merge_and_unrope_dqkv(b, qkv_layout(), s.rope, all, s.rope_theta, in_dtype(b, s.dtype, dq_, dq_run_),
                          in_dtype(b, s.dtype, dk_, dk_run_), in_dtype(b, s.dtype, dv_, dv_run_), dqkv_);
    {
      // Megatron's order: the all-gather of xn is issued before the dgrad GEMM (which it can
      // overlap), the reduce-scatter of dxn before the wgrad GEMM (likewise). xn lives in slot 0
      // until the wgrad GEMM; the dgrad partial sum in slot 1 (its reordered copy in slot 2).
      const Tensor xn_full = gather_tokens(xn_, slot_[0], slot_[1]);
      Tensor& partial = slot_[1];
      b.gemm(false, true, BN, s.D, Cl, 1.0f, dqkv_, Cl, w_qkv_, Cl, 0.0f, partial, s.D);
      reduce_scatter_tokens(partial, slot_[2], dxn_);
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
    auto heads = [&](const Tensor& t, int64_t C, int64_t col0, int64_t width) {  // [B, N, local heads, d]
      add_token_rows(global, be().download(t), s.B, s.N, C, all, col0, width);
    };
    auto q_heads = [&](const Tensor& t) { heads(t, Hd, r_ * Hl, Hl); };
    // KV heads: replicated data from one copy, gradients (partial sums) from every copy.
    auto kv_heads = [&](const Tensor& t, bool replicated) {
      if (!replicated || kv_exporter()) heads(t, Gd, int64_t(kv_head0()) * s.d, Gl);
    };
    auto qkv_cols = [&](const Tensor& t, bool replicated) {  // [D, Cl] -> columns of [D, Cq]
      const std::vector<float> h = be().download(t);
      for (int part = 0; part < 3; ++part) {
        if (part > 0 && replicated && !kv_exporter()) continue;
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
    else if (name == "w_qkv") qkv_cols(w_qkv_, true);
    else if (name == "dw_qkv") qkv_cols(dw_qkv_, false);
    else if (name == "w_o") o_rows(w_o_);
    else if (name == "dw_o") o_rows(dw_o_);
    else if (name == "q") q_heads(q_);
    else if (name == "o") q_heads(o_);
    else if (name == "do") q_heads(do_);
    else if (name == "dq") q_heads(dq_);
    else if (name == "k") kv_heads(k_, true);
    else if (name == "v") kv_heads(v_, true);
    else if (name == "dk") kv_heads(dk_, false);
    else if (name == "dv") kv_heads(dv_, false);
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
  QkvLayout qkv_layout() const {  // this rank's heads over the whole sequence
    QkvLayout l;
    l.B = env_.shape.B; l.T = env_.shape.N; l.hq = hl_; l.hk = gl_; l.d = env_.shape.d; l.docs = env_.shape.docs;
    return l;
  }
  // KV replication (P > G): f = P/G ranks hold copies of one KV head; the first of them exports
  // replicated data (k, v, the w_qkv columns), every one its partial gradients.
  int kv_copies() const { return replicated_kv_heads(P_, env_.shape) / env_.shape.G; }
  int kv_head0() const { return r_ * gl_ / kv_copies(); }  // first global KV head of this rank
  bool kv_exporter() const { return r_ % kv_copies() == 0; }

  // Columns of part 0 (q), 1 (k), 2 (v) of this rank's heads: first column in the global
  // w_qkv [D, (H+2G)d] and in the local shard [D, Cl].
  int64_t qkv_global_col(int part) const {
    const LayerShape& s = env_.shape;
    const int64_t Hd = int64_t(s.H) * s.d, Gd = int64_t(s.G) * s.d;
    if (part == 0) return r_ * int64_t(hl_) * s.d;
    return Hd + (part == 2 ? Gd : 0) + int64_t(kv_head0()) * s.d;
  }
  int64_t qkv_local_col(int part) const {
    const int64_t Hl = int64_t(hl_) * env_.shape.d, Gl = int64_t(gl_) * env_.shape.d;
    return part == 0 ? 0 : Hl + (part == 2 ? Gl : 0);
  }

  AttnShape attn_shape() const {
    const LayerShape& s = env_.shape;
    AttnShape a;
    a.B = s.B; a.nq = s.N; a.nk = s.N; a.hq = hl_; a.hk = gl_; a.d = s.d; a.causal = s.causal;
    a.window = s.window; a.docs = s.docs;
    return a;
  }

  // All-gathers a token shard [B*T, D] into the whole sequence [B*N, D] in natural order, in
  // `dst`. With B = 1 the rank-ordered gather already is natural order; otherwise it lands in
  // `scratch` and is reordered into `dst`. Returns dst.
  const Tensor& gather_tokens(const Tensor& local, Tensor& dst, Tensor& scratch) {
    const LayerShape& s = env_.shape;
    if (s.B == 1) {
      env_.mesh->cp->all_gather(local, dst);
      return dst;
    }
    env_.mesh->cp->all_gather(local, scratch);
    gathered_to_natural(be(), scratch, s.B, T_, s.D, P_, RankChunks::contiguous, dst);
    return dst;
  }

  // Reduce-scatters partial sums over the whole sequence [B*N, D] (natural order) into this
  // rank's token shard `out` [B*T, D]; with B > 1 through the rank-ordered copy in `scratch`.
  void reduce_scatter_tokens(const Tensor& partial, Tensor& scratch, Tensor& out) {
    const LayerShape& s = env_.shape;
    if (s.B == 1) {
      env_.mesh->cp->reduce_scatter(partial, out);
      return;
    }
    natural_to_gathered(be(), partial, s.B, T_, s.D, P_, RankChunks::contiguous, scratch);
    env_.mesh->cp->reduce_scatter(scratch, out);
  }

  StrategyEnv env_;
  int P_ = 1, r_ = 0, hl_ = 0, gl_ = 0;
  int64_t T_ = 0;
  Positions pos_;
  Tensor x_, norm_w_, w_qkv_, w_o_, dy_;                            // inputs; weight shards
  Tensor xn_, rstd_, qkv_, q_, k_, v_, o_, lse_, y_;                // forward
  Tensor do_, delta_, dq_, dk_, dv_, dqkv_, dxn_, dx_;               // backward
  Tensor dnorm_w_, dw_qkv_, dw_o_;                                  // gradients (shards)
  Tensor slot_[3];                    // whole-sequence [B*N, D] buffers (gather / reduce-scatter)
  Tensor dq_run_, dk_run_, dv_run_;   // bf16/fp16: dq, dk, dv in the run dtype (views of qkv_)
};

}  // namespace

std::unique_ptr<Strategy> make_strategy_megatron_sp() { return std::make_unique<MegatronSP>(); }

}  // namespace cpbench
