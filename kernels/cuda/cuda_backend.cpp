// CudaBackendImpl: memory, streams, timing and the compute log around the CUDA kernels
// (kernels/cuda/*.cu) and cuBLAS, behind Backend's checked entry points (backend_ops.cpp). See cuda_backend.h for the timing and replay rules.
#include "kernels/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/caching_allocator.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/smem_limits.h"

namespace cpbench {
namespace {

constexpr size_t kCublasWorkspace = size_t(32) << 20;  // cuBLAS's recommendation for Hopper
constexpr size_t kMaxPendingOps = 1 << 16;             // resolve early past this many

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    case DType::u8: return CUDA_R_8U;
  }
  throw std::invalid_argument("cuda: unknown dtype");
}

// Shared by the backend and the deleters of its tensors, so a tensor that outlives the backend
// still returns its block (the tracker is then gone).
struct AllocState {
  explicit AllocState(int device) : alloc(device) {}
  cuda::CachingAllocator alloc;
  std::mutex mu;                  // guards tracker (tensors may be released on any thread)
  MemTracker* tracker = nullptr;  // null once the backend is destroyed

  void release(void* p, size_t bytes, MemKind kind) noexcept {
    {
      std::lock_guard<std::mutex> lk(mu);
      if (tracker) tracker->on_free(kind, static_cast<int64_t>(bytes));
    }
    alloc.release(p, bytes);
  }
};

bool env_flag(const char* name, bool dflt) {
  const char* v = std::getenv(name);
  if (!v || !*v) return dflt;
  return !(std::strcmp(v, "0") == 0 || std::strcmp(v, "off") == 0 || std::strcmp(v, "false") == 0);
}

class CudaBackendImpl final : public CudaBackend {
 public:
  explicit CudaBackendImpl(const BackendOptions& opt);
  ~CudaBackendImpl() override;
  CudaBackendImpl(const CudaBackendImpl&) = delete;
  CudaBackendImpl& operator=(const CudaBackendImpl&) = delete;

  std::string name() const override { return "cuda"; }
  std::string device_name() const override { return device_name_; }
  int64_t device_memory_bytes() const override { return device_memory_; }

  // CudaBackend
  int device() const override { return device_; }
  cudaStream_t compute_stream() const override { return stream_; }
  int add_sync_hook(std::function<void()> fn) override {
    hooks_[next_hook_] = std::move(fn);
    return next_hook_++;
  }
  void remove_sync_hook(int id) override { hooks_.erase(id); }
  size_t reserved_bytes() const override { return alloc_->alloc.reserved_bytes(); }
  void empty_cache() override { alloc_->alloc.empty_cache(); }
  void release_cached_memory() override { empty_cache(); }

  // memory
  Tensor alloc(std::vector<int64_t> shape, DType dtype, MemKind kind) override;
  void upload(const std::vector<float>& host, Tensor& dst) override;
  std::vector<float> download(const Tensor& src) override;
  bool device_memory() const override { return true; }
  void copy_to_host_raw(void* dst, const Tensor& src, size_t bytes) override;
  void copy_from_host_raw(Tensor& dst, const void* src, size_t bytes) override;

  // streams and timing
  Event record_event() override;
  double elapsed_ms(const Event& a, const Event& b) override;
  void synchronize() override;
  double compute_busy_ms() const override;

 protected:
  // layout
  void do_fill(Tensor& t, float value) override;
  void do_copy_2d(Tensor& dst, int64_t dst_pitch, const Tensor& src, int64_t src_pitch,
                  int64_t rows, int64_t cols) override;
  void do_convert(Tensor& dst, const Tensor& src) override;

