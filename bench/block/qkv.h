// The token-local pieces of DESIGN's layer around the attention core, shared by every strategy
// (the sequence-sharded ones and megatron-sp, which runs them on its head shard):
//   forward:  qkv [rows, (hq+2hk)*d] -> RoPE on its q and k columns -> q, k, v
//   backward: dq, dk, dv -> dqkv [rows, (hq+2hk)*d] -> inverse RoPE on its dq and dk columns
// and the reuse of one allocation as another tensor (timed steps allocate nothing).
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/backend.h"

namespace cpbench {

// The packed q|k|v columns of B*T tokens: hq query heads, then hk key heads, then hk value heads.
struct QkvLayout {
  int64_t B = 1, T = 0;
  int hq = 0, hk = 0, d = 0;
  DocStarts docs;  // packed documents: RoPE positions restart in each (null = one document)
  int64_t cols() const { return int64_t(hq + 2 * hk) * d; }
};

// qkv [B*T, cols] (RoPE applied in place when `rope`) -> q [B,T,hq,d], k, v [B,T,hk,d].
void rope_and_split_qkv(Backend& be, const QkvLayout& l, bool rope, const Positions& pos,
                        double theta, Tensor& qkv, Tensor& q, Tensor& k, Tensor& v);
// dq [B,T,hq,d], dk, dv [B,T,hk,d] (dtype of dqkv) -> dqkv [B*T, cols], inverse RoPE when `rope`.
void merge_and_unrope_dqkv(Backend& be, const QkvLayout& l, bool rope, const Positions& pos,
                           double theta, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                           Tensor& dqkv);

// The float32 accumulator `acc` in the run dtype `dt`: `acc` itself when dt is f32, else
// converted into `scratch` (same element count, dtype dt), which is returned.
const Tensor& in_dtype(Backend& be, DType dt, const Tensor& acc, Tensor& scratch);

// `arena`'s memory seen as a tensor of dtype `dt` and `shape` starting at byte `byte_offset`
// (which must fit), sharing its ownership: buffers whose lives do not overlap within a step
// share one allocation, so the step allocates nothing and the peak stays what the algorithm
// needs. Throws std::logic_error when it does not fit.
Tensor reuse_as(const Tensor& arena, DType dt, std::vector<int64_t> shape, size_t byte_offset = 0);

}  // namespace cpbench
