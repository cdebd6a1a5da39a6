// Size-bucketed caching allocator over cudaMalloc (see caching_allocator.h).
#include "kernels/cuda/caching_allocator.h"

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_check.h"

namespace cpbench::cuda {

size_t CachingAllocator::round_size(size_t bytes) {
  constexpr size_t kSmall = 512, kLarge = size_t(1) << 20;
  if (bytes == 0) bytes = 1;
  if (bytes <= kLarge) return (bytes + kSmall - 1) / kSmall * kSmall;
  size_t p = kLarge;
  while (p * 2 <= bytes) p *= 2;  // largest power of two <= bytes
  const size_t step = p / 8;
  return (bytes + step - 1) / step * step;
}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lk(mu_);
  int prev = -1;
  if (cudaGetDevice(&prev) != cudaSuccess) prev = -1;
  if (cudaSetDevice(device_) == cudaSuccess) {
    for (auto& kv : free_) (void)cudaFree(kv.second);
    if (prev >= 0) (void)cudaSetDevice(prev);
  }
  free_.clear();
  (void)cudaGetLastError();
}

void* CachingAllocator::allocate(size_t bytes) {
  const size_t size = round_size(bytes);
  std::lock_guard<std::mutex> lk(mu_);
  auto it = free_.find(size);
  if (it != free_.end()) {
    void* p = it->second;
    free_.erase(it);
    cached_ -= size;
    return p;
  }
  CUDA_CHECK(cudaSetDevice(device_));
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, size);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    free_cached_locked();
    e = cudaMalloc(&p, size);
  }
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    (void)cudaMemGetInfo(&free_b, &total_b);
    throw std::runtime_error("cuda allocator: cudaMalloc of " + std::to_string(size) +
                             " bytes failed (" + cudaGetErrorString(e) + ") on " + error_context() +
                             "; this process holds " + std::to_string(reserved_) +
                             " bytes, the device has " + std::to_string(free_b) + " of " +
                             std::to_string(total_b) + " bytes free");
  }
  reserved_ += size;
  return p;
}

void CachingAllocator::release(void* p, size_t bytes) noexcept {
  if (!p) return;
  const size_t size = round_size(bytes);
  try {
    std::lock_guard<std::mutex> lk(mu_);
    free_.emplace(size, p);
    cached_ += size;
  } catch (...) {
    // emplace could only fail on host memory exhaustion: give the block back to CUDA instead.
    (void)cudaFree(p);
  }
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lk(mu_);
  free_cached_locked();
}

void CachingAllocator::free_cached_locked() {
  if (free_.empty()) return;
  // Blocks may still be used by queued work: wait for the device before returning them.
  (void)cudaSetDevice(device_);
  (void)cudaDeviceSynchronize();
  for (auto& kv : free_) {
    (void)cudaFree(kv.second);
    reserved_ -= kv.first;
  }
  free_.clear();
  cached_ = 0;
}

size_t CachingAllocator::reserved_bytes() const {
  std::lock_guard<std::mutex> lk(mu_);
  return reserved_;
}

size_t CachingAllocator::cached_bytes() const {
  std::lock_guard<std::mutex> lk(mu_);
  return cached_;
}

}  // namespace cpbench::cuda