  // compute
  void check_attn_support(const char* op, const AttnShape& s, DType dt) const override;
  void do_add(Tensor& out, const Tensor& a, const Tensor& b) override;
  void do_swiglu_fwd(const Tensor& a, const Tensor& b, Tensor& g) override;
  void do_swiglu_bwd(const Tensor& a, const Tensor& b, const Tensor& dg, Tensor& da, Tensor& db) override;
  void do_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const Tensor& A, int64_t lda, const Tensor& B, int64_t ldb, float beta, Tensor& C,
               int64_t ldc) override;
  void do_gemm_batched(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const Tensor& A,
                       int64_t lda, int64_t sa, const Tensor& B, int64_t ldb, int64_t sb, float beta, Tensor& C,
                       int64_t ldc, int64_t sc, int64_t batch) override;
  void do_rmsnorm_fwd(const Tensor& x, const Tensor& w, float eps, int64_t rows, Tensor& y,
                      Tensor& rstd) override;
  void do_rmsnorm_bwd(const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy,
                      int64_t rows, Tensor& dx, Tensor& dw) override;
  void do_rope(Tensor& x, int64_t B, int64_t T, int heads, int d, int64_t pitch,
               const Positions& pos, double theta, bool inverse, const DocStarts& docs) override;
  void do_attn_fwd(const AttnShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                   const Positions& qpos, const Positions& kpos, Tensor& o, Tensor& lse) override;
  void do_attn_merge(const AttnShape& s, Tensor& o_acc, Tensor& lse_acc, const Tensor& o_blk,
                     const Tensor& lse_blk) override;
  void do_attn_bwd_delta(const AttnShape& s, const Tensor& o, const Tensor& dout,
                         Tensor& delta) override;
  void do_attn_sink_fwd(const AttnShape& s, const Tensor& sinks, Tensor& o, Tensor& lse) override;
  void do_attn_sink_bwd(const AttnShape& s, const Tensor& sinks, const Tensor& o, const Tensor& dout,
                        const Tensor& lse, Tensor& dsinks) override;
  void do_attn_bwd(const AttnShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                   const Tensor& dout, const Tensor& lse, const Tensor& delta,
                   const Positions& qpos, const Positions& kpos, Tensor& dq, Tensor& dk,
                   Tensor& dv) override;
  // Brackets one compute operation with events (no-op when op events are off).
  int op_begin(const char* name) override;
  void op_end(int idx) override;

 private:
  struct PendingOp {
    const char* name;
    int phase;
    cudaEvent_t e0, e1;
    bool ended;
  };
  cudaEvent_t pooled_event();
  void resolve_pending();  // pending ops -> compute_log_ (blocks until they are done)
  void take_reference();   // stream idle: pair an event with a host clock read
  void* scratch(size_t bytes);
  // The decode kernels' partials (attn_fwd with nq == 1): a tensor of the backend's own
  // allocator, tracked as activations, grown when a call needs more and then kept. Its size
  // depends on B * hq and dv only (never on nk), so the first decode call of a run (a warm-up
  // step) allocates it and the timed steps allocate nothing.
  float* decode_scratch(int64_t floats);
  // Host waits under the deadline (host_wait_timeout_s) instead of cudaStreamSynchronize /
  // cudaEventSynchronize, which would block for ever on a hung device.
  void wait_stream(const char* what) const {
    cuda::wait_bounded([this] { return cudaStreamQuery(stream_); }, wait_timeout_s_, what);
  }
  void wait_event(cudaEvent_t e, const char* what) const {
    cuda::wait_bounded([e] { return cudaEventQuery(e); }, wait_timeout_s_, what);
  }
  cuda::AttnArgs attn_args(const AttnShape& s, DType dt, const Positions& qpos,
                           const Positions& kpos);
  // Device copy (int32) of a run's document starts, uploaded on first use and kept while the
  // backend lives (a run has one mask; the first call is a warm-up, not a timed one).
  const int32_t* device_docs(const DocStarts& docs);

  int device_ = 0;
  std::string device_name_;
  int64_t device_memory_ = 0;  // prop.totalGlobalMem
  std::string device_desc_;  // "NAME, sm_XY" for capability errors
  int smem_optin_ = 0;       // cudaDevAttrMaxSharedMemoryPerBlockOptin, bytes
  cudaStream_t stream_ = nullptr;
  double wait_timeout_s_ = cuda::host_wait_timeout_s();
  cublasHandle_t cublas_ = nullptr;
  void* cublas_ws_ = nullptr;
  std::shared_ptr<AllocState> alloc_;
  bool op_events_ = true;
  std::vector<cudaEvent_t> event_pool_;
  std::vector<PendingOp> pending_;
  cudaEvent_t ref_event_ = nullptr;
  double ref_host_ms_ = 0;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  Tensor decode_scratch_;
  int decode_target_blocks_ = 0;  // cuda::attn_decode_target_blocks, on the first decode call
  std::map<int, std::function<void()>> hooks_;
  int next_hook_ = 1;
  struct DeviceDocs {
    DocStarts host;                 // keeps the key's vector alive
    std::vector<int32_t> host32;    // the copy's source, alive until the copy has run
    int32_t* dev = nullptr;
  };
  std::map<const std::vector<int64_t>*, DeviceDocs> docs_;
};

