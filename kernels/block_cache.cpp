#include "kernels/block_cache.h"

namespace cpbench {

size_t BlockCache::round_size(size_t bytes) {
  constexpr size_t kSmall = 512, kLarge = size_t(1) << 20;
  if (bytes == 0) bytes = 1;
  if (bytes <= kLarge) return (bytes + kSmall - 1) / kSmall * kSmall;
  size_t p = kLarge;
  while (p * 2 <= bytes) p *= 2;  // largest power of two <= bytes
  const size_t step = p / 8;
  return (bytes + step - 1) / step * step;
}

void* BlockCache::allocate(size_t bytes) {
  const size_t size = round_size(bytes);
  std::lock_guard<std::mutex> lk(mu_);
  auto it = free_.find(size);
  if (it != free_.end()) {
    void* p = it->second;
    free_.erase(it);
    cached_ -= size;
    return p;
  }
  void* p = raw_alloc_(size);
  if (!p && !free_.empty()) {
    empty_cache_locked();
    p = raw_alloc_(size);
  }
  if (p) reserved_ += size;
  return p;
}

void BlockCache::release(void* p, size_t bytes) noexcept {
  if (!p) return;
  const size_t size = round_size(bytes);
  std::lock_guard<std::mutex> lk(mu_);
  try {
    free_.emplace(size, p);
    cached_ += size;
  } catch (...) {  // no memory for the map node: give the block back instead
    raw_free_(p);
    reserved_ -= size;
  }
}

void BlockCache::empty_cache() noexcept {
  std::lock_guard<std::mutex> lk(mu_);
  empty_cache_locked();
}

void BlockCache::empty_cache_locked() noexcept {
  if (free_.empty()) return;
  if (before_free_) before_free_();
  for (auto& kv : free_) {
    raw_free_(kv.second);
    reserved_ -= kv.first;
  }
  free_.clear();
  cached_ = 0;
}

size_t BlockCache::reserved_bytes() const {
  std::lock_guard<std::mutex> lk(mu_);
  return reserved_;
}

size_t BlockCache::cached_bytes() const {
  std::lock_guard<std::mutex> lk(mu_);
  return cached_;
}

}  // namespace cpbench
