// fp32 attention for --dtype fp32 on the CUDA backend: plain SIMT kernels, one warp per row, any
// head dim up to 256. They exist so fp32 runs verify against the CPU backend at fp32 tolerances;
// they are simple rather than fast (every visible pair costs two warp reductions). Launched from
// attention_f32.cu; also run on the host emulator (tests/unit/test_cuda_emu.cpp).
//   fwd:      warp per query row (b, i, h): online softmax over the visible keys
//   bwd dq:   warp per query row: dq += scale * sum_j dS_ij k_j
//   bwd dkdv: warp per key row (b, j, g), looping over the query heads of kv head g:
//             dk += scale * sum dS_ij q_i, dv += sum P_ij dO_i  (each element has one owner: no atomics)
// P_ij = exp(s_ij - lse_i) with the FINAL lse; rows with lse = -inf see no key and get nothing.
// Visibility: row i sees keys at positions [lo, hi] (row_bounds of MaskArg).
#pragma once
#include "kernels/cuda/device_common.cuh"

// Internal linkage (anonymous namespace): see attention_fwd_kernel.cuh.
namespace cpbench::cuda::kern {
namespace {

constexpr int kF32Warps = 4;     // warps (rows) per block
constexpr int kF32PerLane = 8;   // head-dim elements per lane: d <= 256

struct F32Params {
  const float* q;     // [B, nq, hq, d]
  const float* k;     // [B, nk, hk, d]
  const float* v;     // [B, nk, hk, d]
  float* o;           // [B, nq, hq, d]      fwd out
  float* lse;         // [B, hq, nq]         fwd out
  const float* dout;  // [B, nq, hq, d]      bwd in
  const float* lse_in;  // [B, hq, nq]       bwd in
  const float* delta;   // [B, hq, nq]       bwd in
  float* dq;          // [B, nq, hq, d]      bwd +=
  float* dk;          // [B, nk, hk, d]      bwd +=
  float* dv;          // [B, nk, hk, d]      bwd +=
  int B, nq, nk, hq, hk, d;
  int rep, head0;  // GQA map: query head h uses kv head (h + head0) / rep (AttnShape)
  MaskArg mask;
  float scale;
  PosArg qpos, kpos;
};

__device__ __forceinline__ void load_lane(float (&r)[kF32PerLane], const float* p, int d, int lane) {
#pragma unroll
  for (int e = 0; e < kF32PerLane; ++e) {
    const int c = lane + 32 * e;
    r[e] = c < d ? p[c] : 0.0f;
  }
}
__device__ __forceinline__ float dot_lane(const float (&r)[kF32PerLane], const float* p, int d, int lane) {
  float s = 0.0f;
#pragma unroll
  for (int e = 0; e < kF32PerLane; ++e) {
    const int c = lane + 32 * e;
    if (c < d) s += r[e] * p[c];
  }
  return warp_sum(s);
}

__global__ void attn_fwd_f32_kernel(const F32Params p) {
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kF32Warps + (threadIdx.x >> 5);  // ((b*nq + i)*hq + h)
  if (row >= int64_t(p.B) * p.nq * p.hq) return;  // whole warps
  const int h = int(row % p.hq);
  const int64_t bi = row / p.hq;
  const int i = int(bi % p.nq), b = int(bi / p.nq);
  const int g = (h + p.head0) / p.rep;
  float qr[kF32PerLane], acc[kF32PerLane];
  load_lane(qr, p.q + row * p.d, p.d, lane);
#pragma unroll
  for (int e = 0; e < kF32PerLane; ++e) acc[e] = 0.0f;
  int lo, hi;
  row_bounds(p.mask, pos_at(p.qpos, i), lo, hi);
  float m = -kInf, l = 0.0f;
  for (int j = 0; j < p.nk; ++j) {
    const int kp = pos_at(p.kpos, j);
    if (kp < lo || kp > hi) continue;  // warp-uniform
    const int64_t kv = ((int64_t(b) * p.nk + j) * p.hk + g) * p.d;
    const float s = dot_lane(qr, p.k + kv, p.d, lane) * p.scale;
    const float mn = fmaxf(m, s);
    const float corr = expf(m - mn);  // 0 while nothing was visible (m = -inf)
    const float pj = expf(s - mn);
    l = l * corr + pj;
#pragma unroll
    for (int e = 0; e < kF32PerLane; ++e) {
      const int c = lane + 32 * e;
      acc[e] = acc[e] * corr + (c < p.d ? pj * p.v[kv + c] : 0.0f);
    }
    m = mn;
  }
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
  for (int e = 0; e < kF32PerLane; ++e) {
    const int c = lane + 32 * e;
    if (c < p.d) p.o[row * p.d + c] = acc[e] * inv;
  }
  if (lane == 0) p.lse[(int64_t(b) * p.hq + h) * p.nq + i] = l > 0.0f ? m + logf(l) : -kInf;
}

__global__ void attn_bwd_dq_f32_kernel(const F32Params p) {
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kF32Warps + (threadIdx.x >> 5);
  if (row >= int64_t(p.B) * p.nq * p.hq) return;
  const int h = int(row % p.hq);
  const int64_t bi = row / p.hq;
  const int i = int(bi % p.nq), b = int(bi / p.nq);
  const int g = (h + p.head0) / p.rep;
  const int64_t li = (int64_t(b) * p.hq + h) * p.nq + i;
  const float L = p.lse_in[li];
  if (L == -kInf) return;  // sees no key
  const float dl = p.delta[li];
  float qr[kF32PerLane], dor[kF32PerLane], dqa[kF32PerLane];
  load_lane(qr, p.q + row * p.d, p.d, lane);
  load_lane(dor, p.dout + row * p.d, p.d, lane);
#pragma unroll
  for (int e = 0; e < kF32PerLane; ++e) dqa[e] = 0.0f;
  int lo, hi;
  row_bounds(p.mask, pos_at(p.qpos, i), lo, hi);
  for (int j = 0; j < p.nk; ++j) {
    const int kp = pos_at(p.kpos, j);
    if (kp < lo || kp > hi) continue;
    const int64_t kv = ((int64_t(b) * p.nk + j) * p.hk + g) * p.d;
    const float pj = expf(dot_lane(qr, p.k + kv, p.d, lane) * p.scale - L);
    const float ds = pj * (dot_lane(dor, p.v + kv, p.d, lane) - dl);
#pragma unroll
    for (int e = 0; e < kF32PerLane; ++e) {
      const int c = lane + 32 * e;
      if (c < p.d) dqa[e] += ds * p.scale * p.k[kv + c];
    }
  }
#pragma unroll
  for (int e = 0; e < kF32PerLane; ++e) {
    const int c = lane + 32 * e;
    if (c < p.d) p.dq[row * p.d + c] += dqa[e];
  }
}

__global__ void attn_bwd_dkdv_f32_kernel(const F32Params p) {
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kF32Warps + (threadIdx.x >> 5);  // ((b*nk + j)*hk + g)
  if (row >= int64_t(p.B) * p.nk * p.hk) return;
  const int g = int(row % p.hk);
  const int64_t bj = row / p.hk;
  const int j = int(bj % p.nk), b = int(bj / p.nk);
  // The query heads that use kv head g (AttnShape::q_begin, q_end).
  const int h_begin = max(g * p.rep - p.head0, 0), h_end = min((g + 1) * p.rep - p.head0, p.hq);
  float kr[kF32PerLane], vr[kF32PerLane], dka[kF32PerLane], dva[kF32PerLane];
  load_lane(kr, p.k + row * p.d, p.d, lane);
  load_lane(vr, p.v + row * p.d, p.d, lane);
#pragma unroll
  for (int e = 0; e < kF32PerLane; ++e) dka[e] = dva[e] = 0.0f;
  const int kp = pos_at(p.kpos, j);
  for (int h = h_begin; h < h_end; ++h) {
    for (int i = 0; i < p.nq; ++i) {
      int lo, hi;
      row_bounds(p.mask, pos_at(p.qpos, i), lo, hi);
      if (kp < lo || kp > hi) continue;
      const int64_t li = (int64_t(b) * p.hq + h) * p.nq + i;
      const float L = p.lse_in[li];
      if (L == -kInf) continue;
      const int64_t qo = ((int64_t(b) * p.nq + i) * p.hq + h) * p.d;
      const float pij = expf(dot_lane(kr, p.q + qo, p.d, lane) * p.scale - L);
      const float ds = pij * (dot_lane(vr, p.dout + qo, p.d, lane) - p.delta[li]);
#pragma unroll
      for (int e = 0; e < kF32PerLane; ++e) {
        const int c = lane + 32 * e;
        if (c < p.d) {
          dka[e] += ds * p.scale * p.q[qo + c];
          dva[e] += pij * p.dout[qo + c];
        }
      }
    }
  }
#pragma unroll
  for (int e = 0; e < kF32PerLane; ++e) {
    const int c = lane + 32 * e;
    if (c < p.d) {
      p.dk[row * p.d + c] += dka[e];
      p.dv[row * p.d + c] += dva[e];
    }
  }
}

}  // namespace
}  // namespace cpbench::cuda::kern