CudaBackendImpl::CudaBackendImpl(const BackendOptions& opt) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count <= 0) {
    (void)cudaGetLastError();
    throw std::runtime_error(std::string("cuda backend: no CUDA device available (") +
                             (e != cudaSuccess ? cudaGetErrorString(e) : "0 devices") + ") on " +
                             error_context());
  }
  if (opt.local_rank < 0)
    throw std::invalid_argument("cuda backend: negative local rank " + std::to_string(opt.local_rank));
  device_ = opt.local_rank % count;
  CUDA_CHECK(cudaSetDevice(device_));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
  if (prop.major < 8)
    throw std::runtime_error("cuda backend: device " + std::to_string(device_) + " (" + prop.name +
                             ") has compute capability " + std::to_string(prop.major) + "." +
                             std::to_string(prop.minor) + "; the kernels need 8.0 or newer (" +
                             error_context() + ")");
  device_name_ = prop.name;
  device_memory_ = static_cast<int64_t>(prop.totalGlobalMem);
  device_desc_ = std::to_string(device_) + " (" + prop.name + ", sm_" + std::to_string(prop.major) +
                 std::to_string(prop.minor) + ")";
  CUDA_CHECK(cudaDeviceGetAttribute(&smem_optin_, cudaDevAttrMaxSharedMemoryPerBlockOptin, device_));
  threads_ = opt.threads;
  op_events_ = env_flag("CPBENCH_CUDA_OP_EVENTS", true);
  alloc_ = std::make_shared<AllocState>(device_);
  alloc_->tracker = &mem_;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  CUBLAS_CHECK(cublasCreate(&cublas_));
  CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
  CUDA_CHECK(cudaMalloc(&cublas_ws_, kCublasWorkspace));
  CUBLAS_CHECK(cublasSetWorkspace(cublas_, cublas_ws_, kCublasWorkspace));
  CUDA_CHECK(cudaEventCreate(&ref_event_));
  take_reference();
}

CudaBackendImpl::~CudaBackendImpl() {
  // Never throws: errors here (e.g. a context already torn down at exit) are ignored.
  (void)cudaSetDevice(device_);
  // Bounded too: after a wait that timed out, the process must still be able to end.
  if (stream_) {
    try {
      wait_stream("backend teardown");
    } catch (...) {
    }
  }
  {
    std::lock_guard<std::mutex> lk(alloc_->mu);
    alloc_->tracker = nullptr;
  }
  for (auto& op : pending_) {
    (void)cudaEventDestroy(op.e0);
    (void)cudaEventDestroy(op.e1);
  }
  for (cudaEvent_t ev : event_pool_) (void)cudaEventDestroy(ev);
  if (ref_event_) (void)cudaEventDestroy(ref_event_);
  if (cublas_) (void)cublasDestroy(cublas_);
  if (cublas_ws_) (void)cudaFree(cublas_ws_);
  if (scratch_) (void)cudaFree(scratch_);
  for (auto& kv : docs_) (void)cudaFree(kv.second.dev);
  if (stream_) (void)cudaStreamDestroy(stream_);
  (void)cudaGetLastError();
}

