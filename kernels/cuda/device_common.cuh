// Device helpers shared by the CUDA kernels: dtype-generic loads/stores, reductions, positions,
// and the sm_80+ warp-level primitives (mma.sync m16n8k16, ldmatrix, cp.async) as inline PTX.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16", 16-bit A/B, fp32 C/D), with
// lane = 4*g + t (g = lane/4 in 0..7, t = lane%4 in 0..3). Each 32-bit register holds two 16-bit
// elements, the lower-indexed one in the low half:
//   A (16x16, row major): a0 = A[g][2t..2t+1]   a1 = A[g+8][2t..2t+1]
//                         a2 = A[g][2t+8..+9]   a3 = A[g+8][2t+8..+9]
//   B (16x8, "col"):      b0 = B[2t..2t+1][g]   b1 = B[2t+8..2t+9][g]
//   C/D (16x8, fp32):     c0,c1 = C[g][2t], C[g][2t+1]     c2,c3 = C[g+8][2t], C[g+8][2t+1]
// ldmatrix.x4 loads four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i,
// and register ri receives matrix i. Without .trans, lane (g, t) gets M[g][2t..2t+1]; with
// .trans it gets M[2t][g], M[2t+1][g] (the transposed fragment).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cuda/cuda_kernels.h"

namespace cpbench::cuda {

constexpr float kInf = __builtin_huge_valf();
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// DType values as kernel arguments (DType::f32 = 0, bf16 = 1, f16 = 2).
__device__ __forceinline__ float ld_any(const void* p, int t, int64_t i) {
  if (t == 0) return static_cast<const float*>(p)[i];
  if (t == 1) return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
  return __half2float(static_cast<const __half*>(p)[i]);
}
__device__ __forceinline__ void st_any(void* p, int t, int64_t i, float v) {
  if (t == 0)
    static_cast<float*>(p)[i] = v;
  else if (t == 1)
    static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
  else
    static_cast<__half*>(p)[i] = __float2half_rn(v);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// A load or store of shared memory through a plain pointer: a plain access on the GPU; under the
// host emulator (cuda_emu.h defines them) one its race detector sees. Kernels access shared
// memory only through these, st_u32, ldmatrix and cp.async.
#ifndef CPB_CUDA_EMULATION
template <typename E>
__device__ __forceinline__ E sh_ld(const E* p) {
  return *p;
}
template <typename E>
__device__ __forceinline__ void sh_st(E* p, E v) {
  *p = v;
}
#endif

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float sh[32];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // sh may still be read by a previous call
  if (lane == 0) sh_st(&sh[w], v);
  __syncthreads();
  if (w == 0) {
    float x = lane < nw ? sh_ld(&sh[lane]) : 0.0f;
    x = warp_sum(x);
    if (lane == 0) sh_st(&sh[0], x);
  }
  __syncthreads();
  return sh_ld(&sh[0]);
}

// Position of row i (clamped to the last row).
__host__ __device__ __forceinline__ int pos_at(const PosArg& p, int i) {
  i = i < p.n ? i : p.n - 1;
  int r0 = 0;
  for (int s = 0; s < p.nseg; ++s) {
    if (i < p.row_end[s]) return p.start[s] + (i - r0) * p.stride[s];
    r0 = p.row_end[s];
  }
  return 0;  // unreachable for 0 <= i < n
}

// Smallest and largest position of rows [lo, hi), hi > lo, lo >= 0, hi <= n. Each segment is
// monotone (stride >= 1), so the extremes are at the ends of its part of the range.
__host__ __device__ __forceinline__ void pos_range(const PosArg& p, int lo, int hi, int& mn,
                                                   int& mx) {
  mn = 0x7fffffff;
  mx = -1;
  int r0 = 0;
  for (int s = 0; s < p.nseg; ++s) {
    const int r1 = p.row_end[s];
    const int a = lo > r0 ? lo : r0, e = hi < r1 ? hi : r1;
    if (a < e) {
      const int first = p.start[s] + (a - r0) * p.stride[s];
      const int last = p.start[s] + (e - 1 - r0) * p.stride[s];
      mn = first < mn ? first : mn;
      mx = last > mx ? last : mx;
    }
    r0 = r1;
  }
}

// Start and end (one past) of the document holding position x (binary search over the starts;
// the last document ends at 2^31-1).
__host__ __device__ __forceinline__ void doc_bounds(const MaskArg& m, int x, int& ds, int& de) {
  ds = 0;
  de = 0x7fffffff;
  if (m.ndocs <= 1) return;
  int a = 0, b = m.ndocs - 1;  // docs[a] <= x (docs[0] = 0 <= x)
  while (a < b) {
    const int c = (a + b + 1) >> 1;
    if (m.docs[c] <= x) a = c; else b = c - 1;
  }
  ds = m.docs[a];
  if (a + 1 < m.ndocs) de = m.docs[a + 1];
}

// The visible key interval [lo, hi] of the query at position x (AttnMask's rule). lo and hi are
// non-decreasing in x, so over a set of rows their extremes are those of its extreme positions.
__host__ __device__ __forceinline__ void row_bounds(const MaskArg& m, int x, int& lo, int& hi) {
  int ds, de;
  doc_bounds(m, x, ds, de);
  const long long w = m.window;
  long long l = ds, h = m.causal ? x : (long long)de - 1;
  if (w > 0) {
    l = l > x - w + 1 ? l : x - w + 1;
    if (!m.causal) h = h < x + w - 1 ? h : x + w - 1;
  }
  lo = int(l);
  hi = int(h > 0x7fffffff ? 0x7fffffff : h);
}

// ---- tensor-core primitives (sm_80+) ---------------------------------------------------------
// Under CPB_CUDA_EMULATION (the host emulator of tests/unit/cuda_emu.h, which runs these kernels
// on the CPU to check their index math) the emulator defines the primitives below instead.
#ifdef CPB_CUDA_EMULATION
#define CPB_DYNAMIC_SMEM(name) unsigned char* name = ::cpb_emu::dynamic_smem()
#else
#define CPB_DYNAMIC_SMEM(name) extern __shared__ __align__(16) unsigned char name[]

template <typename T>
struct MmaOp;
template <>
struct MmaOp<__nv_bfloat16> {
  static __device__ __forceinline__ void run(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};
template <>
struct MmaOp<__half> {
  static __device__ __forceinline__ void run(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};
// c += A * B for one m16n8k16 tile.
template <typename T>
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  MmaOp<T>::run(c, a, b0, b1);
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Four 8x8 matrices; `row` is this lane's row address (16-byte aligned, shared memory).
__device__ __forceinline__ void ldsm_x4(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3,
                                        const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(smem_addr(row))
               : "memory");
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3,
                                          const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(smem_addr(row))
               : "memory");
}

// 16-byte global -> shared copy; src_bytes = 0 writes zeros and reads nothing.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)),
               "l"(gmem), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Wait until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

#endif  // CPB_CUDA_EMULATION

// Two floats -> two 16-bit values in one register (lo in the low half).
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  uint32_t r;
  memcpy(&r, &v, sizeof(r));  // a register move
  return r;
}
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  uint32_t r;
  memcpy(&r, &v, sizeof(r));
  return r;
}

