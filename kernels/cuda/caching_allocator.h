// The size-bucketed cache (kernels/block_cache.h) over cudaMalloc for one device, used in the
// order of one stream (the backend's compute stream). A freed block goes straight back to its
// bucket: reuse by later work on the same stream is ordered after every earlier use, and
// communication streams are joined back into the compute stream before a buffer can be released
// (Communicator contract). Before cached blocks are returned to CUDA the device is synchronised
// (queued work may still use them). Thread-safe (tensors may be released on any thread).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels/block_cache.h"

namespace cpbench::cuda {

class CachingAllocator {
 public:
  explicit CachingAllocator(int device);
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of round_size(bytes) bytes (>= bytes, 256-byte aligned). On cudaMalloc failure the
  // cache is emptied and the allocation retried once; then std::runtime_error naming the sizes.
  void* allocate(size_t bytes);
  // Returns a block of round_size(bytes) to its bucket. Never throws.
  void release(void* p, size_t bytes) noexcept { cache_.release(p, bytes); }
  // cudaFree every cached (unused) block.
  void empty_cache() { cache_.empty_cache(); }

  size_t reserved_bytes() const { return cache_.reserved_bytes(); }  // in use + cached
  size_t cached_bytes() const { return cache_.cached_bytes(); }
  static size_t round_size(size_t bytes) { return BlockCache::round_size(bytes); }

 private:
  int device_;
  cudaError_t last_error_ = cudaSuccess;  // of the last cudaMalloc (set under the cache's lock)
  BlockCache cache_;
};

}  // namespace cpbench::cuda