// ---- timing -------------------------------------------------------------------------------------
cudaEvent_t CudaBackendImpl::pooled_event() {
  if (!event_pool_.empty()) {
    cudaEvent_t e = event_pool_.back();
    event_pool_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  CUDA_CHECK(cudaEventCreate(&e));
  return e;
}

int CudaBackendImpl::op_begin(const char* name) {
  if (!op_events_) return -1;
  if (pending_.size() >= kMaxPendingOps) resolve_pending();
  PendingOp op{name, phase_, pooled_event(), pooled_event(), false};
  pending_.push_back(op);
  CUDA_CHECK(cudaEventRecord(op.e0, stream_));
  return static_cast<int>(pending_.size()) - 1;
}

void CudaBackendImpl::op_end(int idx) {
  if (idx < 0) return;
  CUDA_CHECK(cudaEventRecord(pending_[size_t(idx)].e1, stream_));
  pending_[size_t(idx)].ended = true;
}

void CudaBackendImpl::resolve_pending() {
  std::vector<PendingOp> ops;
  ops.swap(pending_);
  for (const PendingOp& op : ops) {
    if (op.ended) {
      float a = 0, b = 0;
      wait_event(op.e1, "the compute log");
      CUDA_CHECK(cudaEventElapsedTime(&a, ref_event_, op.e0));
      CUDA_CHECK(cudaEventElapsedTime(&b, ref_event_, op.e1));
      compute_log_.push_back(ComputeRecord{op.name, op.phase, ref_host_ms_ + a, ref_host_ms_ + b});
    }
    event_pool_.push_back(op.e0);
    event_pool_.push_back(op.e1);
  }
}

void CudaBackendImpl::take_reference() {
  const double h0 = now_ms();
  CUDA_CHECK(cudaEventRecord(ref_event_, stream_));
  wait_event(ref_event_, "synchronize (clock reference)");
  const double h1 = now_ms();
  ref_host_ms_ = 0.5 * (h0 + h1);
}

Event CudaBackendImpl::record_event() {
  cudaEvent_t e = nullptr;
  CUDA_CHECK(cudaEventCreate(&e));
  Event ev;
  ev.impl = std::shared_ptr<void>(static_cast<void*>(e), [](void* p) {
    (void)cudaEventDestroy(static_cast<cudaEvent_t>(p));
  });
  CUDA_CHECK(cudaEventRecord(e, stream_));
  ev.host_ms = now_ms();  // when it was recorded (the device time comes from elapsed_ms)
  return ev;
}

double CudaBackendImpl::elapsed_ms(const Event& a, const Event& b) {
  if (!a.impl || !b.impl) throw std::invalid_argument("cuda elapsed_ms: an event was not recorded");
  auto ea = static_cast<cudaEvent_t>(a.impl.get()), eb = static_cast<cudaEvent_t>(b.impl.get());
  wait_event(eb, "elapsed_ms");
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, ea, eb));
  return ms;
}

void CudaBackendImpl::synchronize() {
  CUDA_CHECK(cudaSetDevice(device_));
  // Hooks first: the compute stream may wait on a communicator's stream, and the communicator's
  // hook waits for that stream under its deadline (aborting a hung NCCL call) where a plain
  // stream synchronize here would block forever.
  for (auto& h : hooks_) h.second();
  wait_stream("synchronize");
  resolve_pending();
  take_reference();
}

double CudaBackendImpl::compute_busy_ms() const {
  double t = Backend::compute_busy_ms();
  for (const PendingOp& op : pending_) {
    if (!op.ended) continue;
    float ms = 0;
    wait_event(op.e1, "compute_busy_ms");
    CUDA_CHECK(cudaEventElapsedTime(&ms, op.e0, op.e1));
    t += ms;
  }
  return t;
}

// ---- memory -------------------------------------------------------------------------------------
Tensor CudaBackendImpl::alloc(std::vector<int64_t> shape, DType dtype, MemKind kind) {
  Tensor t;
  t.dtype = dtype;
  t.kind = kind;
  t.shape = std::move(shape);
  const int64_t n = t.numel();  // validates the shape
  const size_t bytes = static_cast<size_t>(n) * dtype_size(dtype);
  {  // before allocating: over --mem-limit it throws with nothing held
    std::lock_guard<std::mutex> lk(alloc_->mu);
    mem_.on_alloc(kind, static_cast<int64_t>(bytes));
  }
  void* p = nullptr;
  try {
    p = alloc_->alloc.allocate(bytes);
  } catch (...) {
    std::lock_guard<std::mutex> lk(alloc_->mu);
    mem_.on_free(kind, static_cast<int64_t>(bytes));
    throw;
  }
  std::shared_ptr<AllocState> st = alloc_;
  t.holder = std::shared_ptr<void>(p, [st, bytes, kind](void* q) { st->release(q, bytes, kind); });
  t.data = p;
  if (poison_ && n > 0)
    cuda::fill(p, dtype, n, std::numeric_limits<float>::quiet_NaN(), stream_);
  return t;
}

void* CudaBackendImpl::scratch(size_t bytes) {
  if (bytes > scratch_bytes_) {
    if (scratch_) CUDA_CHECK(cudaFree(scratch_));
    scratch_ = nullptr;
    scratch_bytes_ = 0;
    CUDA_CHECK(cudaMalloc(&scratch_, bytes));
    scratch_bytes_ = bytes;
  }
  return scratch_;
}

