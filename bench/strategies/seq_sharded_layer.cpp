#include "bench/strategies/seq_sharded_layer.h"

#include "bench/inputs.h"
#include "comm/communicator.h"

namespace cpbench {

Tensor SeqShardedLayer::alloc(std::vector<int64_t> shape, MemKind kind) {
  return be().alloc(std::move(shape), env_.shape.dtype, kind);
}
Tensor SeqShardedLayer::alloc_f32(std::vector<int64_t> shape, MemKind kind) {
  return be().alloc(std::move(shape), DType::f32, kind);
}
QkvLayout SeqShardedLayer::qkv_layout() const {
  const LayerShape& s = env_.shape;
  QkvLayout l;
  l.B = s.B; l.T = T_; l.hq = s.H; l.hk = s.G; l.d = s.d; l.docs = s.docs;
  return l;
}

void SeqShardedLayer::setup(StrategyEnv& env) {
  env_ = env;
  const LayerShape& s = env_.shape;
  pos_ = token_positions(s, mesh());
  T_ = pos_.count();
  const int64_t BT = s.B * T_, Hd = int64_t(s.H) * s.d, Cq = s.qkv_cols();

  auto upload = [&](Tensor& t, const std::vector<float>& host) { be().upload(host, t); };
  x_ = alloc({s.B, T_, s.D});
  upload(x_, input_token_rows(env_.seed, InputId::x, s.B, s.N, s.D, pos_, 0, s.D, input_law(InputId::x, s.D, Hd)));
  dy_ = alloc({s.B, T_, s.D});
  upload(dy_, input_token_rows(env_.seed, InputId::dy, s.B, s.N, s.D, pos_, 0, s.D, input_law(InputId::dy, s.D, Hd)));
  norm_w_ = alloc({s.D}, MemKind::weights);
  upload(norm_w_, input_matrix_block(env_.seed, InputId::norm_w, s.D, 0, 1, 0, s.D, input_law(InputId::norm_w, s.D, Hd)));
  w_qkv_ = alloc({s.D, Cq}, MemKind::weights);
  upload(w_qkv_, input_matrix_block(env_.seed, InputId::w_qkv, Cq, 0, s.D, 0, Cq, input_law(InputId::w_qkv, s.D, Hd)));
  w_o_ = alloc({Hd, s.D}, MemKind::weights);
  upload(w_o_, input_matrix_block(env_.seed, InputId::w_o, s.D, 0, Hd, 0, s.D, input_law(InputId::w_o, s.D, Hd)));

  xn_ = alloc({BT, s.D});
  rstd_ = alloc_f32({BT});
  qkv_ = alloc({BT, Cq});
  q_ = alloc({s.B, T_, s.H, s.d});
  k_ = alloc({s.B, T_, s.G, s.d});
  v_ = alloc({s.B, T_, s.G, s.d});
  o_ = alloc({s.B, T_, s.H, s.d});
  y_ = alloc({s.B, T_, s.D});
  do_ = alloc({s.B, T_, s.H, s.d});
  dq_ = alloc_f32({s.B, T_, s.H, s.d});
  dk_ = alloc_f32({s.B, T_, s.G, s.d});
  dv_ = alloc_f32({s.B, T_, s.G, s.d});
  dqkv_ = alloc({BT, Cq});
  dxn_ = alloc({BT, s.D});
  dx_ = alloc({s.B, T_, s.D});
  dnorm_w_ = alloc_f32({s.D}, MemKind::weights);
  dw_qkv_ = alloc_f32({s.D, Cq}, MemKind::weights);
  dw_o_ = alloc_f32({Hd, s.D}, MemKind::weights);
  if (s.dtype != DType::f32) {
    dq_run_ = reuse_as(qkv_, s.dtype, {s.B, T_, s.H, s.d});
    dk_run_ = reuse_as(qkv_, s.dtype, {s.B, T_, s.G, s.d}, dq_run_.bytes());
    dv_run_ = reuse_as(qkv_, s.dtype, {s.B, T_, s.G, s.d}, dq_run_.bytes() + dk_run_.bytes());
  }
  core_setup();
}

void SeqShardedLayer::forward() {
  const LayerShape& s = env_.shape;
  const int64_t BT = s.B * T_, Hd = int64_t(s.H) * s.d, Cq = s.qkv_cols();
  Backend& b = be();
  b.rmsnorm_fwd(x_.reshape({BT, s.D}), norm_w_, s.eps, xn_, rstd_);
  b.gemm(false, false, BT, Cq, s.D, 1.0f, xn_, s.D, w_qkv_, Cq, 0.0f, qkv_, Cq);
  rope_and_split_qkv(b, qkv_layout(), s.rope, pos_, s.rope_theta, qkv_, q_, k_, v_);
  core_forward();
  Tensor y2 = y_.reshape({BT, s.D});
  b.gemm(false, false, BT, s.D, Hd, 1.0f, o_, Hd, w_o_, s.D, 0.0f, y2, s.D);
  b.add(y_, y_, x_);
}

void SeqShardedLayer::backward() {
  const LayerShape& s = env_.shape;
  const int64_t BT = s.B * T_, Hd = int64_t(s.H) * s.d, Cq = s.qkv_cols();
  Backend& b = be();
  // through the output projection
  b.gemm(false, true, BT, Hd, s.D, 1.0f, dy_, s.D, w_o_, s.D, 0.0f, do_, Hd);
  b.gemm(true, false, Hd, s.D, BT, 1.0f, o_, Hd, dy_, s.D, 0.0f, dw_o_, s.D);
  core_backward();
  // dq, dk, dv -> dqkv (run dtype), then un-rotate
  merge_and_unrope_dqkv(b, qkv_layout(), s.rope, pos_, s.rope_theta, in_dtype(b, s.dtype, dq_, dq_run_),
                        in_dtype(b, s.dtype, dk_, dk_run_), in_dtype(b, s.dtype, dv_, dv_run_), dqkv_);
  // through the QKV projection and the norm
  b.gemm(false, true, BT, s.D, Cq, 1.0f, dqkv_, Cq, w_qkv_, Cq, 0.0f, dxn_, s.D);
  b.gemm(true, false, s.D, Cq, BT, 1.0f, xn_, s.D, dqkv_, Cq, 0.0f, dw_qkv_, Cq);
  b.fill(dnorm_w_, 0.0f);
  Tensor dx2 = dx_.reshape({BT, s.D});
  b.rmsnorm_bwd(x_.reshape({BT, s.D}), norm_w_, rstd_, dxn_, dx2, dnorm_w_);
  b.add(dx_, dx_, dy_);
}

void SeqShardedLayer::teardown() {
  core_teardown();
  for (Tensor* t : {&x_, &norm_w_, &w_qkv_, &w_o_, &dy_, &xn_, &rstd_, &qkv_, &q_, &k_, &v_, &o_,
                    &y_, &do_, &dq_, &dk_, &dv_, &dqkv_, &dxn_, &dx_, &dnorm_w_, &dw_qkv_, &dw_o_,
                    &dq_run_, &dk_run_, &dv_run_})
    *t = Tensor{};
}

void SeqShardedLayer::export_tensor(const std::string& name, std::vector<float>& global) {
  const LayerShape& s = env_.shape;
  const bool root = env_.world->rank() == 0;
  if (replicated() && !root) return;
  auto tokens = [&](const Tensor& t, int64_t C) {
    add_token_rows(global, be().download(t), s.B, s.N, C, pos_, 0, C);
  };
  auto whole = [&](const Tensor& t, bool only_root) {
    if (only_root && !root) return;
    std::vector<float> h = be().download(t);
    for (size_t i = 0; i < h.size(); ++i) global[i] += h[i];
  };
  const int64_t Hd = int64_t(s.H) * s.d, Gd = int64_t(s.G) * s.d;
  if (name == "x") tokens(x_, s.D);
  else if (name == "dy") tokens(dy_, s.D);
  else if (name == "y") tokens(y_, s.D);
  else if (name == "dx") tokens(dx_, s.D);
  else if (name == "norm_w") whole(norm_w_, true);
  else if (name == "w_qkv") whole(w_qkv_, true);
  else if (name == "w_o") whole(w_o_, true);
  else if (name == "dnorm_w") whole(dnorm_w_, false);
  else if (name == "dw_qkv") whole(dw_qkv_, false);
  else if (name == "dw_o") whole(dw_o_, false);
  else if (name == "q") tokens(q_, Hd);
  else if (name == "k") tokens(k_, Gd);
  else if (name == "v") tokens(v_, Gd);
  else if (name == "o") tokens(o_, Hd);
  else if (name == "do") tokens(do_, Hd);
  else if (name == "dq") tokens(dq_, Hd);
  else if (name == "dk") tokens(dk_, Gd);
  else if (name == "dv") tokens(dv_, Gd);
  else if (name == "lse") export_lse(global);
  else throw std::invalid_argument("export_tensor: unknown tensor '" + name + "'");
}

int64_t SeqShardedLayer::activation_bytes_estimate(const LayerShape& s, int P, const MeshSpec& m) const {
  // Token-local tensors kept across the layer, per rank: x, dy, xn, qkv, q, k, v, o, y, do,
  // dqkv, dxn, dx (run dtype) and rstd, dq, dk, dv (float32).
  const int64_t T = s.N / P, BT = s.B * T, es = int64_t(dtype_size(s.dtype));
  const int64_t Hd = int64_t(s.H) * s.d, Gd = int64_t(s.G) * s.d, Cq = s.qkv_cols();
  const int64_t run = BT * (6 * s.D + 2 * Cq + 3 * Hd + 2 * Gd) * es;
  const int64_t f32 = BT * (1 + Hd + 2 * Gd) * 4;
  return run + f32 + core_activation_bytes(s, P, m);
}

}  // namespace cpbench
