// CpuBackend: memory, timing and the kernels behind Backend's checked entry points. fp32 tensors
// run the fp32 kernels; bf16/fp16 tensors are stored in 2 bytes per element and run the same
// element-wise kernels instantiated for their type, the widening GEMM (gemm_lowp.cpp) and the
// attention emulation (attention_lowp.cpp): DESIGN "Rounding points".
#include "kernels/cpu/cpu_backend.h"

#include <omp.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <new>
#include <type_traits>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/vec_ops.h"

namespace cpbench {

namespace {

float* f(const Tensor& t) { return t.ptr<float>(); }
// The tensor's elements as type T (elem.h); the caller dispatched on its dtype.
template <class T>
T* e(const Tensor& t) {
  return t.ptr<T>();
}

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
  if (poison_ && dtype == DType::u8)
    std::memset(p, 0xff, static_cast<size_t>(bytes));  // e4m3's NaN code (an unwritten scale: 2^128)
  else if (poison_)
    cpu::with_elem(dtype, [&](auto tag) {
      cpu::fill(e<decltype(tag)>(t), n, std::numeric_limits<float>::quiet_NaN(), threads_);
    });
  return t;
}

// Host fp32 data converted to the tensor's dtype (rounded to nearest even) and back (exact).
void CpuBackend::upload(const std::vector<float>& host, Tensor& dst) {
  if (static_cast<int64_t>(host.size()) != dst.numel())
    throw std::invalid_argument("upload: " + std::to_string(host.size()) +
                                " host values for a tensor of " + std::to_string(dst.numel()) +
                                " elements " + dst.shape_str());
  const int64_t n = dst.numel();
  if (dst.dtype == DType::f32) {
    cpu::copy_2d(f(dst), n, host.data(), n, 1, n, sizeof(float), threads_);
    return;
  }
  cpu::with_elem(dst.dtype, [&](auto tag) { cpu::convert(e<decltype(tag)>(dst), host.data(), n, threads_); });
}

std::vector<float> CpuBackend::download(const Tensor& src) {
  const int64_t n = src.numel();
  std::vector<float> out(static_cast<size_t>(n));
  if (out.empty()) return out;
  if (src.dtype == DType::f32) {
    cpu::copy_2d(out.data(), n, f(src), n, 1, n, sizeof(float), threads_);
    return out;
  }
  cpu::with_elem(src.dtype, [&](auto tag) { cpu::convert(out.data(), e<decltype(tag)>(src), n, threads_); });
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
// The shared checks (backend.cpp) fix which tensors share a dtype and which are fp32; the
// element-wise kernels beyond them take one dtype for all their tensors.
void CpuBackend::check_dtypes(const char* op, std::initializer_list<const Tensor*> tensors) const {
  if (std::strcmp(op, "add") != 0 && std::strcmp(op, "swiglu_fwd") != 0 && std::strcmp(op, "swiglu_bwd") != 0)
    return;
  for (const Tensor* t : tensors)
    if (t->dtype != (*tensors.begin())->dtype)
      throw std::invalid_argument(std::string(op) + ": tensors of different dtypes (" +
                                  dtype_name((*tensors.begin())->dtype) + ", " + dtype_name(t->dtype) +
                                  "); the cpu backend's " + op + " takes one dtype");
}

void CpuBackend::do_fill(Tensor& t, float value) {
  cpu::with_elem(t.dtype, [&](auto tag) { cpu::fill(e<decltype(tag)>(t), t.numel(), value, threads_); });
}

void CpuBackend::do_copy_2d(Tensor& dst, int64_t dst_pitch, const Tensor& src, int64_t src_pitch,
                            int64_t rows, int64_t cols) {
  cpu::copy_2d(dst.data, dst_pitch, src.data, src_pitch, rows, cols, dtype_size(dst.dtype), threads_);
}

void CpuBackend::do_convert(Tensor& dst, const Tensor& src) {
  if (dst.data == src.data && dst.dtype == src.dtype) return;
  if (dst.dtype == src.dtype) {  // a copy: rounding a value already of the type changes nothing
    cpu::copy_2d(dst.data, dst.numel(), src.data, src.numel(), 1, src.numel(), dtype_size(dst.dtype), threads_);
    return;
  }
  cpu::with_elem(dst.dtype, [&](auto dt) {
    cpu::with_elem(src.dtype, [&](auto st) {
      cpu::convert(e<decltype(dt)>(dst), e<decltype(st)>(src), dst.numel(), threads_);
    });
  });
}

void CpuBackend::do_add(Tensor& out, const Tensor& a, const Tensor& b) {
  cpu::with_elem(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    cpu::add(e<T>(out), e<T>(a), e<T>(b), out.numel(), threads_);
  });
}

// Widened, quantized (kernels/float8.h, one thread: a tensor scale needs the whole amax) and
// narrowed back, which is exact: bf16 holds every scaled e4m3 value.
void CpuBackend::do_quantize_fp8(Tensor& t, Fp8Scaling scaling) {
  std::vector<float> x = download(t);
  quantize_e4m3(x.data(), int64_t(x.size()), scaling);
  upload(x, t);
}

void CpuBackend::do_encode_fp8(const Tensor& src, Tensor& dst, Fp8Scaling scaling) {
  const std::vector<float> x = download(src);
  encode_e4m3(x.data(), int64_t(x.size()), scaling, static_cast<uint8_t*>(dst.data));
}

void CpuBackend::do_decode_fp8(const Tensor& src, Tensor& dst, Fp8Scaling scaling) {
  std::vector<float> x(static_cast<size_t>(dst.numel()));
  decode_e4m3(static_cast<const uint8_t*>(src.data), dst.numel(), scaling, x.data());
  upload(x, dst);
}

void CpuBackend::do_swiglu_fwd(const Tensor& a, const Tensor& b, Tensor& g) {
  cpu::with_elem(g.dtype, [&](auto tag) {
    using T = decltype(tag);
    cpu::swiglu_fwd(e<T>(a), e<T>(b), e<T>(g), g.numel(), threads_);
  });
}

void CpuBackend::do_swiglu_bwd(const Tensor& a, const Tensor& b, const Tensor& dg, Tensor& da, Tensor& db) {
  cpu::with_elem(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    cpu::swiglu_bwd(e<T>(a), e<T>(b), e<T>(dg), e<T>(da), e<T>(db), a.numel(), threads_);
  });
}

