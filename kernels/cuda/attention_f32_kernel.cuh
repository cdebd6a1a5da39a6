// fp32 attention for --dtype fp32 on the CUDA backend: plain SIMT kernels, one warp per row, any
// head dims d (q, k: the scores) and dv (v, o: the values) up to kF32MaxHeadDim = 1024 (MLA's
// absorbed decode has d = 576, dv = 512). They exist so fp32 runs verify against the CPU backend
// at fp32 tolerances; they are simple rather than fast (every visible pair costs two warp
// reductions). Launched from attention_f32.cu; also run on the host emulator
// (tests/unit/test_cuda_emu.cpp).
//   fwd:      warp per query row (b, i, h): online softmax over the visible keys
//   bwd dq:   warp per query row: dq += scale * sum_j dS_ij k_j
//   bwd dkdv: warp per key row (b, j, g), looping over the query heads of kv head g:
//             dk += scale * sum dS_ij q_i, dv += sum P_ij dO_i  (each element has one owner: no atomics)
// P_ij = exp(s_ij - lse_i) with the FINAL lse; rows with lse = -inf see no key and get nothing.
// Visibility: row i sees keys at positions [lo, hi] (row_bounds of MaskArg).
//
// A row lives in registers, lane l holding its elements l, l + 32, l + 64, ...: PL (a template
// argument) elements per lane hold 32 * PL of them. Two builds: PL = 8 for d, dv <= 256 (every
// GQA model, few registers) and PL = 32 for up to 1024 (f32_per_lane picks the smaller that fits
// both dims); elements past d or dv are never read or written.
#pragma once
#include "kernels/cuda/device_common.cuh"