float* CudaBackendImpl::decode_scratch(int64_t floats) {
  if (decode_scratch_.empty() || decode_scratch_.numel() < floats) {
    decode_scratch_ = Tensor{};  // its block goes back to the cache first (stream-ordered reuse)
    decode_scratch_ = alloc({floats}, DType::f32, MemKind::activations);
  }
  return decode_scratch_.ptr<float>();
}

void CudaBackendImpl::upload(const std::vector<float>& host, Tensor& dst) {
  const int64_t n = dst.numel();
  if (static_cast<int64_t>(host.size()) != n)
    throw std::invalid_argument("upload: " + std::to_string(host.size()) +
                                " host values for a tensor of " + std::to_string(n) +
                                " elements " + dst.shape_str());
  if (n == 0) return;
  CUDA_CHECK(cudaSetDevice(device_));
  const size_t fbytes = static_cast<size_t>(n) * sizeof(float);
  if (dst.dtype == DType::f32) {
    CUDA_CHECK(cudaMemcpyAsync(dst.data, host.data(), fbytes, cudaMemcpyHostToDevice, stream_));
  } else {
    void* s = scratch(fbytes);
    CUDA_CHECK(cudaMemcpyAsync(s, host.data(), fbytes, cudaMemcpyHostToDevice, stream_));
    cuda::convert(dst.data, dst.dtype, s, DType::f32, n, stream_);
  }
  wait_stream("upload");
}

std::vector<float> CudaBackendImpl::download(const Tensor& src) {
  const int64_t n = src.numel();
  std::vector<float> out(static_cast<size_t>(n));
  if (n == 0) return out;
  CUDA_CHECK(cudaSetDevice(device_));
  const size_t fbytes = static_cast<size_t>(n) * sizeof(float);
  const void* from = src.data;
  if (src.dtype != DType::f32) {
    void* s = scratch(fbytes);
    cuda::convert(s, DType::f32, src.data, src.dtype, n, stream_);
    from = s;
  }
  CUDA_CHECK(cudaMemcpyAsync(out.data(), from, fbytes, cudaMemcpyDeviceToHost, stream_));
  wait_stream("download");
  return out;
}

// Stream-ordered after the compute issued before the call; returns when the copy is complete.
void CudaBackendImpl::copy_to_host_raw(void* dst, const Tensor& src, size_t bytes) {
  if (bytes > src.bytes())
    throw std::invalid_argument("copy_to_host_raw: " + std::to_string(bytes) +
                                " bytes from a tensor of " + std::to_string(src.bytes()));
  if (!bytes) return;
  CUDA_CHECK(cudaSetDevice(device_));
  CUDA_CHECK(cudaMemcpyAsync(dst, src.data, bytes, cudaMemcpyDeviceToHost, stream_));
  wait_stream("copy_to_host_raw");
}

void CudaBackendImpl::copy_from_host_raw(Tensor& dst, const void* src, size_t bytes) {
  if (bytes > dst.bytes())
    throw std::invalid_argument("copy_from_host_raw: " + std::to_string(bytes) +
                                " bytes into a tensor of " + std::to_string(dst.bytes()));
  if (!bytes) return;
  CUDA_CHECK(cudaSetDevice(device_));
  CUDA_CHECK(cudaMemcpyAsync(dst.data, src, bytes, cudaMemcpyHostToDevice, stream_));
  wait_stream("copy_from_host_raw");  // the caller may reuse `src` on return
}

// ---- operations: Backend's entry points have checked the arguments, applied the replay gate
// (layout ops run in replay mode too) and bracket each call with op_begin / op_end ------------
void CudaBackendImpl::do_fill(Tensor& t, float value) {
  cuda::fill(t.data, t.dtype, t.numel(), value, stream_);
}

void CudaBackendImpl::do_copy_2d(Tensor& dst, int64_t dst_pitch, const Tensor& src,
                                 int64_t src_pitch, int64_t rows, int64_t cols) {
  const size_t es = dtype_size(dst.dtype);
  if (rows == 1 || (dst_pitch == cols && src_pitch == cols)) {
    CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, size_t(rows) * size_t(cols) * es,
                               cudaMemcpyDeviceToDevice, stream_));
  } else {
    CUDA_CHECK(cudaMemcpy2DAsync(dst.data, size_t(dst_pitch) * es, src.data, size_t(src_pitch) * es,
                                 size_t(cols) * es, size_t(rows), cudaMemcpyDeviceToDevice, stream_));
  }
}

