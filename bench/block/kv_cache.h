// The KV cache one rank holds (--cached prefill, --pass decode; DESIGN "Persistent-KV prefill",
// "Decode"): k and v [B, rows, heads, d] in the run dtype, rows = the rank's cached tokens (seeded
// as the roped k, v a previous prefill would have written: InputId::k_cache, v_cache) then the
// rows its new tokens go to (prefill: its new tokens, rewritten every forward; decode: one slot
// per step it owns). One owner for every strategy: the block's cache (block.h) and usp's cache of
// a ring index's tokens for the heads its all-to-all hands a member (ulysses_ring_layer.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "bench/strategy.h"

namespace cpbench {

class TensorRegistry;  // bench/block/block.h

class KvCache {
 public:
  // Registers k_cache and v_cache [B, cached.count() + extra, heads.size(), d] in `reg` and seeds
  // the cached rows (positions `cached` of the [B, C, G*d] cache) with the original KV head
  // heads[c] in local head c (a head repeats when the KV heads are replicated). The extra rows
  // start at zero.
  // Under MLA's decode (s.latent_cache()) the cache is one latent row per token instead:
  // k_cache [B, rows, 1, r_kv + d_rope] = [c_kv | k_R] (InputId::k_cache; `heads` is ignored), and
  // v() is that same tensor: the values are its first r_kv columns (AttnShape::v_in_k).
  void setup(TensorRegistry& reg, Backend& be, uint64_t seed, const LayerShape& s, const Positions& cached,
             int64_t extra, const std::vector<int64_t>& heads);
  bool empty() const { return k_.empty(); }
  Tensor& k() { return k_; }
  Tensor& v() { return v_; }
  int64_t cached_rows() const { return cached_; }
  // Appends new tokens: rows [first, first + n) of every batch row from src k, v [B, n, src_heads,
  // d], their heads [h0, h0 + heads) (n = 1, one decode step, or all src_heads). 0 bytes sent.
  void write(Backend& be, const Tensor& k, const Tensor& v, int64_t first, int h0 = 0);
  // The latent cache's append: one step's latent rows [B, 1, r_kv + d_rope] into row `first`.
  void write_latent(Backend& be, const Tensor& latent, int64_t first);
  // The bytes of the cached rows' k and v, or latents (what the report's kv_cache_bytes counts).
  int64_t held_bytes() const;

 private:
  Tensor k_, v_;
  int64_t cached_ = 0;
  bool latent_ = false;  // MLA's decode: k_ holds latents, v_ is k_
};

}  // namespace cpbench
