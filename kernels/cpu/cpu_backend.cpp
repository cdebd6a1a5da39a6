// CpuBackend: boundary checks, memory, timing and the compute log around the fp32 kernels.
#include "kernels/cpu/cpu_backend.h"

#include <omp.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <new>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/vec_ops.h"

namespace cpbench {

namespace {

void need_f32(const char* op, const Tensor& t, const char* name) {
  if (t.dtype != DType::f32)
    throw std::invalid_argument(std::string(op) + ": " + name + " is " + dtype_name(t.dtype) +
                                "; the cpu backend computes in fp32 only");
}

template <class... Ts>
void need_f32_all(const char* op, const Ts&... named) {
  (need_f32(op, named.first, named.second), ...);
}

std::pair<const Tensor&, const char*> nm(const Tensor& t, const char* n) { return {t, n}; }

float* f(const Tensor& t) { return t.ptr<float>(); }

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t c = line.find(':');
      if (c != std::string::npos) {
        size_t b = line.find_first_not_of(" \t", c + 1);
        return b == std::string::npos ? std::string() : line.substr(b);
      }
    }
  }
  return "unknown CPU";
}

}  // namespace

CpuBackend::CpuBackend(int threads) { set_threads(threads); }

std::string CpuBackend::device_name() const {
  return cpu_model() + " (OpenBLAS " + cpu::blas_core_name() + ", kernels " + kernel_isa() + ")";
}

const char* CpuBackend::kernel_isa() { return cpu::vec_ops().isa; }

void CpuBackend::set_threads(int n) {
  if (n < 1) throw std::invalid_argument("set_threads: need at least 1 thread, got " + std::to_string(n));
  threads_ = n;
  cpu::blas_set_threads(n);
  omp_set_num_threads(n);
}

template <class F>
void CpuBackend::compute(const char* op, F&& fn) {
  if (!compute_enabled_) return;
  const double t0 = now_ms();
  fn();
  compute_log_.push_back(ComputeRecord{op, phase_, t0, now_ms()});
}

template <class F>
void CpuBackend::layout(const char* op, F&& fn) {
  const double t0 = now_ms();
  fn();
  compute_log_.push_back(ComputeRecord{op, phase_, t0, now_ms()});
}

// ---- memory -------------------------------------------------------------------------------------
Tensor CpuBackend::alloc(std::vector<int64_t> shape, DType dtype, MemKind kind) {
  if (dtype != DType::f32)
    throw std::invalid_argument(std::string("cpu backend: cannot allocate ") + dtype_name(dtype) +
                                " tensors; it supports fp32 only (bf16/fp16 run on --backend cuda)");
  Tensor t;
  t.dtype = dtype;
  t.kind = kind;
  t.shape = std::move(shape);
  const int64_t n = t.numel();  // validates the shape
  const int64_t bytes = n * static_cast<int64_t>(dtype_size(dtype));
  mem_.on_alloc(kind, bytes);  // before allocating: over --mem-limit it throws, nothing held
  // Size-bucketed cache (as on CUDA): a buffer freed and re-allocated between iterations gets
  // the same warm pages back instead of page-faulting fresh ones.
  void* p = cache_->allocate(static_cast<size_t>(bytes));
  if (!p) {
    mem_.on_free(kind, bytes);
    throw std::bad_alloc();
  }
  MemTracker* tracker = &mem_;  // the backend outlives its tensors (contract)
  std::shared_ptr<BlockCache> cache = cache_;
  t.holder = std::shared_ptr<void>(p, [tracker, cache, kind, bytes](void* ptr) {
    tracker->on_free(kind, bytes);
    cache->release(ptr, static_cast<size_t>(bytes));
  });
  t.data = p;
  if (poison_) cpu::fill(f(t), n, std::numeric_limits<float>::quiet_NaN(), threads_);
  return t;
}

void CpuBackend::upload(const std::vector<float>& host, Tensor& dst) {
  need_f32("upload", dst, "dst");
  if (static_cast<int64_t>(host.size()) != dst.numel())
    throw std::invalid_argument("upload: " + std::to_string(host.size()) +
                                " host values for a tensor of " + std::to_string(dst.numel()) +
                                " elements " + dst.shape_str());
  cpu::copy_2d(f(dst), dst.numel(), host.data(), dst.numel(), 1, dst.numel(), threads_);
}

std::vector<float> CpuBackend::download(const Tensor& src) {
  need_f32("download", src, "src");
  std::vector<float> out(static_cast<size_t>(src.numel()));
  if (!out.empty()) cpu::copy_2d(out.data(), src.numel(), f(src), src.numel(), 1, src.numel(), threads_);
  return out;
}

// ---- timing -------------------------------------------------------------------------------------
Event CpuBackend::record_event() {
  Event e;
  e.host_ms = now_ms();
  return e;
}

double CpuBackend::elapsed_ms(const Event& a, const Event& b) { return b.host_ms - a.host_ms; }

// ---- layout: they run in replay mode too; logged as busy time (the rank is working, not waiting)
void CpuBackend::fill(Tensor& t, float value) {
  need_f32("fill", t, "t");
  layout("fill", [&] { cpu::fill(f(t), t.numel(), value, threads_); });
}

