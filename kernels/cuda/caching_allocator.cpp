// The CUDA side of the block cache (see caching_allocator.h): cudaMalloc / cudaFree on one device.
#include "kernels/cuda/caching_allocator.h"

#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_check.h"

namespace cpbench::cuda {

CachingAllocator::CachingAllocator(int device)
    : device_(device),
      cache_(
          [this](size_t n) -> void* {
            void* p = nullptr;
            if (cudaSetDevice(device_) != cudaSuccess) return nullptr;
            last_error_ = cudaMalloc(&p, n);
            if (last_error_ != cudaSuccess) {
              (void)cudaGetLastError();
              return nullptr;
            }
            return p;
          },
          [this](void* p) {  // errors ignored: may run at process exit
            (void)cudaSetDevice(device_);
            (void)cudaFree(p);
            (void)cudaGetLastError();
          },
          [this] {
            (void)cudaSetDevice(device_);
            (void)cudaDeviceSynchronize();
            (void)cudaGetLastError();
          }) {}

void* CachingAllocator::allocate(size_t bytes) {
  void* p = cache_.allocate(bytes);
  if (p) return p;
  size_t free_b = 0, total_b = 0;
  (void)cudaMemGetInfo(&free_b, &total_b);
  (void)cudaGetLastError();
  throw std::runtime_error("cuda allocator: cudaMalloc of " + std::to_string(round_size(bytes)) + " bytes failed (" +
                           cudaGetErrorString(last_error_) + ") on " + error_context() + "; this process holds " +
                           std::to_string(reserved_bytes()) + " bytes, the device has " + std::to_string(free_b) +
                           " of " + std::to_string(total_b) + " bytes free");
}

}  // namespace cpbench::cuda
