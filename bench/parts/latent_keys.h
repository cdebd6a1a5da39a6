// MLA's latent travel (--mla-travel latent; DESIGN "Multi-head latent attention"): a ring's K,V
// block travels as the latent its keys and values are up-projected from, [c_kv | k_R] per token
// (r_kv + d_rope values: the normed KV latent and the roped key shared by every head), instead of
// H heads of k (d_nope + d_rope) and v (d_v). Each receiver up-projects the block it holds
// (k_C = c_kv·W_UK, v = c_kv·W_UV; k = [k_C | k_R] per head) before the attention kernel, in
// both passes; in the backward it contracts the block's dK, dV back to the latent's gradient
// (dc_kv = dk_C·W_UKᵀ + dv·W_UVᵀ, dk_R = Σ over heads), which travels back to the owner in the
// block's accumulator, and adds the up-projections' weight gradients (c_kvᵀ·dk_C, c_kvᵀ·dv) to
// its own partial sums. A ring core (ring_core.h) runs it through this interface; MLA's
// projections (bench/block/mla.h) implement it.
//
// FLOPs: the owner's own block is the layer's up-projection (counted as model FLOPs where the
// model counts it: the forward's by the projections, the backward's contraction of its own block
// here); every other block's expansion and contraction, and the backward's re-expansion, are
// hardware FLOPs only (HFU, not MFU): the price of moving 576 values per token instead of
// H·(d + d_v).
#pragma once
#include <cstdint>

#include "kernels/backend.h"

namespace cpbench {

class LatentKeys {
 public:
  virtual ~LatentKeys() = default;
  // Values per token of the block that travels: r_kv + d_rope.
  virtual int64_t width() const = 0;
  // This rank's latent [B·n, width()] (run dtype), written by the forward's projections.
  virtual const Tensor& local() const = 0;
  // A block's latent `lat` [B·n, width()] -> k [B, n, H, d], v [B, n, H, d_v] (run dtype, the
  // receiver's heads), overwritten; hardware FLOPs only.
  virtual void expand(Backend& be, const Tensor& lat, Tensor& k, Tensor& v) = 0;
  // A block's dk, dv (float32, shaped as expand's k, v) -> its latent's gradient `dlat` [B·n,
  // width()] (float32, overwritten); adds c_kvᵀ·dk_C and c_kvᵀ·dv to the up-projections' weight
  // gradients. `model_share`: 1 for the owner's own block (the layer's backward GEMMs), 0 else.
  virtual void contract(Backend& be, const Tensor& lat, const Tensor& dk, const Tensor& dv, Tensor& dlat,
                        double model_share) = 0;
  // Where the ring leaves this rank's tokens' latent gradient, every rank's contributions summed
  // [B·n, width()] (float32), for the projections' backward.
  virtual Tensor& grad() = 0;
};

}  // namespace cpbench
