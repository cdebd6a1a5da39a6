// The Backend entry points: one place for what every backend does around an operation (argument
// checks, the replay gate, FLOP counting, the compute log), so a backend implements only do_*.
#include <stdexcept>
#include <string>

#include "kernels/backend.h"

namespace cpbench {

void Backend::check_dtypes(const char*, std::initializer_list<const Tensor*>) const {}
void Backend::check_attn_support(const char*, const AttnShape&, DType) const {}

int Backend::op_begin(const char* name) {
  open_op_ = ComputeRecord{name, phase_, now_ms(), 0.0};
  return 0;
}

void Backend::op_end(int) {
  open_op_.t1_ms = now_ms();
  compute_log_.push_back(open_op_);
}

// ---- layout: run in replay mode too, and are logged (the stream is busy with them) ------------
void Backend::fill(Tensor& t, float value) {
  check_dtypes("fill", {&t});
  const int op = op_begin("fill");
  do_fill(t, value);
  op_end(op);
}

void Backend::copy_2d(Tensor& dst, int64_t dst_pitch, const Tensor& src, int64_t src_pitch,
                      int64_t rows, int64_t cols) {
  check_copy_2d(dst, dst_pitch, src, src_pitch, rows, cols);
  check_dtypes("copy_2d", {&dst, &src});
  if (rows == 0 || cols == 0) return;
  const int op = op_begin("copy_2d");
  do_copy_2d(dst, dst_pitch, src, src_pitch, rows, cols);
  op_end(op);
}

void Backend::convert(Tensor& dst, const Tensor& src) {
  check_same_numel("convert", dst, src);
  check_dtypes("convert", {&dst, &src});
  const int op = op_begin("convert");
  do_convert(dst, src);
  op_end(op);
}

// ---- compute: no-ops in replay mode -------------------------------------------------------------
void Backend::add(Tensor& out, const Tensor& a, const Tensor& b) {
  check_same_numel("add", out, a);
  check_same_numel("add", out, b);
  check_dtypes("add", {&out, &a, &b});
  if (!compute_enabled_) return;
  const int op = op_begin("add");
  do_add(out, a, b);
  op_end(op);
}

void Backend::quantize_fp8(Tensor& t, Fp8Scaling scaling) {
  if (t.dtype != DType::bf16)  // (fp16's range does not hold every scaled e4m3 value)
    throw std::invalid_argument(std::string("quantize_fp8: fp8 values are kept in a bf16 tensor (got ") +
                                dtype_name(t.dtype) + ")");
  const int64_t inner = t.shape.empty() ? 0 : t.shape.back();
  if (scaling == Fp8Scaling::block && inner % kMxBlock != 0)
    throw std::invalid_argument("quantize_fp8: block scaling takes blocks of " + std::to_string(kMxBlock) +
                                " elements of the innermost dimension, which must be a multiple of it (got " +
                                std::to_string(inner) + ")");
  if (!compute_enabled_) return;
  const int op = op_begin("quantize_fp8");
  do_quantize_fp8(t, scaling);
  op_end(op);
}

void Backend::do_quantize_fp8(Tensor&, Fp8Scaling) {
  throw std::invalid_argument("backend '" + name() + "' does not emulate fp8 (--dtype fp8 runs on --backend cpu)");
}

namespace {
void check_fp8_codec(const char* op, const Tensor& values, const Tensor& bytes, Fp8Scaling scaling) {
  if (values.dtype == DType::u8 || bytes.dtype != DType::u8)
    throw std::invalid_argument(std::string(op) + ": values (fp32/bf16/fp16) and their encoding (u8), got " +
                                dtype_name(values.dtype) + " and " + dtype_name(bytes.dtype));
  if (bytes.numel() != e4m3_encoded_bytes(values.numel(), scaling))
    throw std::invalid_argument(std::string(op) + ": " + std::to_string(values.numel()) + " values encode to " +
                                std::to_string(e4m3_encoded_bytes(values.numel(), scaling)) + " bytes, the buffer has " +
                                std::to_string(bytes.numel()));
}
}  // namespace

void Backend::encode_fp8(const Tensor& src, Tensor& dst, Fp8Scaling scaling) {
  check_fp8_codec("encode_fp8", src, dst, scaling);
  const int op = op_begin("encode_fp8");
  do_encode_fp8(src, dst, scaling);
  op_end(op);
}

void Backend::decode_fp8(const Tensor& src, Tensor& dst, Fp8Scaling scaling) {
  check_fp8_codec("decode_fp8", dst, src, scaling);
  const int op = op_begin("decode_fp8");
  do_decode_fp8(src, dst, scaling);
  op_end(op);
}

void Backend::do_encode_fp8(const Tensor&, Tensor&, Fp8Scaling) {
  throw std::invalid_argument("backend '" + name() + "' has no fp8 codec (--comm-dtype fp8 runs on --backend cpu or sim)");
}
void Backend::do_decode_fp8(const Tensor&, Tensor&, Fp8Scaling) {
  throw std::invalid_argument("backend '" + name() + "' has no fp8 codec (--comm-dtype fp8 runs on --backend cpu or sim)");
}

void Backend::gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const Tensor& A, int64_t lda, const Tensor& B, int64_t ldb, float beta,
                   Tensor& C, int64_t ldc, double model_share) {
  check_gemm(trans_a, trans_b, m, n, k, A, lda, B, ldb, C, ldc);
  check_dtypes("gemm", {&A, &B, &C});
  if (!(model_share >= 0 && model_share <= 1))
    throw std::invalid_argument("gemm: model_share=" + std::to_string(model_share) + " is not in [0, 1]");
  if (!compute_enabled_) return;
  count_gemm(m, n, k, model_share);
  if (m == 0 || n == 0) return;
  const int op = op_begin("gemm");
  do_gemm(trans_a, trans_b, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
  op_end(op);
}

namespace {
Tensor entry(const Tensor& t, int64_t off) { return t.view(off, {t.numel() - off}); }  // from off to the end
}  // namespace

void Backend::gemm_batched(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const Tensor& A,
                           int64_t lda, int64_t sa, const Tensor& B, int64_t ldb, int64_t sb, float beta, Tensor& C,
                           int64_t ldc, int64_t sc, int64_t batch, double model_share) {
  if (batch < 1 || sa < 0 || sb < 0 || sc < 0)
    throw std::invalid_argument("gemm_batched: batch=" + std::to_string(batch) + " must be >= 1 and the strides " +
                                std::to_string(sa) + ", " + std::to_string(sb) + ", " + std::to_string(sc) + " >= 0");
  // The last entry bounds the others (strides >= 0): each of its operands must fit from its offset.
  const int64_t last = batch - 1;
  if (last * sa > A.numel() || last * sb > B.numel() || last * sc > C.numel())
    throw std::invalid_argument("gemm_batched: entry " + std::to_string(last) + " starts past a tensor's end");
  Tensor c_last = entry(C, last * sc);
  check_gemm(trans_a, trans_b, m, n, k, entry(A, last * sa), lda, entry(B, last * sb), ldb, c_last, ldc);
  check_gemm(trans_a, trans_b, m, n, k, A, lda, B, ldb, C, ldc);
  check_dtypes("gemm_batched", {&A, &B, &C});
  if (!(model_share >= 0 && model_share <= 1))
    throw std::invalid_argument("gemm_batched: model_share=" + std::to_string(model_share) + " is not in [0, 1]");
  if (!compute_enabled_) return;
  for (int64_t i = 0; i < batch; ++i) count_gemm(m, n, k, model_share);
  if (m == 0 || n == 0) return;
  const int op = op_begin("gemm_batched");
  do_gemm_batched(trans_a, trans_b, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
  op_end(op);
}

void Backend::do_gemm_batched(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                              const Tensor& A, int64_t lda, int64_t sa, const Tensor& B, int64_t ldb, int64_t sb,
                              float beta, Tensor& C, int64_t ldc, int64_t sc, int64_t batch) {
  for (int64_t i = 0; i < batch; ++i) {
    Tensor ci = entry(C, i * sc);
    do_gemm(trans_a, trans_b, m, n, k, alpha, entry(A, i * sa), lda, entry(B, i * sb), ldb, beta, ci, ldc);
  }
}

void Backend::swiglu_fwd(const Tensor& a, const Tensor& b, Tensor& g) {
  check_same_numel("swiglu_fwd", g, a);
  check_same_numel("swiglu_fwd", g, b);
  check_dtypes("swiglu_fwd", {&a, &b, &g});
  if (!compute_enabled_) return;
  const int op = op_begin("swiglu_fwd");
  do_swiglu_fwd(a, b, g);
  op_end(op);
}

void Backend::swiglu_bwd(const Tensor& a, const Tensor& b, const Tensor& dg, Tensor& da, Tensor& db) {
  for (const Tensor* t : std::initializer_list<const Tensor*>{&b, &dg, &da, &db}) check_same_numel("swiglu_bwd", a, *t);
  check_dtypes("swiglu_bwd", {&a, &b, &dg, &da, &db});
  if (!compute_enabled_) return;
  const int op = op_begin("swiglu_bwd");
  do_swiglu_bwd(a, b, dg, da, db);
  op_end(op);
}

void Backend::do_swiglu_fwd(const Tensor&, const Tensor&, Tensor&) {
  throw std::logic_error("backend '" + name() + "' has no swiglu_fwd");
}
void Backend::do_swiglu_bwd(const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&) {
  throw std::logic_error("backend '" + name() + "' has no swiglu_bwd");
}

void Backend::rmsnorm_fwd(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd) {
  const int64_t rows = check_rmsnorm_fwd(x, w, y, rstd);
  if (!(eps > 0)) throw std::invalid_argument("rmsnorm_fwd: eps must be > 0");
  check_dtypes("rmsnorm_fwd", {&x, &w, &y, &rstd});
  if (!compute_enabled_) return;
  const int op = op_begin("rmsnorm_fwd");
  do_rmsnorm_fwd(x, w, eps, rows, y, rstd);
  op_end(op);
}

void Backend::rmsnorm_bwd(const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy,
                          Tensor& dx, Tensor& dw) {
  const int64_t rows = check_rmsnorm_bwd(x, w, rstd, dy, dx, dw);
  check_dtypes("rmsnorm_bwd", {&x, &w, &rstd, &dy, &dx, &dw});
  if (!compute_enabled_) return;
  const int op = op_begin("rmsnorm_bwd");
  do_rmsnorm_bwd(x, w, rstd, dy, rows, dx, dw);
  op_end(op);
}

void Backend::rope(Tensor& x, int64_t B, int64_t T, int heads, int d, int64_t pitch,
                   const Positions& pos, double theta, bool inverse, const DocStarts& docs) {
  check_rope(x, B, T, heads, d, pitch, pos, theta, docs);
  check_dtypes("rope", {&x});
  if (!compute_enabled_) return;
  const int op = op_begin("rope");
  do_rope(x, B, T, heads, d, pitch, pos, theta, inverse, docs);
  op_end(op);
}

// ---- attention ----------------------------------------------------------------------------------
void Backend::attn_fwd(const AttnShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Positions& qpos, const Positions& kpos, Tensor& o, Tensor& lse) {
  check_attn_fwd(s, q, k, v, qpos, kpos, o, lse);
  check_dtypes("attn_fwd", {&q, &k, &v, &o, &lse});
  AttnShape a = s;
  a.p_e4m3 = fp8_attention_;  // --dtype fp8: P in e4m3 (the backend's mode, not the caller's)
  if (a.p_e4m3 && q.dtype != DType::bf16)
    throw std::invalid_argument(std::string("attn_fwd: fp8 attention runs on bf16 tensors holding fp8 values (got ") +
                                dtype_name(q.dtype) + ")");
  check_attn_support("attn_fwd", a, q.dtype);
  if (!compute_enabled_) return;
  count_attn(a, qpos, kpos, /*backward=*/false);
  const int op = op_begin("attn_fwd");
  do_attn_fwd(a, q, k, v, qpos, kpos, o, lse);
  op_end(op);
}

void Backend::attn_merge(const AttnShape& s, Tensor& o_acc, Tensor& lse_acc, const Tensor& o_blk,
                         const Tensor& lse_blk) {
  check_attn_merge(s, o_acc, lse_acc, o_blk, lse_blk);
  check_dtypes("attn_merge", {&o_acc, &lse_acc, &o_blk, &lse_blk});
  if (!compute_enabled_) return;
  const int op = op_begin("attn_merge");
  do_attn_merge(s, o_acc, lse_acc, o_blk, lse_blk);
  op_end(op);
}

void Backend::attn_bwd_delta(const AttnShape& s, const Tensor& o, const Tensor& dout,
                             Tensor& delta) {
  check_attn_bwd_delta(s, o, dout, delta);
  check_dtypes("attn_bwd_delta", {&o, &dout, &delta});
  if (!compute_enabled_) return;
  const int op = op_begin("attn_bwd_delta");
  do_attn_bwd_delta(s, o, dout, delta);
  op_end(op);
}

void Backend::attn_bwd(const AttnShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Tensor& dout, const Tensor& lse, const Tensor& delta,
                       const Positions& qpos, const Positions& kpos, Tensor& dq, Tensor& dk,
                       Tensor& dv) {
  check_attn_bwd(s, q, k, v, dout, lse, delta, qpos, kpos, dq, dk, dv);
  check_dtypes("attn_bwd", {&q, &k, &v, &dout, &lse, &delta, &dq, &dk, &dv});
  if (fp8_attention_ || s.p_e4m3)
    throw std::invalid_argument("attn_bwd: fp8 attention defines the forward only (--dtype fp8 runs --pass prefill or decode)");
  check_attn_support("attn_bwd", s, q.dtype);
  if (!compute_enabled_) return;
  count_attn(s, qpos, kpos, /*backward=*/true);
  const int op = op_begin("attn_bwd");
  do_attn_bwd(s, q, k, v, dout, lse, delta, qpos, kpos, dq, dk, dv);
  op_end(op);
}

void Backend::attn_sink_fwd(const AttnShape& s, const Tensor& sinks, Tensor& o, Tensor& lse) {
  check_attn_sink_fwd(s, sinks, o, lse);
  check_dtypes("attn_sink_fwd", {&sinks, &o, &lse});
  if (!compute_enabled_) return;
  const int op = op_begin("attn_sink_fwd");
  do_attn_sink_fwd(s, sinks, o, lse);
  op_end(op);
}

void Backend::attn_sink_bwd(const AttnShape& s, const Tensor& sinks, const Tensor& o, const Tensor& dout,
                            const Tensor& lse, Tensor& dsinks) {
  check_attn_sink_bwd(s, sinks, o, dout, lse, dsinks);
  check_dtypes("attn_sink_bwd", {&sinks, &o, &dout, &lse, &dsinks});
  if (!compute_enabled_) return;
  const int op = op_begin("attn_sink_bwd");
  do_attn_sink_bwd(s, sinks, o, dout, lse, dsinks);
  op_end(op);
}

}  // namespace cpbench