void CudaBackendImpl::do_convert(Tensor& dst, const Tensor& src) {
  cuda::convert(dst.data, dst.dtype, src.data, src.dtype, dst.numel(), stream_);
}

void CudaBackendImpl::do_add(Tensor& out, const Tensor& a, const Tensor& b) {
  cuda::add(out.data, out.dtype, a.data, a.dtype, b.data, b.dtype, out.numel(), stream_);
}

// The SwiGLU kernels take one storage dtype for all their tensors (the block's run dtype).
void require_one_dtype(const char* op, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (t->dtype != (*ts.begin())->dtype)
      throw std::invalid_argument(std::string("cuda ") + op + ": tensors of different dtypes (" +
                                  dtype_name((*ts.begin())->dtype) + ", " + dtype_name(t->dtype) + ")");
}

void CudaBackendImpl::do_swiglu_fwd(const Tensor& a, const Tensor& b, Tensor& g) {
  require_one_dtype("swiglu_fwd", {&a, &b, &g});
  cuda::swiglu_fwd(a.data, b.data, a.dtype, g.data, g.numel(), stream_);
}

void CudaBackendImpl::do_swiglu_bwd(const Tensor& a, const Tensor& b, const Tensor& dg, Tensor& da, Tensor& db) {
  require_one_dtype("swiglu_bwd", {&a, &b, &dg, &da, &db});
  cuda::swiglu_bwd(a.data, b.data, dg.data, a.dtype, da.data, db.data, a.numel(), stream_);
}

