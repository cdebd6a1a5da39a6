// CpuBackend: memory, timing and the fp32 kernels behind Backend's checked entry points.
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

// ---- operations (Backend's entry points have checked the arguments and the replay gate) -------
void CpuBackend::check_dtypes(const char* op, std::initializer_list<const Tensor*> tensors) const {
  for (const Tensor* t : tensors)
    if (t->dtype != DType::f32)
      throw std::invalid_argument(std::string(op) + ": a " + dtype_name(t->dtype) + " tensor " +
                                  t->shape_str() + "; the cpu backend computes in fp32 only");
}

void CpuBackend::do_fill(Tensor& t, float value) { cpu::fill(f(t), t.numel(), value, threads_); }

void CpuBackend::do_copy_2d(Tensor& dst, int64_t dst_pitch, const Tensor& src, int64_t src_pitch,
                            int64_t rows, int64_t cols) {
  cpu::copy_2d(f(dst), dst_pitch, f(src), src_pitch, rows, cols, threads_);
}

void CpuBackend::do_convert(Tensor& dst, const Tensor& src) {
  if (dst.data != src.data)
    cpu::copy_2d(f(dst), dst.numel(), f(src), src.numel(), 1, src.numel(), threads_);
}

void CpuBackend::do_add(Tensor& out, const Tensor& a, const Tensor& b) {
  cpu::add(f(out), f(a), f(b), out.numel(), threads_);
}

void CpuBackend::do_swiglu_fwd(const Tensor& a, const Tensor& b, Tensor& g) {
  cpu::swiglu_fwd(f(a), f(b), f(g), g.numel(), threads_);
}

void CpuBackend::do_swiglu_bwd(const Tensor& a, const Tensor& b, const Tensor& dg, Tensor& da, Tensor& db) {
  cpu::swiglu_bwd(f(a), f(b), f(dg), f(da), f(db), a.numel(), threads_);
}

void CpuBackend::do_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                         const Tensor& A, int64_t lda, const Tensor& B, int64_t ldb, float beta,
                         Tensor& C, int64_t ldc) {
  cpu::gemm(trans_a, trans_b, m, n, k, alpha, f(A), lda, f(B), ldb, beta, f(C), ldc, threads_);
}

void CpuBackend::do_rmsnorm_fwd(const Tensor& x, const Tensor& w, float eps, int64_t rows,
                                Tensor& y, Tensor& rstd) {
  cpu::rmsnorm_fwd(f(x), f(w), eps, rows, w.numel(), f(y), f(rstd), threads_);
}

void CpuBackend::do_rmsnorm_bwd(const Tensor& x, const Tensor& w, const Tensor& rstd,
                                const Tensor& dy, int64_t rows, Tensor& dx, Tensor& dw) {
  cpu::rmsnorm_bwd(f(x), f(w), f(rstd), f(dy), rows, w.numel(), f(dx), f(dw), threads_);
}

void CpuBackend::do_rope(Tensor& x, int64_t B, int64_t T, int heads, int d, int64_t pitch,
                         const Positions& pos, double theta, bool inverse, const DocStarts& docs) {
  cpu::rope(f(x), B, T, heads, d, pitch, pos, docs, theta, inverse, threads_);
}

void CpuBackend::do_attn_fwd(const AttnShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Positions& qpos, const Positions& kpos, Tensor& o, Tensor& lse) {
  cpu::attn_fwd(s, f(q), f(k), f(v), qpos, kpos, f(o), f(lse), threads_);
}

void CpuBackend::do_attn_merge(const AttnShape& s, Tensor& o_acc, Tensor& lse_acc,
                               const Tensor& o_blk, const Tensor& lse_blk) {
  cpu::attn_merge(s, f(o_acc), f(lse_acc), f(o_blk), f(lse_blk), threads_);
}

void CpuBackend::do_attn_bwd_delta(const AttnShape& s, const Tensor& o, const Tensor& dout,
                                   Tensor& delta) {
  cpu::attn_bwd_delta(s, f(o), f(dout), f(delta), threads_);
}

void CpuBackend::do_attn_bwd(const AttnShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& dout, const Tensor& lse, const Tensor& delta,
                             const Positions& qpos, const Positions& kpos, Tensor& dq, Tensor& dk,
                             Tensor& dv) {
  cpu::attn_bwd(s, f(q), f(k), f(v), f(dout), f(lse), f(delta), qpos, kpos, f(dq), f(dk), f(dv),
                threads_);
}

std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& opt) {
  return std::make_unique<CpuBackend>(opt.threads);
}

}  // namespace cpbench
