// The small attention kernels (launched from attention_misc.cu; also run on the host emulator):
// the online-softmax merge of a block's partial result and the FlashAttention-2 preprocessing
// delta = rowsum(dO o O). One warp per (b, i, h) row of dv elements: o-shaped tensors hold the
// values' head dim (MLA: dv = 128 beside d = 192 of q and k).
#pragma once
#include "kernels/cuda/device_common.cuh"

// Internal linkage (anonymous namespace): each translation unit that includes this header (the
// launcher, the emulator test) gets its own copy, so host stubs and emulated kernels never clash.
namespace cpbench::cuda::kern {
namespace {

constexpr int kWarpsPerBlock = 8;

// Row r of o ([B, nq, hq, dv] contiguous) is (b, i, h) with r = (b*nq + i)*hq + h; its lse/delta
// element ([B, hq, nq]) is (b*hq + h)*nq + i.
__device__ __forceinline__ int64_t lse_index(int64_t r, int64_t nq, int hq) {
  const int h = int(r % hq);
  const int64_t bi = r / hq;
  const int64_t i = bi % nq, b = bi / nq;
  return (b * hq + h) * nq + i;
}

// lse = log(e^a + e^b); o = (o_acc e^(a-lse) + o_blk e^(b-lse)). A side with lse = -inf adds
// nothing and its o is never read (it may be anything, e.g. poisoned); both -inf: o = 0.
__global__ void merge_kernel(void* o_acc, int t, float* lse_acc, const void* o_blk,
                             const float* lse_blk, int64_t rows, int64_t nq, int hq, int dv) {
  const int64_t r = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (r >= rows) return;
  const int64_t li = lse_index(r, nq, hq);
  const float a = lse_acc[li], b = lse_blk[li];
  const int64_t base = r * dv;
  if (b == -kInf) {  // the block adds nothing
    if (a == -kInf)
      for (int c = lane; c < dv; c += 32) st_any(o_acc, t, base + c, 0.0f);
    return;
  }
  float wa = 0.0f, wb = 1.0f, lse = b;
  if (a != -kInf) {
    const float m = fmaxf(a, b);
    wa = expf(a - m);
    wb = expf(b - m);
    const float s = wa + wb;
    lse = m + logf(s);
    wa /= s;
    wb /= s;
  }
  for (int c = lane; c < dv; c += 32) {
    const float y = ld_any(o_blk, t, base + c) * wb;
    st_any(o_acc, t, base + c, a == -kInf ? y : ld_any(o_acc, t, base + c) * wa + y);
  }
  __syncwarp();  // every lane has read lse_acc[li] before lane 0 overwrites it
  if (lane == 0) lse_acc[li] = lse;
}

__global__ void delta_kernel(const void* o, const void* dout, int t, float* delta, int64_t rows,
                             int64_t nq, int hq, int dv) {
  const int64_t r = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (r >= rows) return;
  const int64_t base = r * dv;
  float s = 0.0f;
  for (int c = lane; c < dv; c += 32) s += ld_any(o, t, base + c) * ld_any(dout, t, base + c);
  s = warp_sum(s);
  if (lane == 0) delta[lse_index(r, nq, hq)] = s;
}

// The sinks (Backend::attn_sink_fwd), one warp per row: lse' = log(e^lse + e^sink[h]),
// o' = o e^(lse - lse'); lse = -inf (no key): o' = 0, lse' = sink.
__global__ void sink_fwd_kernel(const float* sinks, void* o, int t, float* lse, int64_t rows, int64_t nq, int hq,
                                int dv) {
  const int64_t r = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (r >= rows) return;
  const int64_t li = lse_index(r, nq, hq), base = r * dv;
  const float a = lse[li], sk = sinks[r % hq];
  float w = 0.0f, l2 = sk;
  if (a != -kInf) {
    const float m = fmaxf(a, sk);
    l2 = m + logf(expf(a - m) + expf(sk - m));
    w = expf(a - l2);
  }
  for (int c = lane; c < dv; c += 32) st_any(o, t, base + c, a == -kInf ? 0.0f : ld_any(o, t, base + c) * w);
  __syncwarp();  // every lane has read lse[li] before lane 0 overwrites it
  if (lane == 0) lse[li] = l2;
}

// The sinks' gradient, one block per head h (blockDim.x a multiple of 32): each thread takes rows
// (b, i) strided by blockDim.x, dot(dout, o') over dv and e^(sink - lse') in fp32; the block's sum
// (a fixed order for a fixed blockDim) is subtracted from dsinks[h] by thread 0.
__global__ void sink_bwd_kernel(const float* sinks, const void* o, const void* dout, int t, const float* lse,
                                float* dsinks, int64_t B, int64_t nq, int hq, int dv) {
  const int h = int(blockIdx.x);
  const float sk = sinks[h];
  float acc = 0.0f;
  for (int64_t bi = threadIdx.x; bi < B * nq; bi += blockDim.x) {
    const int64_t b = bi / nq, i = bi % nq;
    const float l = lse[(b * hq + h) * nq + i];
    if (l == -kInf) continue;  // unreachable after the forward's sink (lse' >= sink)
    const int64_t base = (bi * hq + h) * dv;
    float dot = 0.0f;
    for (int c = 0; c < dv; ++c) dot += ld_any(o, t, base + c) * ld_any(dout, t, base + c);
    acc += expf(sk - l) * dot;
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) dsinks[h] -= acc;
}

}  // namespace
}  // namespace cpbench::cuda::kern
