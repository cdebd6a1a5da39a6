// Launchers of the fp32 SIMT attention kernels (attention_f32_kernel.cuh).
#include <climits>
#include <stdexcept>
#include <string>

#include "kernels/cuda/attention_f32_kernel.cuh"
#include "kernels/cuda/cuda_check.h"

namespace cpbench::cuda {
namespace {

using namespace kern;

static_assert(kF32MaxHeadDim == kAttnF32MaxHeadDim, "cuda_kernels.h states the fp32 kernels' limit");

F32Params f32_params(const AttnArgs& a) {
  if (a.d < 1 || a.dv < 1 || f32_per_lane(a.d, a.dv) == 0)
    throw std::invalid_argument("cuda fp32 attention: head dims d = " + std::to_string(a.d) + ", dv = " +
                                std::to_string(a.dv) + " (each must be in [1, " + std::to_string(kF32MaxHeadDim) +
                                "])");
  F32Params p{};
  p.q = static_cast<const float*>(a.q);
  p.k = static_cast<const float*>(a.k);
  p.v = static_cast<const float*>(a.v);
  p.o = static_cast<float*>(a.o);
  p.lse = a.lse;
  p.dout = static_cast<const float*>(a.dout);
  p.lse_in = a.lse_in;
  p.delta = a.delta;
  p.dq = a.dq;
  p.dk = a.dk;
  p.dv_grad = a.dv_grad;
  p.B = a.B;
  p.nq = a.nq;
  p.nk = a.nk;
  p.hq = a.hq;
  p.hk = a.hk;
  p.rep = a.rep;
  p.head0 = a.head0;
  p.d = a.d;
  p.dv = a.dv;
  p.mask = a.mask;
  p.scale = a.scale;
  p.qpos = a.qpos;
  p.kpos = a.kpos;
  return p;
}

unsigned blocks_for(int64_t rows) {
  const int64_t b = (rows + kF32Warps - 1) / kF32Warps;
  if (b > INT32_MAX) throw std::invalid_argument("cuda fp32 attention: too many rows");
  return unsigned(b);
}

}  // namespace

// The kernels' build for the row length: PL elements per lane (f32_per_lane; f32_params has
// refused rows wider than the large build).
#define CPB_DISPATCH_F32_PER_LANE(p, PL, ...)                \
  if (f32_per_lane(p.d, p.dv) == kF32SmallPerLane) {         \
    constexpr int PL = kF32SmallPerLane;                     \
    __VA_ARGS__;                                             \
  } else {                                                   \
    constexpr int PL = kF32LargePerLane;                     \
    __VA_ARGS__;                                             \
  }

void attn_fwd_f32(const AttnArgs& a, cudaStream_t s) {
  const int64_t rows = int64_t(a.B) * a.nq * a.hq;
  if (rows == 0) return;
  const F32Params p = f32_params(a);
  CPB_DISPATCH_F32_PER_LANE(p, PL, attn_fwd_f32_kernel<PL><<<blocks_for(rows), 32 * kF32Warps, 0, s>>>(p));
  CUDA_CHECK_LAUNCH();
}

void attn_bwd_f32(const AttnArgs& a, cudaStream_t s) {
  if (a.nq == 0 || a.nk == 0) return;
  const F32Params p = f32_params(a);
  const unsigned q_blocks = blocks_for(int64_t(a.B) * a.nq * a.hq), k_blocks = blocks_for(int64_t(a.B) * a.nk * a.hk);
  CPB_DISPATCH_F32_PER_LANE(p, PL, attn_bwd_dq_f32_kernel<PL><<<q_blocks, 32 * kF32Warps, 0, s>>>(p));
  CUDA_CHECK_LAUNCH();
  CPB_DISPATCH_F32_PER_LANE(p, PL, attn_bwd_dkdv_f32_kernel<PL><<<k_blocks, 32 * kF32Warps, 0, s>>>(p));
  CUDA_CHECK_LAUNCH();
}

}  // namespace cpbench::cuda
