// MLA's latent travel (--mla-travel latent; DESIGN "Multi-head latent attention"): what a level
// moves is the latent the keys and values are up-projected from, [c_kv | k_R] per token
// (r_kv + d_rope values: the normed KV latent and the roped key shared by every head), instead of
// H heads of k (d_nope + d_rope) and v (d_v).
//   ring level: a K,V block travels as its latent; each receiver up-projects the block it holds
//     (k_C = c_kv·W_UK, v = c_kv·W_UV; k = [k_C | k_R] per head) before the attention kernel, in
//     both passes; in the backward it contracts the block's dK, dV back to the latent's gradient
//     (dc_kv = dk_C·W_UKᵀ + dv·W_UVᵀ, dk_R = Σ over heads), which travels back to the owner in the
//     block's accumulator, and adds the up-projections' weight gradients (c_kvᵀ·dk_C, c_kvᵀ·dv)
//     to its own partial sums (ring_core.h).
//   Ulysses level: the members all-gather the latent of the group's tokens and each up-projects
//     it for its own heads; the backward's latent gradients (each member's heads' share)
//     reduce-scatter back to the tokens' owners (ulysses_level.h).
// The projections (bench/block/mla.h) implement LatentKeys; a level works on a LatentBlock: the
// latent of its own tokens, where it leaves their gradient, and the heads it expands.
//
// FLOPs: the projections do not expand keys and values under latent travel; each level expands
// its own block for its heads (model FLOPs: over the levels these are the layer's up-projections
// once) and contracts its own block's gradient (model FLOPs likewise). Every received block's
// expansion, its re-expansion in the backward and its contraction are hardware FLOPs only (HFU,
// not MFU): the price of moving r_kv + d_rope values per token instead of H·(d + d_v).
#pragma once
#include <cstdint>

#include "kernels/backend.h"

namespace cpbench {

class LatentKeys {
 public:
  virtual ~LatentKeys() = default;
  // Values per token of the latent: r_kv + d_rope.
  virtual int64_t width() const = 0;
  // This rank's tokens' latent [B·T, width()] (run dtype), written by the projections' forward;
  // and where their gradient, every head's share summed, goes for the projections' backward
  // [B·T, width()] (float32).
  virtual const Tensor& local() const = 0;
  virtual Tensor& grad() = 0;
  // `rows` tokens' latent `lat` [rows, width()] -> k [rows, heads, d], v [rows, heads, d_v] (run
  // dtype) for the heads [h0, h0 + heads) of this rank's, overwritten. `model_share` as gemm's: 1
  // for a level's own block, 0 for a received one.
  virtual void expand(Backend& be, const Tensor& lat, int64_t rows, int h0, int heads, Tensor& k, Tensor& v,
                      double model_share) = 0;
  // Those heads' dk, dv (float32, shaped as expand's k, v) -> the latent's gradient `dlat` [rows,
  // width()] (float32, overwritten: those heads' share); adds c_kvᵀ·dk_C and c_kvᵀ·dv to the
  // heads' columns of the up-projections' weight gradients.
  virtual void contract(Backend& be, const Tensor& lat, int64_t rows, int h0, int heads, const Tensor& dk,
                        const Tensor& dv, Tensor& dlat, double model_share) = 0;
};

// What one level's latent travel works on: `keys`, the latent of the level's own rows [rows,
// width] (run dtype) and where it leaves their gradient [rows, width] (float32), and the heads
// [h0, h0 + heads) it expands. A ring of the ring family: this rank's latent for every head; a
// ring under a Ulysses level: the gathered latent of its ring index, for the member's heads.
struct LatentBlock {
  LatentKeys* keys = nullptr;
  Tensor local, grad;
  int h0 = 0, heads = 0;
  bool on() const { return keys != nullptr; }
  // LatentKeys::expand and contract for this level's heads on a block `lat` of its rows (its own
  // `local`, or one that arrived: rows = lat's elements / width).
  void expand(Backend& be, const Tensor& lat, Tensor& k, Tensor& v, double model_share) const {
    keys->expand(be, lat, lat.numel() / keys->width(), h0, heads, k, v, model_share);
  }
  void contract(Backend& be, const Tensor& lat, const Tensor& dk, const Tensor& dv, Tensor& dlat,
                double model_share) const {
    keys->contract(be, lat, lat.numel() / keys->width(), h0, heads, dk, dv, dlat, model_share);
  }
};

}  // namespace cpbench