void CpuBackend::copy_2d(Tensor& dst, int64_t dst_pitch, const Tensor& src, int64_t src_pitch,
                         int64_t rows, int64_t cols) {
  check_copy_2d(dst, dst_pitch, src, src_pitch, rows, cols);
  need_f32("copy_2d", dst, "dst");
  layout("copy_2d", [&] { cpu::copy_2d(f(dst), dst_pitch, f(src), src_pitch, rows, cols, threads_); });
}

void CpuBackend::convert(Tensor& dst, const Tensor& src) {
  check_same_numel("convert", dst, src);
  need_f32_all("convert", nm(dst, "dst"), nm(src, "src"));
  if (dst.data != src.data)
    layout("convert", [&] { cpu::copy_2d(f(dst), dst.numel(), f(src), src.numel(), 1, src.numel(), threads_); });
}

// ---- compute ------------------------------------------------------------------------------------
void CpuBackend::add(Tensor& out, const Tensor& a, const Tensor& b) {
  check_same_numel("add", out, a);
  check_same_numel("add", out, b);
  need_f32_all("add", nm(out, "out"), nm(a, "a"), nm(b, "b"));
  compute("add", [&] { cpu::add(f(out), f(a), f(b), out.numel(), threads_); });
}

void CpuBackend::gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                      const Tensor& A, int64_t lda, const Tensor& B, int64_t ldb, float beta,
                      Tensor& C, int64_t ldc) {
  check_gemm(trans_a, trans_b, m, n, k, A, lda, B, ldb, C, ldc);
  need_f32_all("gemm", nm(A, "A"), nm(B, "B"), nm(C, "C"));
  if (!compute_enabled_) return;
  count_gemm(m, n, k);
  compute("gemm", [&] {
    cpu::gemm(trans_a, trans_b, m, n, k, alpha, f(A), lda, f(B), ldb, beta, f(C), ldc, threads_);
  });
}

void CpuBackend::rmsnorm_fwd(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd) {
  const int64_t rows = check_rmsnorm_fwd(x, w, y, rstd);
  need_f32("rmsnorm_fwd", x, "x");
  if (!(eps > 0)) throw std::invalid_argument("rmsnorm_fwd: eps must be > 0");
  compute("rmsnorm_fwd", [&] {
    cpu::rmsnorm_fwd(f(x), f(w), eps, rows, w.numel(), f(y), f(rstd), threads_);
  });
}

void CpuBackend::rmsnorm_bwd(const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy,
                             Tensor& dx, Tensor& dw) {
  const int64_t rows = check_rmsnorm_bwd(x, w, rstd, dy, dx, dw);
  need_f32("rmsnorm_bwd", x, "x");
  compute("rmsnorm_bwd", [&] {
    cpu::rmsnorm_bwd(f(x), f(w), f(rstd), f(dy), rows, w.numel(), f(dx), f(dw), threads_);
  });
}

void CpuBackend::rope(Tensor& x, int64_t B, int64_t T, int heads, int d, int64_t pitch,
                      const Positions& pos, double theta, bool inverse) {
  check_rope(x, B, T, heads, d, pitch, pos, theta);
  need_f32("rope", x, "x");
  compute("rope", [&] { cpu::rope(f(x), B, T, heads, d, pitch, pos, theta, inverse, threads_); });
}

void CpuBackend::attn_fwd(const AttnShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Positions& qpos, const Positions& kpos, Tensor& o, Tensor& lse) {
  check_attn_fwd(s, q, k, v, qpos, kpos, o, lse);
  need_f32("attn_fwd", q, "q");
  if (!compute_enabled_) return;
  count_attn(s, qpos, kpos, /*backward=*/false);
  compute("attn_fwd", [&] {
    cpu::attn_fwd(s, f(q), f(k), f(v), qpos, kpos, f(o), f(lse), threads_);
  });
}

void CpuBackend::attn_merge(const AttnShape& s, Tensor& o_acc, Tensor& lse_acc, const Tensor& o_blk,
                            const Tensor& lse_blk) {
  check_attn_merge(s, o_acc, lse_acc, o_blk, lse_blk);
  need_f32("attn_merge", o_acc, "o_acc");
  compute("attn_merge", [&] {
    cpu::attn_merge(s, f(o_acc), f(lse_acc), f(o_blk), f(lse_blk), threads_);
  });
}

void CpuBackend::attn_bwd_delta(const AttnShape& s, const Tensor& o, const Tensor& dout,
                                Tensor& delta) {
  check_attn_bwd_delta(s, o, dout, delta);
  need_f32("attn_bwd_delta", o, "o");
  compute("attn_bwd_delta", [&] { cpu::attn_bwd_delta(s, f(o), f(dout), f(delta), threads_); });
}

void CpuBackend::attn_bwd(const AttnShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& dout, const Tensor& lse, const Tensor& delta,
                          const Positions& qpos, const Positions& kpos, Tensor& dq, Tensor& dk,
                          Tensor& dv) {
  check_attn_bwd(s, q, k, v, dout, lse, delta, qpos, kpos, dq, dk, dv);
  need_f32("attn_bwd", q, "q");
  if (!compute_enabled_) return;
  count_attn(s, qpos, kpos, /*backward=*/true);
  compute("attn_bwd", [&] {
    cpu::attn_bwd(s, f(q), f(k), f(v), f(dout), f(lse), f(delta), qpos, kpos, f(dq), f(dk), f(dv),
                  threads_);
  });
}

std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& opt) {
  return std::make_unique<CpuBackend>(opt.threads);
}

}  // namespace cpbench