void CudaBackendImpl::do_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                              float alpha, const Tensor& A, int64_t lda, const Tensor& B,
                              int64_t ldb, float beta, Tensor& C, int64_t ldc) {
  if (k == 0) {
    cuda::scale_2d(C.data, C.dtype, m, n, ldc, beta, stream_);
    return;
  }
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands. A
  // row-major matrix with pitch ld is its transpose in column-major with the same ld.
  CUBLAS_CHECK(cublasGemmEx(cublas_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                            trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, int(n), int(m), int(k), &alpha,
                            B.data, cuda_type(B.dtype), int(ldb), A.data, cuda_type(A.dtype),
                            int(lda), &beta, C.data, cuda_type(C.dtype), int(ldc),
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void CudaBackendImpl::do_gemm_batched(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                                      const Tensor& A, int64_t lda, int64_t sa, const Tensor& B, int64_t ldb,
                                      int64_t sb, float beta, Tensor& C, int64_t ldc, int64_t sc, int64_t batch) {
  if (k == 0 || batch > INT32_MAX) {  // (the loop: the scale kernel, or more entries than cuBLAS counts)
    Backend::do_gemm_batched(trans_a, trans_b, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
    return;
  }
  // As do_gemm, operands swapped for cuBLAS's column-major view; the strides are in elements.
  CUBLAS_CHECK(cublasGemmStridedBatchedEx(cublas_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                          trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, int(n), int(m), int(k), &alpha,
                                          B.data, cuda_type(B.dtype), int(ldb), (long long)sb, A.data,
                                          cuda_type(A.dtype), int(lda), (long long)sa, &beta, C.data,
                                          cuda_type(C.dtype), int(ldc), (long long)sc, int(batch),
                                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void CudaBackendImpl::do_rmsnorm_fwd(const Tensor& x, const Tensor& w, float eps, int64_t rows,
                                     Tensor& y, Tensor& rstd) {
  cuda::rmsnorm_fwd(x.data, w.data, x.dtype, eps, rows, w.numel(), y.data, rstd.ptr<float>(),
                    stream_);
}

void CudaBackendImpl::do_rmsnorm_bwd(const Tensor& x, const Tensor& w, const Tensor& rstd,
                                     const Tensor& dy, int64_t rows, Tensor& dx, Tensor& dw) {
  cuda::rmsnorm_bwd(x.data, w.data, x.dtype, rstd.ptr<float>(), dy.data, rows, w.numel(), dx.data,
                    dw.ptr<float>(), stream_);
}

const int32_t* CudaBackendImpl::device_docs(const DocStarts& docs) {
  if (!docs || docs->size() <= 1) return nullptr;
  auto it = docs_.find(docs.get());
  if (it != docs_.end()) return it->second.dev;
  DeviceDocs& dd = docs_[docs.get()];
  dd.host = docs;
  dd.host32.assign(docs->begin(), docs->end());  // check_attn_mask bounds them by 2^31-1
  void* dev = nullptr;
  CUDA_CHECK(cudaMalloc(&dev, dd.host32.size() * sizeof(int32_t)));
  dd.dev = static_cast<int32_t*>(dev);
  // On the compute stream, ahead of the kernels that read it: a plain cudaMemcpy runs on the
  // legacy default stream, which does not order work on the non-blocking compute stream (the
  // first kernel could read the starts before they land). Its source lives in dd.host32.
  CUDA_CHECK(cudaMemcpyAsync(dd.dev, dd.host32.data(), dd.host32.size() * sizeof(int32_t),
                             cudaMemcpyHostToDevice, stream_));
  return dd.dev;
}

void CudaBackendImpl::do_rope(Tensor& x, int64_t B, int64_t T, int heads, int d, int64_t pitch,
                              const Positions& pos, double theta, bool inverse,
                              const DocStarts& docs) {
  cuda::rope(x.data, x.dtype, B, T, heads, d, pitch, cuda::to_pos_arg(pos), device_docs(docs),
             docs ? int(docs->size()) : 0, theta, inverse, stream_);
}

void CudaBackendImpl::check_attn_support(const char* op, const AttnShape& s, DType dt) const {
  // The kernels do_attn_fwd / do_attn_bwd pick: attn_fwd with nq == 1 the decode kernels (any
  // dtype), else fp32 the SIMT kernels; those take two head dims, d (q, k) and dv (v, o), each up
  // to their limit. bf16/fp16 otherwise: the tensor-core kernels, built for d = 64, 128 and dv == d.
  const bool decode = std::strcmp(op, "attn_fwd") == 0 && s.nq == 1;
  const int d = s.d, dv = s.vdim();
  const std::string dims = "d = " + std::to_string(d) + ", d_v = " + std::to_string(dv);
  if (s.p_e4m3)
    throw std::invalid_argument(std::string(op) + ": fp8 attention (P in e4m3) is emulated by the cpu backend only");
  if (s.v_in_k && !decode)
    throw std::invalid_argument(std::string(op) + ": values inside the key rows (v_in_k) are read by the cuda " +
                                "decode kernel only (attn_fwd with nq = 1; got nq = " + std::to_string(s.nq) + ")");
  if (decode || dt == DType::f32) {
    const int limit = decode ? cuda::kAttnDecodeMaxHeadDim : cuda::kAttnF32MaxHeadDim;
    if (d > limit || dv > limit)
      throw std::invalid_argument(std::string(op) + ": head dims " + dims + " are not supported by the cuda " +
                                  (decode ? "decode (nq = 1)" : "fp32") + " kernels (d, d_v <= " +
                                  std::to_string(limit) + ")");
  } else {
    if (!cuda::attn_head_dim_supported(d))
      throw std::invalid_argument(std::string(op) + ": head dim " + std::to_string(d) +
                                  " is not supported by the cuda " + dtype_name(dt) +
                                  " kernels (built for d = " + cuda::attn_supported_head_dims() +
                                  "; fp32 takes any d <= " + std::to_string(cuda::kAttnF32MaxHeadDim) + ")");
    if (dv != d)
      throw std::invalid_argument(std::string(op) + ": head dims " + dims + " are not supported by the cuda " +
                                  dtype_name(dt) + " tensor-core kernels (built for d_v == d); fp32 takes two " +
                                  "head dims (d, d_v <= " + std::to_string(cuda::kAttnF32MaxHeadDim) +
                                  "), as does the decode kernel (attn_fwd with nq = 1) in any dtype");
    // Device capability: the kernel's shared memory against the opt-in limit.
    const bool bwd = std::strcmp(op, "attn_bwd") == 0;
    const std::string why = cuda::smem_shortfall(bwd ? "attn_bwd" : "attn_fwd", d,
                                                 cuda::attn_smem_bytes(bwd, d), smem_optin_, device_desc_);
    if (!why.empty()) throw std::runtime_error(why + " (" + error_context() + ")");
  }
  if (s.B > INT32_MAX || s.nq > INT32_MAX || s.nk > INT32_MAX)
    throw std::invalid_argument(std::string(op) + ": B, nq and nk must be < 2^31");
}

cuda::AttnArgs CudaBackendImpl::attn_args(const AttnShape& s, DType dt, const Positions& qpos,
                                          const Positions& kpos) {
  cuda::AttnArgs a;
  a.dtype = dt;
  a.B = int(s.B);
  a.nq = int(s.nq);
  a.nk = int(s.nk);
  a.hq = s.hq;
  a.hk = s.hk;
  a.v_row = int(s.v_row());
  a.rep = s.group();
  a.head0 = s.head0;
  a.d = s.d;
  a.dv = s.vdim();
  a.mask.causal = s.causal ? 1 : 0;
  a.mask.window = int32_t(s.window);  // check_attn_mask bounds it by 2^31-1
  a.mask.docs = device_docs(s.docs);
  a.mask.ndocs = s.docs ? int32_t(s.docs->size()) : 0;
  a.scale = attn_scale(s);
  a.qpos = cuda::to_pos_arg(qpos);
  a.kpos = cuda::to_pos_arg(kpos);
  return a;
}

void CudaBackendImpl::do_attn_fwd(const AttnShape& s, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const Positions& qpos, const Positions& kpos,
                                  Tensor& o, Tensor& lse) {
  cuda::AttnArgs a = attn_args(s, q.dtype, qpos, kpos);
  a.q = q.data;
  a.k = k.data;
  a.v = v.data;
  a.o = o.data;
  a.lse = lse.ptr<float>();
  if (s.nq == 1) {  // a decode step: split along the keys (attention_decode_kernel.cuh)
    if (decode_target_blocks_ == 0) decode_target_blocks_ = cuda::attn_decode_target_blocks(device_);
    const int64_t floats = cuda::attn_decode_scratch_floats(s.B, s.hq, s.vdim(), decode_target_blocks_);
    cuda::attn_decode(a, decode_scratch(floats), floats, decode_target_blocks_, stream_);
  } else if (a.dtype == DType::f32)
    cuda::attn_fwd_f32(a, stream_);
  else
    cuda::attn_fwd(a, stream_);
}

void CudaBackendImpl::do_attn_merge(const AttnShape& s, Tensor& o_acc, Tensor& lse_acc,
                                    const Tensor& o_blk, const Tensor& lse_blk) {
  cuda::attn_merge(o_acc.dtype, o_acc.data, lse_acc.ptr<float>(), o_blk.data,
                   lse_blk.ptr<float>(), s.B, s.nq, s.hq, s.vdim(), stream_);
}

void CudaBackendImpl::do_attn_bwd_delta(const AttnShape& s, const Tensor& o, const Tensor& dout,
                                        Tensor& delta) {
  cuda::attn_bwd_delta(o.dtype, o.data, dout.data, delta.ptr<float>(), s.B, s.nq, s.hq, s.vdim(),
                       stream_);
}

void CudaBackendImpl::do_attn_sink_fwd(const AttnShape& s, const Tensor& sinks, Tensor& o, Tensor& lse) {
  cuda::attn_sink_fwd(o.dtype, sinks.ptr<float>(), o.data, lse.ptr<float>(), s.B, s.nq, s.hq, s.vdim(), stream_);
}

void CudaBackendImpl::do_attn_sink_bwd(const AttnShape& s, const Tensor& sinks, const Tensor& o,
                                       const Tensor& dout, const Tensor& lse, Tensor& dsinks) {
  cuda::attn_sink_bwd(o.dtype, sinks.ptr<float>(), o.data, dout.data, lse.ptr<float>(), dsinks.ptr<float>(), s.B,
                      s.nq, s.hq, s.vdim(), stream_);
}

void CudaBackendImpl::do_attn_bwd(const AttnShape& s, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const Tensor& dout, const Tensor& lse,
                                  const Tensor& delta, const Positions& qpos,
                                  const Positions& kpos, Tensor& dq, Tensor& dk, Tensor& dv) {
  cuda::AttnArgs a = attn_args(s, q.dtype, qpos, kpos);
  a.q = q.data;
  a.k = k.data;
  a.v = v.data;
  a.dout = dout.data;
  a.lse_in = lse.ptr<float>();
  a.delta = delta.ptr<float>();
  a.dq = dq.ptr<float>();
  a.dk = dk.ptr<float>();
  a.dv_grad = dv.ptr<float>();
  if (a.dtype == DType::f32)
    cuda::attn_bwd_f32(a, stream_);
  else
    cuda::attn_bwd(a, stream_);
}

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& opt) {
  return std::make_unique<CudaBackendImpl>(opt);
}

}  // namespace cpbench
