#include "bench/block/mla.h"

#include <string>

#include "bench/block/qkv.h"
#include "bench/inputs.h"

namespace cpbench {

namespace {
// The projections' weights: registry name (and dump name; its gradient is "d" + name), seed id,
// rows (the seeded law's fan-in), global columns, and for an up-projection the columns per head
// (its columns are split by heads under a tp level; 0: replicated).
struct MlaWeight {
  const char* name;
  InputId id;
  int64_t rows, cols;
  int64_t per_head = 0;
};
std::vector<MlaWeight> mla_weights(const LayerShape& s) {
  const MlaDims& m = s.mla_dims;
  const int64_t H = s.H, qin = m.q_rank > 0 ? m.q_rank : s.D;
  std::vector<MlaWeight> w;
  if (m.q_rank > 0) {
    w.push_back({"w_dq", InputId::w_dq, s.D, m.q_rank});
    w.push_back({"q_norm_w", InputId::q_norm_w, 1, m.q_rank});
  }
  w.push_back({"w_uq", InputId::w_uq, qin, H * m.d_nope, m.d_nope});
  w.push_back({"w_qr", InputId::w_qr, qin, H * m.d_rope, m.d_rope});
  w.push_back({"w_dkv", InputId::w_dkv, s.D, m.kv_rank});
  w.push_back({"kv_norm_w", InputId::kv_norm_w, 1, m.kv_rank});
  w.push_back({"w_kr", InputId::w_kr, s.D, m.d_rope});
  w.push_back({"w_uk", InputId::w_uk, m.kv_rank, H * m.d_nope, m.d_nope});
  w.push_back({"w_uv", InputId::w_uv, m.kv_rank, H * m.d_v, m.d_v});
  return w;
}

// k [rows, heads, dn + dr] = [k_C | k_R] per head, from k_C [rows, heads*dn] and the one rope key
// k_R of each row (dr values, row pitch `kr_pitch`), repeated for every head.
void assemble_keys(Backend& be, const Tensor& kn, const Tensor& kr, int64_t kr_pitch, int64_t rows, int64_t heads,
                   int64_t dn, int64_t dr, Tensor& k) {
  const int64_t dqk = dn + dr;
  be.copy_2d(k, dqk, kn, dn, rows * heads, dn);
  for (int64_t h = 0; h < heads; ++h) {
    Tensor k_rope = k.view(h * dqk + dn, {k.numel() - h * dqk - dn});
    be.copy_2d(k_rope, heads * dqk, kr, kr_pitch, rows, dr);
  }
}

// The mirror: dk [rows, heads, dn + dr] (float32) -> dk_C [rows*heads, dn] and the shared rope
// key's gradient dk_R [rows, dr], summed over the heads in head order (`head`: [rows, dr] scratch).
void split_key_grads(Backend& be, const Tensor& dk, int64_t rows, int64_t heads, int64_t dn, int64_t dr, Tensor& dkn,
                     Tensor& dkr, Tensor& head) {
  const int64_t dqk = dn + dr;
  be.copy_2d(dkn, dn, dk, dqk, rows * heads, dn);
  be.copy_2d(dkr, dr, dk.view(dn, {dk.numel() - dn}), heads * dqk, rows, dr);
  for (int64_t h = 1; h < heads; ++h) {
    be.copy_2d(head, dr, dk.view(h * dqk + dn, {dk.numel() - h * dqk - dn}), heads * dqk, rows, dr);
    be.add(dkr, dkr, head);
  }
}
}  // namespace

std::vector<std::string> MlaProjections::weight_names(const MlaDims& m) {
  LayerShape s;  // the names depend on the query rank alone
  s.mla_dims = m;
  std::vector<std::string> names;
  for (const MlaWeight& w : mla_weights(s)) names.push_back(w.name);
  return names;
}

std::vector<int64_t> MlaProjections::weight_shape(const std::string& name, const LayerShape& s) {
  for (const MlaWeight& w : mla_weights(s))
    if (name == w.name || name == std::string("d") + w.name)
      return w.rows > 1 ? std::vector<int64_t>{w.rows, w.cols} : std::vector<int64_t>{w.cols};
  return {};
}

double MlaProjections::forward_gemm_flops(const LayerShape& s, int64_t rows) {
  double f = 0;
  for (const MlaWeight& w : mla_weights(s))
    if (w.rows > 1) f += gemm_flops(rows, w.cols, w.rows);  // the norms' weights are no GEMM
  return f;
}

int64_t MlaProjections::activation_bytes(const LayerShape& s, int64_t rows, int64_t heads, int64_t latent_rows) {
  // setup's buffers, per token row (es: the run dtype's bytes; 16-bit runs add run-dtype copies).
  const MlaDims& m = s.mla_dims;
  const int64_t es = int64_t(dtype_size(s.dtype)), H = heads, dn = m.d_nope, dr = m.d_rope;
  const int64_t L = m.q_rank > m.kv_rank ? m.q_rank : m.kv_rank;  // the widest latent
  const int64_t kept = (m.q_rank > 0 ? 2 * m.q_rank * es + 4 : 0) + 2 * m.kv_rank * es + 4;
  const int64_t fwd = (2 * H * dn + H * dr + dr) * es;                      // q_C, q_R, k_C, k_R
  const int64_t bwd = (2 * H * dn + H * dr + 2 * dr) * 4 + L * (4 + 2 * es);  // split gradients, latents'
  const int64_t lowp = s.dtype == DType::f32 ? 0 : (2 * H * dn + H * dr + dr + H * m.d_v) * es + s.D * 4;
  // Latent travel: the packed latent and its gradient, and contract()'s dk_R sum over the rows of
  // `latent_rows` (the rows a level contracts: a Ulysses member's group's).
  const int64_t lrows = latent_rows > 0 ? latent_rows : rows;
  const int64_t latent = s.mla_latent ? rows * (m.kv_rank + dr) * (es + 4) + lrows * dr * 8 : 0;
  return rows * (kept + fwd + bwd + lowp) + latent;
}

void MlaProjections::setup(TensorRegistry& reg, Backend& be, uint64_t seed, const LayerShape& s, int64_t B, int64_t T,
                           Tp tp, int64_t latent_rows) {
  reg_ = &reg;
  s_ = s;
  B_ = B;
  T_ = T;
  const MlaDims& m = s.mla_dims;
  qin_ = m.q_rank > 0 ? m.q_rank : s.D;
  hl_ = s.H / tp.t;
  down_share_ = 1.0 / tp.t;
  latent_ = s.mla_latent;
  latent_rows_ = latent_rows > 0 ? latent_rows : B * T;
  const int64_t rows = B * T, H = hl_;
  for (const MlaWeight& w : mla_weights(s)) {
    // An up-projection: this rank's heads' columns [tr*hl, (tr+1)*hl) of per_head each, added to
    // the dump by its holder in the first TP group; a replicated weight whole, by the world's rank 0.
    const int64_t cols = w.per_head > 0 ? hl_ * w.per_head : w.cols, col0 = w.per_head > 0 ? tp.tr * cols : 0;
    ExportRule rule = ExportRule::slice(0, tp.first_group && tp.tr == 0), grad = ExportRule::slice(0);
    if (w.per_head > 0) {
      rule.this_rank = true;  // the column block says who adds it
      rule.how = ExportRule::How::columns;
      rule.rows = w.rows;
      rule.local_cols = cols;
      rule.global_cols = w.cols;
      rule.blocks = {{col0, 0, cols, tp.first_group}};
      grad = rule;
      grad.blocks[0].this_rank = true;  // gradients: partial sums from every holder
    }
    Tensor& t = reg.add(w.name, w.rows > 1 ? std::vector<int64_t>{w.rows, cols} : std::vector<int64_t>{cols}, s.dtype,
                        Held::weight, w.name, rule);
    upload_seeded(be, [&] { return input_matrix_block(seed, w.id, w.cols, 0, w.rows, col0, cols, input_law(w.id, s.D, 0, 0, w.rows)); },
                  t);
    reg.add(std::string("d") + w.name, t.shape, DType::f32, Held::grad, std::string("d") + w.name, grad);
  }
  const DType dt = s.dtype;
  const bool lowp = dt != DType::f32;
  // Kept for the backward: the latents before and after their norms, and the norms' rstd.
  if (m.q_rank > 0) {
    reg.add("mla_cq0", {rows, m.q_rank}, dt, Held::activation);
    reg.add("mla_cq", {rows, m.q_rank}, dt, Held::activation);
    reg.add("mla_rstd_q", {rows}, DType::f32, Held::activation);
  }
  reg.add("mla_ckv0", {rows, m.kv_rank}, dt, Held::activation);
  reg.add("mla_ckv", {rows, m.kv_rank}, dt, Held::activation);
  reg.add("mla_rstd_kv", {rows}, DType::f32, Held::activation);
  // Forward scratch: the heads' no-rope and rope parts before they are interleaved into q and k.
  reg.add("mla_qn", {rows, H * m.d_nope}, dt, Held::activation);
  reg.add("mla_qr", {rows, H * m.d_rope}, dt, Held::activation);
  reg.add("mla_kn", {rows, H * m.d_nope}, dt, Held::activation);
  reg.add("mla_kr", {rows, m.d_rope}, dt, Held::activation);
  // Backward scratch: the gradients split out of the core's float32 dq, dk (and, in a 16-bit run,
  // their run-dtype copies for the GEMMs), the latents' gradients, dxn's float32 sum.
  reg.add("mla_dqn32", {rows * H, m.d_nope}, DType::f32, Held::activation);
  reg.add("mla_dqr32", {rows * H, m.d_rope}, DType::f32, Held::activation);
  reg.add("mla_dkn32", {rows * H, m.d_nope}, DType::f32, Held::activation);
  reg.add("mla_dkr32", {rows, m.d_rope}, DType::f32, Held::activation);
  reg.add("mla_dkr_head", {rows, m.d_rope}, DType::f32, Held::activation);
  if (lowp) {
    reg.add("mla_dqn", {rows * H, m.d_nope}, dt, Held::activation);
    reg.add("mla_dqr", {rows * H, m.d_rope}, dt, Held::activation);
    reg.add("mla_dkn", {rows * H, m.d_nope}, dt, Held::activation);
    reg.add("mla_dkr", {rows, m.d_rope}, dt, Held::activation);
    reg.add("mla_dv", {rows, H * m.d_v}, dt, Held::activation);
    reg.add("mla_dx32", {rows, s.D}, DType::f32, Held::activation);
  }
  if (latent_) {  // latent travel: this rank's [c_kv | k_R] as it travels, and its gradient from the ring
    reg.add("mla_latent", {rows, m.kv_rank + m.d_rope}, dt, Held::activation);
    reg.add("mla_dlatent_kv", {rows, m.kv_rank + m.d_rope}, DType::f32, Held::activation);
    // contract()'s dk_R sum over the rows a level contracts (a Ulysses member's: its group's)
    reg.add("mla_lat_dkr32", {latent_rows_, m.d_rope}, DType::f32, Held::activation);
    reg.add("mla_lat_dkr_head", {latent_rows_, m.d_rope}, DType::f32, Held::activation);
  }
  reg.add("mla_dlatent32", {rows, m.q_rank > m.kv_rank ? m.q_rank : m.kv_rank}, DType::f32, Held::activation);
  reg.add("mla_dlatent", {rows, m.q_rank > m.kv_rank ? m.q_rank : m.kv_rank}, dt, Held::activation);
  reg.add("mla_dlatent0", {rows, m.q_rank > m.kv_rank ? m.q_rank : m.kv_rank}, dt, Held::activation);
}

void MlaProjections::forward(Backend& be, const Tensor& xn, const Positions& pos, Tensor& q, Tensor& k, Tensor& v) {
  TensorRegistry& reg = *reg_;
  const LayerShape& s = s_;
  const MlaDims& m = s.mla_dims;
  const int64_t rows = B_ * T_, H = hl_, dn = m.d_nope, dr = m.d_rope, dqk = dn + dr;
  const double rs = down_share_;  // the replicated down-projections' model share (1/t)
  // The query's input: the normed latent c_q, or xn itself without a query rank.
  const Tensor* qin = &xn;
  if (m.q_rank > 0) {
    Tensor &cq0 = reg["mla_cq0"], &cq = reg["mla_cq"];
    be.gemm(false, false, rows, m.q_rank, s.D, 1.0f, xn, s.D, reg["w_dq"], m.q_rank, 0.0f, cq0, m.q_rank, rs);
    be.rmsnorm_fwd(cq0, reg["q_norm_w"], s.eps, cq, reg["mla_rstd_q"]);
    qin = &cq;
  }
  Tensor &qn = reg["mla_qn"], &qr = reg["mla_qr"], &kn = reg["mla_kn"], &kr = reg["mla_kr"];
  Tensor &ckv0 = reg["mla_ckv0"], &ckv = reg["mla_ckv"];
  be.gemm(false, false, rows, H * dn, qin_, 1.0f, *qin, qin_, reg["w_uq"], H * dn, 0.0f, qn, H * dn);
  be.gemm(false, false, rows, H * dr, qin_, 1.0f, *qin, qin_, reg["w_qr"], H * dr, 0.0f, qr, H * dr);
  be.gemm(false, false, rows, m.kv_rank, s.D, 1.0f, xn, s.D, reg["w_dkv"], m.kv_rank, 0.0f, ckv0, m.kv_rank, rs);
  be.rmsnorm_fwd(ckv0, reg["kv_norm_w"], s.eps, ckv, reg["mla_rstd_kv"]);
  be.gemm(false, false, rows, dr, s.D, 1.0f, xn, s.D, reg["w_kr"], dr, 0.0f, kr, dr, rs);
  if (s.rope) {  // the decoupled rope parts only: H query heads, the one shared key
    be.rope(qr, B_, T_, int(H), int(dr), H * dr, pos, s.rope_theta, false, s.mask.docs);
    be.rope(kr, B_, T_, 1, int(dr), dr, pos, s.rope_theta, false, s.mask.docs);
  }
  // Interleave per head: q = [q_C | q_R].
  be.copy_2d(q, dqk, qn, dn, rows * H, dn);
  Tensor q_rope = q.view(dn, {q.numel() - dn});
  be.copy_2d(q_rope, dqk, qr, dr, rows * H, dr);
  if (latent_) {  // latent travel: [c_kv | k_R] per token; the levels expand k, v (latent_keys.h)
    Tensor& lat = reg["mla_latent"];
    const int64_t w = width();
    be.copy_2d(lat, w, ckv, m.kv_rank, rows, m.kv_rank);
    Tensor lat_rope = lat.view(m.kv_rank, {lat.numel() - m.kv_rank});
    be.copy_2d(lat_rope, w, kr, dr, rows, dr);
    return;
  }
  be.gemm(false, false, rows, H * dn, m.kv_rank, 1.0f, ckv, m.kv_rank, reg["w_uk"], H * dn, 0.0f, kn, H * dn);
  be.gemm(false, false, rows, H * m.d_v, m.kv_rank, 1.0f, ckv, m.kv_rank, reg["w_uv"], H * m.d_v, 0.0f, v, H * m.d_v);
  assemble_keys(be, kn, kr, dr, rows, H, dn, dr, k);
}

const Tensor& MlaProjections::local() const { return (*reg_)["mla_latent"]; }
Tensor& MlaProjections::grad() { return (*reg_)["mla_dlatent_kv"]; }

void MlaProjections::begin_backward(Backend& be) {
  be.fill((*reg_)["dw_uk"], 0.0f);
  be.fill((*reg_)["dw_uv"], 0.0f);
}

// Keys and values of heads [h0, h0 + nh) from `rows` tokens' latent: forward()'s GEMMs on those
// heads' columns of W_UK, W_UV, k_R repeated for every head. (Scratch: forward()'s k_C buffer,
// free while the core runs; rows x nh never exceeds the projections' rows x heads.)
void MlaProjections::expand(Backend& be, const Tensor& lat, int64_t rows, int h0, int nh, Tensor& k, Tensor& v,
                            double share) {
  TensorRegistry& reg = *reg_;
  const MlaDims& m = s_.mla_dims;
  const int64_t H = hl_, dn = m.d_nope, dr = m.d_rope, rkv = m.kv_rank, w = width(), dv = m.d_v;
  check_slice(rows, h0, nh);
  Tensor& kn = reg["mla_kn"];
  const Tensor w_uk = reg["w_uk"].view(h0 * dn, {H * dn * rkv - h0 * dn});
  const Tensor w_uv = reg["w_uv"].view(h0 * dv, {H * dv * rkv - h0 * dv});
  be.gemm(false, false, rows, nh * dn, rkv, 1.0f, lat, w, w_uk, H * dn, 0.0f, kn, nh * dn, share);
  be.gemm(false, false, rows, nh * dv, rkv, 1.0f, lat, w, w_uv, H * dv, 0.0f, v, nh * dv, share);
  assemble_keys(be, kn, lat.view(rkv, {lat.numel() - rkv}), w, rows, nh, dn, dr, k);
}

// Those heads' dk, dv back to the latent: dk_R summed over them (in head order, as backward()
// sums the expanded heads), dc_kv through their columns of W_UK and W_UV, and those columns'
// weight gradients. (Scratch: backward()'s split buffers, free while the core runs.)
void MlaProjections::contract(Backend& be, const Tensor& lat, int64_t rows, int h0, int nh, const Tensor& dk,
                              const Tensor& dv, Tensor& dlat, double share) {
  TensorRegistry& reg = *reg_;
  const MlaDims& m = s_.mla_dims;
  const bool lowp = s_.dtype != DType::f32;
  const int64_t H = hl_, dn = m.d_nope, dr = m.d_rope, rkv = m.kv_rank, w = width(), dvw = m.d_v;
  check_slice(rows, h0, nh);
  Tensor dkn32 = reg["mla_dkn32"];
  Tensor dkr32 = reg["mla_lat_dkr32"].view(0, {rows, dr}), head = reg["mla_lat_dkr_head"].view(0, {rows, dr});
  split_key_grads(be, dk, rows, nh, dn, dr, dkn32, dkr32, head);
  Tensor dlat_rope = dlat.view(rkv, {dlat.numel() - rkv});
  be.copy_2d(dlat_rope, w, dkr32, dr, rows, dr);
  Tensor dkn = dkn32, dv_run = dv;  // the GEMMs' inputs in the run dtype
  if (lowp) {
    dkn = reg["mla_dkn"].view(0, {rows * nh * dn});
    dv_run = reg["mla_dv"].view(0, {rows * nh * dvw});
    be.convert(dkn, dkn32.view(0, {rows * nh * dn}));
    be.convert(dv_run, dv);
  }
  const Tensor w_uk = reg["w_uk"].view(h0 * dn, {H * dn * rkv - h0 * dn});
  const Tensor w_uv = reg["w_uv"].view(h0 * dvw, {H * dvw * rkv - h0 * dvw});
  Tensor dw_uk = reg["dw_uk"].view(h0 * dn, {H * dn * rkv - h0 * dn});
  Tensor dw_uv = reg["dw_uv"].view(h0 * dvw, {H * dvw * rkv - h0 * dvw});
  be.gemm(false, true, rows, rkv, nh * dn, 1.0f, dkn, nh * dn, w_uk, H * dn, 0.0f, dlat, w, share);
  be.gemm(false, true, rows, rkv, nh * dvw, 1.0f, dv_run, nh * dvw, w_uv, H * dvw, 1.0f, dlat, w, share);
  be.gemm(true, false, rkv, nh * dn, rows, 1.0f, lat, w, dkn, nh * dn, 1.0f, dw_uk, H * dn, share);
  be.gemm(true, false, rkv, nh * dvw, rows, 1.0f, lat, w, dv_run, nh * dvw, 1.0f, dw_uv, H * dvw, share);
}

void MlaProjections::check_slice(int64_t rows, int h0, int nh) const {
  if (!latent_ || h0 < 0 || nh < 1 || h0 + nh > hl_ || rows * nh > B_ * T_ * hl_ || rows > latent_rows_)
    throw std::logic_error("mla: a latent slice of " + std::to_string(rows) + " rows, heads [" + std::to_string(h0) +
                           ", +" + std::to_string(nh) + ") exceeds the projections' buffers");
}

void MlaProjections::backward(Backend& be, const Tensor& xn, const Positions& pos, const Tensor& dq, const Tensor& dk,
                              const Tensor& dv, Tensor& dxn) {
  TensorRegistry& reg = *reg_;
  const LayerShape& s = s_;
  const MlaDims& m = s.mla_dims;
  const DType dt = s.dtype;
  const bool lowp = dt != DType::f32;
  const int64_t rows = B_ * T_, H = hl_, dn = m.d_nope, dr = m.d_rope, dqk = dn + dr, rkv = m.kv_rank;
  const double rs = down_share_;  // the replicated weights' GEMMs: 1/t model FLOPs (see the header)
  // Split the core's float32 gradients by part: the no-rope and rope columns of every head; the
  // shared key's rope gradient summed over the heads in head order (float32).
  Tensor &dqn32 = reg["mla_dqn32"], &dqr32 = reg["mla_dqr32"], &dkn32 = reg["mla_dkn32"], &dkr32 = reg["mla_dkr32"];
  be.copy_2d(dqn32, dn, dq, dqk, rows * H, dn);
  be.copy_2d(dqr32, dr, dq.view(dn, {dq.numel() - dn}), dqk, rows * H, dr);
  if (latent_) {  // the ring left the latent's gradient: dk_R is its rope columns (summed over heads already)
    const Tensor& dlat = grad();
    be.copy_2d(dkr32, dr, dlat.view(rkv, {dlat.numel() - rkv}), width(), rows, dr);
  } else {
    split_key_grads(be, dk, rows, H, dn, dr, dkn32, dkr32, reg["mla_dkr_head"]);
  }
  // In the run dtype for the GEMMs (float32 runs: the float32 tensors themselves).
  auto run = [&](Tensor& f32, const char* name) -> Tensor& {
    if (!lowp) return f32;
    Tensor& r = reg[name];
    be.convert(r, f32);
    return r;
  };
  Tensor &dqn = run(dqn32, "mla_dqn"), &dqr = run(dqr32, "mla_dqr"), &dkr = run(dkr32, "mla_dkr");
  Tensor& dkn = latent_ ? dkn32 : run(dkn32, "mla_dkn");  // (latent travel: not read)
  Tensor dv_run = lowp && !latent_ ? reg["mla_dv"] : dv;
  if (lowp && !latent_) be.convert(dv_run, dv);
  if (s.rope) {  // the transposed rotation (RoPE's backward) on the rope parts
    be.rope(dqr, B_, T_, int(H), int(dr), H * dr, pos, s.rope_theta, true, s.mask.docs);
    be.rope(dkr, B_, T_, 1, int(dr), dr, pos, s.rope_theta, true, s.mask.docs);
  }
  const Tensor& qin = m.q_rank > 0 ? reg["mla_cq"] : xn;
  const Tensor& ckv = reg["mla_ckv"];
  // Weight gradients of the up-projections and of W_KR.
  be.gemm(true, false, qin_, H * dn, rows, 1.0f, qin, qin_, dqn, H * dn, 0.0f, reg["dw_uq"], H * dn);
  be.gemm(true, false, qin_, H * dr, rows, 1.0f, qin, qin_, dqr, H * dr, 0.0f, reg["dw_qr"], H * dr);
  if (!latent_) {  // (latent travel: the ring's contractions added them, block by block)
    be.gemm(true, false, rkv, H * dn, rows, 1.0f, ckv, rkv, dkn, H * dn, 0.0f, reg["dw_uk"], H * dn);
    be.gemm(true, false, rkv, H * m.d_v, rows, 1.0f, ckv, rkv, dv_run, H * m.d_v, 0.0f, reg["dw_uv"], H * m.d_v);
  }
  be.gemm(true, false, s.D, dr, rows, 1.0f, xn, s.D, dkr, dr, 0.0f, reg["dw_kr"], dr, rs);
  // dxn's float32 sum (float32 runs: dxn itself), starting with the shared rope key's path.
  Tensor& dx = lowp ? reg["mla_dx32"] : dxn;
  be.gemm(false, true, rows, s.D, dr, 1.0f, dkr, dr, reg["w_kr"], dr, 0.0f, dx, s.D, rs);
  // Through a latent's norm and down-projection: d(latent) = sum of its up-projections'
  // gradients (float32), then rmsnorm's backward, the down-projection's weight gradient and its
  // share of dxn. `width`: the latent's rank.
  auto latent = [&](int64_t width, const char* norm_w, const char* dnorm_w, const char* latent0, const char* rstd,
                    const char* w_down, const char* dw_down, auto&& up_grads) {
    Tensor d32 = reg["mla_dlatent32"].view(0, {rows, width});
    Tensor dl = reg["mla_dlatent"].view(0, {rows, width});
    Tensor dl0 = reg["mla_dlatent0"].view(0, {rows, width});
    up_grads(d32);
    be.convert(dl, d32);
    Tensor& dnw = reg[dnorm_w];
    be.fill(dnw, 0.0f);
    be.rmsnorm_bwd(reg[latent0], reg[norm_w], reg[rstd], dl, dl0, dnw);
    be.gemm(true, false, s.D, width, rows, 1.0f, xn, s.D, dl0, width, 0.0f, reg[dw_down], width, rs);
    be.gemm(false, true, rows, s.D, width, 1.0f, dl0, width, reg[w_down], width, 1.0f, dx, s.D, rs);
  };
  latent(rkv, "kv_norm_w", "dkv_norm_w", "mla_ckv0", "mla_rstd_kv", "w_dkv", "dw_dkv", [&](Tensor& d32) {
    if (latent_) {  // the ring's sum over every rank's contraction
      be.copy_2d(d32, rkv, grad(), width(), rows, rkv);
      return;
    }
    be.gemm(false, true, rows, rkv, H * dn, 1.0f, dkn, H * dn, reg["w_uk"], H * dn, 0.0f, d32, rkv);
    be.gemm(false, true, rows, rkv, H * m.d_v, 1.0f, dv_run, H * m.d_v, reg["w_uv"], H * m.d_v, 1.0f, d32, rkv);
  });
  auto query_grads = [&](Tensor& c, float beta) {  // dq_C·W_UQ^T + dq_R·W_QR^T into c
    be.gemm(false, true, rows, qin_, H * dn, 1.0f, dqn, H * dn, reg["w_uq"], H * dn, beta, c, qin_);
    be.gemm(false, true, rows, qin_, H * dr, 1.0f, dqr, H * dr, reg["w_qr"], H * dr, 1.0f, c, qin_);
  };
  if (m.q_rank > 0)
    latent(m.q_rank, "q_norm_w", "dq_norm_w", "mla_cq0", "mla_rstd_q", "w_dq", "dw_dq",
           [&](Tensor& d32) { query_grads(d32, 0.0f); });
  else
    query_grads(dx, 1.0f);  // no query rank: the query projections read xn itself
  if (lowp) be.convert(dxn, dx);
}

}  // namespace cpbench