// Stores two packed 16-bit values at p (4-byte aligned).
#ifdef CPB_CUDA_EMULATION
template <typename T>
inline void st_u32(T* p, uint32_t v, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  emu_st_u32(p, v, file, line);  // a shared-memory store is seen by the emulator's race detector
}
#else
template <typename T>
__device__ __forceinline__ void st_u32(T* p, uint32_t v) {
  *reinterpret_cast<uint32_t*>(p) = v;  // one 32-bit store (the CUDA idiom)
}
#endif

// p[0..3] += (x, y, z, w), p 16-byte aligned, global memory. One vector atomic (`red.global.add`
// on four floats) on sm_90 and newer, four scalar ones before (sm_80-89 have no vector float
// atomics). The host emulator (tests/unit/cuda_emu.h) takes the vector path and checks the
// alignment the hardware requires.
__device__ __forceinline__ void atomic_add4(float* p, float x, float y, float z, float w) {
#if defined(CPB_CUDA_EMULATION) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900)
  float4 v;
  v.x = x;
  v.y = y;
  v.z = z;
  v.w = w;
  atomicAdd(reinterpret_cast<float4*>(p), v);
#else
  atomicAdd(p, x);
  atomicAdd(p + 1, y);
  atomicAdd(p + 2, z);
  atomicAdd(p + 3, w);
#endif
}

// Adds s * (two m16n8 fp32 C fragments side by side: c0 = columns 0..7, c1 = columns 8..15) to a
// 16 x 16 block of global memory whose rows g and g + 8 of this lane (lane = 4g + t) start at
// row_g and row_g8 (16-byte aligned; a null row is skipped: past the tensor's end). Lanes t and
// t ^ 1 swap halves with one shuffle per element so that each lane holds four consecutive
// columns of each of its rows: even t columns 2t..2t+3 (from c0), odd t columns 2t+6..2t+9
// (from c1); then one atomic_add4 per row instead of four scalar atomics. All 32 lanes must call.
__device__ __forceinline__ void atomic_add_frag16(float* row_g, float* row_g8, const float (&c0)[4],
                                                  const float (&c1)[4], float s, int t) {
  const bool odd = t & 1;
  float y[4];  // the partner's half this lane needs (it sends the half the partner needs)
#pragma unroll
  for (int e = 0; e < 4; ++e) y[e] = __shfl_xor_sync(0xffffffffu, odd ? c0[e] : c1[e], 1);
  const int col = odd ? 2 * t + 6 : 2 * t;
  if (row_g != nullptr) {
    if (odd)
      atomic_add4(row_g + col, s * y[0], s * y[1], s * c1[0], s * c1[1]);
    else
      atomic_add4(row_g + col, s * c0[0], s * c0[1], s * y[0], s * y[1]);
  }
  if (row_g8 != nullptr) {
    if (odd)
      atomic_add4(row_g8 + col, s * y[2], s * y[3], s * c1[2], s * c1[3]);
    else
      atomic_add4(row_g8 + col, s * c0[2], s * c0[3], s * y[2], s * y[3]);
  }
}

// Grid size for a grid-stride loop over n elements with 256-thread blocks.
inline unsigned grid_for(int64_t n) {
  const int64_t b = (n + 255) / 256;
  return static_cast<unsigned>(b < 1 ? 1 : (b > (1 << 20) ? (1 << 20) : b));
}

}  // namespace cpbench::cuda
