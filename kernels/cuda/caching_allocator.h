// A size-bucketed cache of cudaMalloc blocks for one device, used in the order of one stream
// (the backend's compute stream). A freed block goes straight back to its bucket: reuse by later
// work on the same stream is ordered after every earlier use, and communication streams are
// joined back into the compute stream before a buffer can be released (Communicator contract).
// Thread-safe (tensors may be released on any thread).
#pragma once
#include <cstddef>
#include <map>
#include <mutex>

namespace cpbench::cuda {

class CachingAllocator {
 public:
  explicit CachingAllocator(int device) : device_(device) {}
  ~CachingAllocator();  // frees the cached blocks (errors ignored: may run at process exit)
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of round_size(bytes) bytes (>= bytes, 256-byte aligned). On cudaMalloc failure the
  // cache is emptied and the allocation retried once; then std::runtime_error.
  void* allocate(size_t bytes);
  // Returns a block of round_size(bytes) to its bucket. Never throws.
  void release(void* p, size_t bytes) noexcept;
  // cudaFree every cached (unused) block.
  void empty_cache();

  size_t reserved_bytes() const;  // held from cudaMalloc: in use + cached
  size_t cached_bytes() const;

  // Buckets: multiples of 512 B up to 1 MiB, then 8 sizes per power of two (<= 12.5% slack).
  static size_t round_size(size_t bytes);

 private:
  void free_cached_locked();
  int device_;
  mutable std::mutex mu_;
  std::multimap<size_t, void*> free_;  // bucket size -> cached blocks
  size_t reserved_ = 0, cached_ = 0;
};

}  // namespace cpbench::cuda
