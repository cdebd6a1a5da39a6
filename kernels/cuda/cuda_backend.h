// The CUDA backend: bf16/fp16 (and fp32) storage, fp32 accumulation, cuBLAS GEMMs, own
// tensor-core attention kernels for bf16/fp16 (head dims 64, 128; simple SIMT kernels for fp32,
// any head dim <= 256), one compute stream per process, a caching allocator.
//
// Device: local_rank % device count (several ranks may share a GPU with --comm mpi; NCCL needs
// one GPU per rank). Needs compute capability 8.0 or newer.
//
// Timing: every compute operation is bracketed by two events on the compute stream (pooled, so
// the cost is two cudaEventRecord calls per op). synchronize() turns them into compute_log()
// records on the cpbench::now_ms() axis: the stream is idle at that point, so an event recorded
// then fires within microseconds of the host clock read beside it, and earlier events are placed
// by their elapsed time from that reference (error: the few microseconds of that record, plus
// clock drift within one synchronize interval). CPBENCH_CUDA_OP_EVENTS=0 turns the per-op events
// off (compute_log stays empty and compute_busy_ms() is 0).
//
// Replay mode (set_compute_enabled(false)): fill, copy_2d and convert still run (layout), as on
// the CPU backend; everything else is a no-op.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <memory>

#include "kernels/backend.h"

namespace cpbench {

// What CUDA-aware code (the NCCL communicator, tools) needs beyond Backend. Obtain it with
// dynamic_cast<CudaBackend*>(&backend).
class CudaBackend : public Backend {
 public:
  virtual int device() const = 0;
  // The stream every operation of this backend is issued on.
  virtual cudaStream_t compute_stream() const = 0;
  // fn runs at the end of every synchronize(), after the compute stream has drained (the NCCL
  // communicator resolves its event timings there). Returns an id for remove_sync_hook.
  virtual int add_sync_hook(std::function<void()> fn) = 0;
  virtual void remove_sync_hook(int id) = 0;
  // Bytes held from cudaMalloc by the caching allocator (in use + cached). MemStats count the
  // tensors' own bytes.
  virtual size_t reserved_bytes() const = 0;
  virtual void empty_cache() = 0;
};

// Throws std::runtime_error when no CUDA device is usable (message says why).
std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& opt);

}  // namespace cpbench