void CpuBackend::do_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                         const Tensor& A, int64_t lda, const Tensor& B, int64_t ldb, float beta,
                         Tensor& C, int64_t ldc) {
  if (A.dtype == DType::f32) {
    cpu::gemm(trans_a, trans_b, m, n, k, alpha, f(A), lda, f(B), ldb, beta, f(C), ldc, threads_);
    return;
  }
  cpu::with_elem(A.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, float>) {
      if (C.dtype == DType::f32)
        cpu::gemm_lowp(trans_a, trans_b, m, n, k, alpha, e<T>(A), lda, e<T>(B), ldb, beta, f(C), ldc,
                       gemm_scratch_, threads_);
      else
        cpu::gemm_lowp(trans_a, trans_b, m, n, k, alpha, e<T>(A), lda, e<T>(B), ldb, beta, e<T>(C), ldc,
                       gemm_scratch_, threads_);
    }
  });
}

void CpuBackend::do_rmsnorm_fwd(const Tensor& x, const Tensor& w, float eps, int64_t rows,
                                Tensor& y, Tensor& rstd) {
  cpu::with_elem(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    cpu::rmsnorm_fwd(e<T>(x), e<T>(w), eps, rows, w.numel(), e<T>(y), f(rstd), threads_);
  });
}

void CpuBackend::do_rmsnorm_bwd(const Tensor& x, const Tensor& w, const Tensor& rstd,
                                const Tensor& dy, int64_t rows, Tensor& dx, Tensor& dw) {
  cpu::with_elem(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    cpu::rmsnorm_bwd(e<T>(x), e<T>(w), f(rstd), e<T>(dy), rows, w.numel(), e<T>(dx), f(dw), threads_);
  });
}

void CpuBackend::do_rope(Tensor& x, int64_t B, int64_t T, int heads, int d, int64_t pitch,
                         const Positions& pos, double theta, bool inverse, const DocStarts& docs) {
  cpu::with_elem(x.dtype, [&](auto tag) {
    cpu::rope(e<decltype(tag)>(x), B, T, heads, d, pitch, pos, docs, theta, inverse, threads_);
  });
}

void CpuBackend::do_attn_fwd(const AttnShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Positions& qpos, const Positions& kpos, Tensor& o, Tensor& lse) {
  if (q.dtype == DType::f32) {
    cpu::attn_fwd(s, f(q), f(k), f(v), qpos, kpos, f(o), f(lse), threads_);
    return;
  }
  cpu::with_elem(q.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, float>)
      cpu::attn_fwd_lowp(s, e<T>(q), e<T>(k), e<T>(v), qpos, kpos, e<T>(o), f(lse), threads_);
  });
}

void CpuBackend::do_attn_merge(const AttnShape& s, Tensor& o_acc, Tensor& lse_acc,
                               const Tensor& o_blk, const Tensor& lse_blk) {
  cpu::with_elem(o_acc.dtype, [&](auto tag) {
    using T = decltype(tag);
    cpu::attn_merge(s, e<T>(o_acc), f(lse_acc), e<T>(o_blk), f(lse_blk), threads_);
  });
}

void CpuBackend::do_attn_bwd_delta(const AttnShape& s, const Tensor& o, const Tensor& dout,
                                   Tensor& delta) {
  cpu::with_elem(o.dtype, [&](auto tag) {
    using T = decltype(tag);
    cpu::attn_bwd_delta(s, e<T>(o), e<T>(dout), f(delta), threads_);
  });
}

void CpuBackend::do_attn_sink_fwd(const AttnShape& s, const Tensor& sinks, Tensor& o, Tensor& lse) {
  cpu::with_elem(o.dtype, [&](auto tag) {
    using T = decltype(tag);
    cpu::attn_sink_fwd(s, f(sinks), e<T>(o), f(lse), threads_);
  });
}

void CpuBackend::do_attn_sink_bwd(const AttnShape& s, const Tensor& sinks, const Tensor& o, const Tensor& dout,
                                  const Tensor& lse, Tensor& dsinks) {
  cpu::with_elem(o.dtype, [&](auto tag) {
    using T = decltype(tag);
    cpu::attn_sink_bwd(s, f(sinks), e<T>(o), e<T>(dout), f(lse), f(dsinks), threads_);
  });
}

void CpuBackend::do_attn_bwd(const AttnShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& dout, const Tensor& lse, const Tensor& delta,
                             const Positions& qpos, const Positions& kpos, Tensor& dq, Tensor& dk,
                             Tensor& dv) {
  if (q.dtype == DType::f32) {
    cpu::attn_bwd(s, f(q), f(k), f(v), f(dout), f(lse), f(delta), qpos, kpos, f(dq), f(dk), f(dv),
                  threads_);
    return;
  }
  cpu::with_elem(q.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, float>)
      cpu::attn_bwd_lowp(s, e<T>(q), e<T>(k), e<T>(v), e<T>(dout), f(lse), f(delta), qpos, kpos,
                         f(dq), f(dk), f(dv), threads_);
  });
}

std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& opt) {
  return std::make_unique<CpuBackend>(opt.threads);
}

}  // namespace cpbench
