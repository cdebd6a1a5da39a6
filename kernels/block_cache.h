// A size-bucketed cache of raw memory blocks, independent of where the memory lives (host memory
// for the CPU backend; the CUDA backend's cache follows the same bucket rule). A freed block goes
// back to its bucket and is handed out again for any request that rounds to the same size, so a
// timed iteration that frees and re-allocates buffers of the sizes of the previous iteration
// touches no fresh pages. Thread-safe (tensors may be released on any thread).
#pragma once
#include <cstddef>
#include <functional>
#include <map>
#include <mutex>

namespace cpbench {

class BlockCache {
 public:
  using RawAlloc = std::function<void*(size_t bytes)>;  // nullptr on failure
  using RawFree = std::function<void(void* p)>;
  // before_free (optional) runs once before cached blocks are freed (CUDA: wait for the device,
  // since queued work may still use a released block).
  BlockCache(RawAlloc raw_alloc, RawFree raw_free, std::function<void()> before_free = nullptr)
      : raw_alloc_(std::move(raw_alloc)), raw_free_(std::move(raw_free)), before_free_(std::move(before_free)) {}
  ~BlockCache() { empty_cache(); }
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  // A block of round_size(bytes) bytes, from the cache or fresh. When the fresh allocation fails
  // the cache is emptied and it is retried once; nullptr if it fails again.
  void* allocate(size_t bytes);
  // Returns a block obtained for `bytes` to its bucket. Never throws.
  void release(void* p, size_t bytes) noexcept;
  // Frees every cached (unused) block.
  void empty_cache() noexcept;

  size_t reserved_bytes() const;  // held from the raw allocator: in use + cached
  size_t cached_bytes() const;

  // Buckets: multiples of 512 B up to 1 MiB, then 8 sizes per power of two (<= 12.5% slack).
  static size_t round_size(size_t bytes);

 private:
  void empty_cache_locked() noexcept;
  RawAlloc raw_alloc_;
  RawFree raw_free_;
  std::function<void()> before_free_;
  mutable std::mutex mu_;
  std::multimap<size_t, void*> free_;  // bucket size -> cached blocks
  size_t reserved_ = 0, cached_ = 0;
};

}  // namespace cpbench