// Internal linkage (anonymous namespace): see attention_fwd_kernel.cuh.
namespace cpbench::cuda::kern {
namespace {

constexpr int kF32Warps = 4;            // warps (rows) per block
constexpr int kF32SmallPerLane = 8;     // d, dv <= 256
constexpr int kF32LargePerLane = 32;    // d, dv <= 1024
constexpr int kF32MaxHeadDim = 32 * kF32LargePerLane;

// Elements per lane of the build that holds rows of d and dv elements; 0 when none does.
inline constexpr int f32_per_lane(int d, int dv) {
  const int m = d > dv ? d : dv;
  return m <= 32 * kF32SmallPerLane ? kF32SmallPerLane : m <= kF32MaxHeadDim ? kF32LargePerLane : 0;
}

struct F32Params {
  const float* q;     // [B, nq, hq, d]
  const float* k;     // [B, nk, hk, d]
  const float* v;     // [B, nk, hk, dv]
  float* o;           // [B, nq, hq, dv]     fwd out
  float* lse;         // [B, hq, nq]         fwd out
  const float* dout;  // [B, nq, hq, dv]     bwd in
  const float* lse_in;  // [B, hq, nq]       bwd in
  const float* delta;   // [B, hq, nq]       bwd in
  float* dq;          // [B, nq, hq, d]      bwd +=
  float* dk;          // [B, nk, hk, d]      bwd +=
  float* dv_grad;     // [B, nk, hk, dv]     bwd += (v's gradient; `dv` is the head dim)
  int B, nq, nk, hq, hk;
  int d, dv;       // head dims: q, k (scores); v, o, dout (values)
  int rep, head0;  // GQA map: query head h uses kv head (h + head0) / rep (AttnShape)
  MaskArg mask;
  float scale;
  PosArg qpos, kpos;
};

// r = this lane's elements of the n-element row p (0 past n).
template <int PL>
__device__ __forceinline__ void load_lane(float (&r)[PL], const float* p, int n, int lane) {
#pragma unroll
  for (int e = 0; e < PL; ++e) {
    const int c = lane + 32 * e;
    r[e] = c < n ? p[c] : 0.0f;
  }
}
// The warp's dot product of the n-element rows r (in registers) and p; every lane gets it.
template <int PL>
__device__ __forceinline__ float dot_lane(const float (&r)[PL], const float* p, int n, int lane) {
  float s = 0.0f;
#pragma unroll
  for (int e = 0; e < PL; ++e) {
    const int c = lane + 32 * e;
    if (c < n) s += r[e] * p[c];
  }
  return warp_sum(s);
}

template <int PL>
__global__ void attn_fwd_f32_kernel(const F32Params p) {
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kF32Warps + (threadIdx.x >> 5);  // ((b*nq + i)*hq + h)
  if (row >= int64_t(p.B) * p.nq * p.hq) return;  // whole warps
  const int h = int(row % p.hq);
  const int64_t bi = row / p.hq;
  const int i = int(bi % p.nq), b = int(bi / p.nq);
  const int g = (h + p.head0) / p.rep;
  const int d = p.d, dv = p.dv;
  float qr[PL], acc[PL];  // q over d, the o accumulator over dv
  load_lane(qr, p.q + row * d, d, lane);
#pragma unroll
  for (int e = 0; e < PL; ++e) acc[e] = 0.0f;
  int lo, hi;
  row_bounds(p.mask, pos_at(p.qpos, i), lo, hi);
  float m = -kInf, l = 0.0f;
  for (int j = 0; j < p.nk; ++j) {
    const int kp = pos_at(p.kpos, j);
    if (kp < lo || kp > hi) continue;  // warp-uniform
    const int64_t kv = (int64_t(b) * p.nk + j) * p.hk + g;  // the key's row of k and of v
    const float s = dot_lane(qr, p.k + kv * d, d, lane) * p.scale;
    const float mn = fmaxf(m, s);
    const float corr = expf(m - mn);  // 0 while nothing was visible (m = -inf)
    const float pj = expf(s - mn);
    l = l * corr + pj;
    const float* vr = p.v + kv * dv;
#pragma unroll
    for (int e = 0; e < PL; ++e) {
      const int c = lane + 32 * e;
      acc[e] = acc[e] * corr + (c < dv ? pj * vr[c] : 0.0f);
    }
    m = mn;
  }
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
  for (int e = 0; e < PL; ++e) {
    const int c = lane + 32 * e;
    if (c < dv) p.o[row * dv + c] = acc[e] * inv;
  }
  if (lane == 0) p.lse[(int64_t(b) * p.hq + h) * p.nq + i] = l > 0.0f ? m + logf(l) : -kInf;
}

template <int PL>
__global__ void attn_bwd_dq_f32_kernel(const F32Params p) {
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kF32Warps + (threadIdx.x >> 5);
  if (row >= int64_t(p.B) * p.nq * p.hq) return;
  const int h = int(row % p.hq);
  const int64_t bi = row / p.hq;
  const int i = int(bi % p.nq), b = int(bi / p.nq);
  const int g = (h + p.head0) / p.rep;
  const int d = p.d, dv = p.dv;
  const int64_t li = (int64_t(b) * p.hq + h) * p.nq + i;
  const float L = p.lse_in[li];
  if (L == -kInf) return;  // sees no key
  const float dl = p.delta[li];
  float qr[PL], dor[PL], dqa[PL];  // q and dq over d, dO over dv
  load_lane(qr, p.q + row * d, d, lane);
  load_lane(dor, p.dout + row * dv, dv, lane);
#pragma unroll
  for (int e = 0; e < PL; ++e) dqa[e] = 0.0f;
  int lo, hi;
  row_bounds(p.mask, pos_at(p.qpos, i), lo, hi);
  for (int j = 0; j < p.nk; ++j) {
    const int kp = pos_at(p.kpos, j);
    if (kp < lo || kp > hi) continue;
    const int64_t kv = (int64_t(b) * p.nk + j) * p.hk + g;
    const float* kr = p.k + kv * d;
    const float pj = expf(dot_lane(qr, kr, d, lane) * p.scale - L);
    const float ds = pj * (dot_lane(dor, p.v + kv * dv, dv, lane) - dl);
#pragma unroll
    for (int e = 0; e < PL; ++e) {
      const int c = lane + 32 * e;
      if (c < d) dqa[e] += ds * p.scale * kr[c];
    }
  }
#pragma unroll
  for (int e = 0; e < PL; ++e) {
    const int c = lane + 32 * e;
    if (c < d) p.dq[row * d + c] += dqa[e];
  }
}

template <int PL>
__global__ void attn_bwd_dkdv_f32_kernel(const F32Params p) {
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kF32Warps + (threadIdx.x >> 5);  // ((b*nk + j)*hk + g)
  if (row >= int64_t(p.B) * p.nk * p.hk) return;
  const int g = int(row % p.hk);
  const int64_t bj = row / p.hk;
  const int j = int(bj % p.nk), b = int(bj / p.nk);
  const int d = p.d, dv = p.dv;
  // The query heads that use kv head g (AttnShape::q_begin, q_end).
  const int h_begin = max(g * p.rep - p.head0, 0), h_end = min((g + 1) * p.rep - p.head0, p.hq);
  float kr[PL], vr[PL], dka[PL], dva[PL];  // k and dk over d, v and dv over dv
  load_lane(kr, p.k + row * d, d, lane);
  load_lane(vr, p.v + row * dv, dv, lane);
#pragma unroll
  for (int e = 0; e < PL; ++e) dka[e] = dva[e] = 0.0f;
  const int kp = pos_at(p.kpos, j);
  for (int h = h_begin; h < h_end; ++h) {
    for (int i = 0; i < p.nq; ++i) {
      int lo, hi;
      row_bounds(p.mask, pos_at(p.qpos, i), lo, hi);
      if (kp < lo || kp > hi) continue;
      const int64_t li = (int64_t(b) * p.hq + h) * p.nq + i;
      const float L = p.lse_in[li];
      if (L == -kInf) continue;
      const int64_t qrow = (int64_t(b) * p.nq + i) * p.hq + h;  // the query's row of q and of dO
      const float* qr = p.q + qrow * d;
      const float* dor = p.dout + qrow * dv;
      const float pij = expf(dot_lane(kr, qr, d, lane) * p.scale - L);
      const float ds = pij * (dot_lane(vr, dor, dv, lane) - p.delta[li]);
#pragma unroll
      for (int e = 0; e < PL; ++e) {
        const int c = lane + 32 * e;
        if (c < d) dka[e] += ds * p.scale * qr[c];
        if (c < dv) dva[e] += pij * dor[c];
      }
    }
  }
#pragma unroll
  for (int e = 0; e < PL; ++e) {
    const int c = lane + 32 * e;
    if (c < d) p.dk[row * d + c] += dka[e];
    if (c < dv) p.dv_grad[row * dv + c] += dva[e];
  }
}

}  // namespace
}  // namespace cpbench::cuda::kern
