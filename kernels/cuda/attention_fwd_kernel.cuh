// Flash-attention forward on tensor cores (mma.sync m16n8k16, bf16/fp16 in, fp32 accumulate),
// FlashAttention-2 style: one CTA of 4 warps owns BM = 64 query rows of one (batch, head); each
// warp owns 16 rows and keeps its Q fragments, O accumulator and softmax state in registers.
// Key/value tiles of BN = 64 rows stream through double-buffered shared memory (cp.async).
//
// Masks come from global positions (PosArg) and the mask (MaskArg), never from indices: each
// query row sees the key positions [lo, hi] (causal, window, documents). A key tile is skipped
// when its positions lie outside [min lo, max hi] of the block's rows, processed without a mask
// when every row sees all of it (max lo <= its first key, its last key <= min hi, tile whole),
// and masked element-wise otherwise. Key columns past nk are masked too.
//
// Softmax works in base 2 on scores pre-multiplied by scale*log2(e). A row that sees no key
// keeps m = -inf, l = 0 and ends with o = 0, lse = -inf.
//
// Shared memory rows are padded by 8 elements (16 bytes): with a row pitch of 16 mod 128 bytes,
// the eight 16-byte rows an ldmatrix phase reads fall in distinct bank groups.
//
// The fwd kernel itself (launched from attention_fwd.cu; also compiled for the host by the
// emulator test, tests/unit/test_cuda_emu.cpp).
#pragma once
#include "kernels/cuda/device_common.cuh"

// Internal linkage (anonymous namespace): each translation unit that includes this header (the
// launcher, the emulator test) gets its own copy, so host stubs and emulated kernels never clash.
namespace cpbench::cuda::kern {
namespace {

constexpr int kFwdThreads = 128;  // 4 warps
constexpr int kFwdBM = 64;        // query rows per CTA (16 per warp)
constexpr int kFwdBN = 64;        // keys per tile

struct FwdParams {
  const void* q;  // [B, nq, hq, D]
  const void* k;  // [B, nk, hk, D]
  const void* v;  // [B, nk, hk, D]
  void* o;        // [B, nq, hq, D]
  float* lse;     // [B, hq, nq]
  int nq, nk, hq, hk;
  MaskArg mask;
  float scale_log2;  // softmax scale * log2(e)
  PosArg qpos, kpos;
};

template <int D>
constexpr int fwd_smem_bytes() {
  return (kFwdBM + 4 * kFwdBN) * (D + 8) * 2;  // Q + 2 x (K, V), 16-bit elements
}

// Copies `ROWS` rows of D elements (row r at g + r*gstride) into shared rows of pitch LD; rows
// >= nvalid are zero-filled without reading global memory (src-size 0; `safe` is a valid address).
template <typename T, int ROWS, int D>
__device__ __forceinline__ void load_rows_async(T* s, const T* g, int64_t gstride, int nvalid,
                                                const T* safe, int tid) {
  constexpr int LD = D + 8;
  constexpr int CPR = D / 8;  // 16-byte chunks per row
  static_assert((ROWS * CPR) % kFwdThreads == 0, "tile chunks must divide among the threads");
#pragma unroll
  for (int it = 0; it < ROWS * CPR / kFwdThreads; ++it) {
    const int idx = it * kFwdThreads + tid;
    const int r = idx / CPR, c = idx % CPR;
    const bool ok = r < nvalid;
    const T* src = ok ? g + r * gstride + c * 8 : safe;
    cp_async16(s + r * LD + c * 8, src, ok ? 16 : 0);
  }
}

template <typename T, int D>
__global__ void __launch_bounds__(kFwdThreads) attn_fwd_kernel(const FwdParams p) {
  constexpr int BM = kFwdBM, BN = kFwdBN, LD = D + 8;
  constexpr int KT = D / 16;   // k-steps over the head dim (QK^T)
  constexpr int ST = BN / 8;   // n-tiles of the score tile
  constexpr int OT = D / 8;    // n-tiles of the output
  CPB_DYNAMIC_SMEM(smem);
  T* Qs = reinterpret_cast<T*>(smem);  // [BM][LD]
  T* Ks = Qs + BM * LD;                // [2][BN][LD]
  T* Vs = Ks + 2 * BN * LD;            // [2][BN][LD]

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;   // mma fragment coordinates
  const int lr = lane & 7, li = lane >> 3;  // ldmatrix: row within a matrix, matrix index
  // Heavier (later, for causal) query blocks first.
  const int mblk = gridDim.x - 1 - blockIdx.x;
  const int h = blockIdx.y, b = blockIdx.z;
  const int kvh = h / (p.hq / p.hk);
  const int m0 = mblk * BM;
  const int mrows = min(BM, p.nq - m0);

  const int64_t qstride = int64_t(p.hq) * D, kstride = int64_t(p.hk) * D;
  const T* qbase = static_cast<const T*>(p.q) + (int64_t(b) * p.nq * p.hq + h) * D;
  const T* kbase = static_cast<const T*>(p.k) + (int64_t(b) * p.nk * p.hk + kvh) * D;
  const T* vbase = static_cast<const T*>(p.v) + (int64_t(b) * p.nk * p.hk + kvh) * D;
  const int ntiles = (p.nk + BN - 1) / BN;

  // Extremes of the block rows' visible bounds (monotone in the position: from qmin, qmax).
  int qmin, qmax, min_lo, min_hi, max_lo, max_hi;
  pos_range(p.qpos, m0, m0 + mrows, qmin, qmax);
  row_bounds(p.mask, qmin, min_lo, min_hi);
  row_bounds(p.mask, qmax, max_lo, max_hi);
  // 0: fully masked (skip), 1: partially masked, 2: fully visible and whole.
  auto tile_kind = [&](int j) -> int {
    const int n0 = j * BN, ncols = min(BN, p.nk - n0);
    int kmin, kmax;
    pos_range(p.kpos, n0, n0 + ncols, kmin, kmax);
    if (kmin > max_hi || kmax < min_lo) return 0;
    return (max_lo <= kmin && kmax <= min_hi && ncols == BN) ? 2 : 1;
  };
  auto next_tile = [&](int j) {
    while (j < ntiles && tile_kind(j) == 0) ++j;
    return j;
  };

  float m_r[2] = {-kInf, -kInf};  // running max (base-2 scaled scores), rows g and g+8
  float l_r[2] = {0.0f, 0.0f};    // this thread's part of the running sum
  float oacc[OT][4];
#pragma unroll
  for (int i = 0; i < OT; ++i) oacc[i][0] = oacc[i][1] = oacc[i][2] = oacc[i][3] = 0.0f;

  int j = next_tile(0);
  if (j < ntiles) {
    load_rows_async<T, BM, D>(Qs, qbase + m0 * qstride, qstride, mrows, qbase, tid);
    cp_async_commit();
    load_rows_async<T, BN, D>(Ks, kbase + j * BN * kstride, kstride, p.nk - j * BN, kbase, tid);
    load_rows_async<T, BN, D>(Vs, vbase + j * BN * kstride, kstride, p.nk - j * BN, vbase, tid);
    cp_async_commit();
    cp_async_wait<1>();  // Q has landed
    __syncthreads();

    uint32_t qf[KT][4];  // A fragments of this warp's 16 query rows
#pragma unroll
    for (int kk = 0; kk < KT; ++kk)
      ldsm_x4(qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3],
              Qs + (warp * 16 + (li & 1) * 8 + lr) * LD + kk * 16 + (li >> 1) * 8);

    // Visible key intervals of this thread's two query rows (for partially masked tiles).
    const int row0 = m0 + warp * 16 + g;
    int lo0, hi0, lo1, hi1;
    row_bounds(p.mask, pos_at(p.qpos, row0), lo0, hi0);
    row_bounds(p.mask, pos_at(p.qpos, row0 + 8), lo1, hi1);

    int buf = 0;
    while (j < ntiles) {
      const int jn = next_tile(j + 1);
      if (jn < ntiles) {
        load_rows_async<T, BN, D>(Ks + (buf ^ 1) * BN * LD, kbase + jn * BN * kstride, kstride,
                                  p.nk - jn * BN, kbase, tid);
        load_rows_async<T, BN, D>(Vs + (buf ^ 1) * BN * LD, vbase + jn * BN * kstride, kstride,
                                  p.nk - jn * BN, vbase, tid);
      }
      cp_async_commit();   // possibly empty: keeps the group count uniform
      cp_async_wait<1>();  // tile j has landed
      __syncthreads();

      const T* Kb = Ks + buf * BN * LD;
      const T* Vb = Vs + buf * BN * LD;
      const int kind = tile_kind(j);
      const int n0 = j * BN;

      // S = Q K^T (16 x BN per warp). B[k][n] = K[n][k]: ldmatrix (no trans) of K rows.
      float s[ST][4];
#pragma unroll
      for (int i = 0; i < ST; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < KT; ++kk) {
#pragma unroll
        for (int np = 0; np < BN / 16; ++np) {
          uint32_t b0, b1, b2, b3;  // n-tile 2np: (b0, b1); n-tile 2np+1: (b2, b3)
          ldsm_x4(b0, b1, b2, b3, Kb + (np * 16 + (li >> 1) * 8 + lr) * LD + kk * 16 + (li & 1) * 8);
          mma16816<T>(s[2 * np], qf[kk], b0, b1);
          mma16816<T>(s[2 * np + 1], qf[kk], b2, b3);
        }
      }

      // Scale to base 2; mask. s[nt][e] / s[nt][e+2]: rows g / g+8, key column nt*8 + 2t + e.
      if (kind == 1) {
#pragma unroll
        for (int nt = 0; nt < ST; ++nt) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int col = n0 + nt * 8 + 2 * t + e;
            const bool in = col < p.nk;
            const int kp = pos_at(p.kpos, col);
            const bool ok0 = in && lo0 <= kp && kp <= hi0;
            const bool ok1 = in && lo1 <= kp && kp <= hi1;
            s[nt][e] = ok0 ? s[nt][e] * p.scale_log2 : -kInf;
            s[nt][e + 2] = ok1 ? s[nt][e + 2] * p.scale_log2 : -kInf;
          }
        }
      } else {
#pragma unroll
        for (int nt = 0; nt < ST; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[nt][e] *= p.scale_log2;
      }

      // Online softmax. The four lanes of a quad (same g) hold one row's columns.
      float mx0 = -kInf, mx1 = -kInf;
#pragma unroll
      for (int nt = 0; nt < ST; ++nt) {
        mx0 = fmaxf(mx0, fmaxf(s[nt][0], s[nt][1]));
        mx1 = fmaxf(mx1, fmaxf(s[nt][2], s[nt][3]));
      }
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
      const float mn0 = fmaxf(m_r[0], mx0), mn1 = fmaxf(m_r[1], mx1);
      // A row with nothing visible yet subtracts 0 (not -inf): P = exp2(-inf) = 0, no NaN.
      const float base0 = mn0 == -kInf ? 0.0f : mn0;
      const float base1 = mn1 == -kInf ? 0.0f : mn1;
      const float al0 = exp2f(m_r[0] - base0), al1 = exp2f(m_r[1] - base1);  // 0 when m = -inf
      m_r[0] = mn0;
      m_r[1] = mn1;
      l_r[0] *= al0;
      l_r[1] *= al1;
#pragma unroll
      for (int i = 0; i < OT; ++i) {
        oacc[i][0] *= al0;
        oacc[i][1] *= al0;
        oacc[i][2] *= al1;
        oacc[i][3] *= al1;
      }
#pragma unroll
      for (int nt = 0; nt < ST; ++nt) {
        s[nt][0] = exp2f(s[nt][0] - base0);
        s[nt][1] = exp2f(s[nt][1] - base0);
        s[nt][2] = exp2f(s[nt][2] - base1);
        s[nt][3] = exp2f(s[nt][3] - base1);
        l_r[0] += s[nt][0] + s[nt][1];
        l_r[1] += s[nt][2] + s[nt][3];
      }

      // O += P V. P's C fragments of n-tiles 2ks, 2ks+1 are exactly the A fragment of k-step ks.
      // B[k][n] = V[k][n] (V row-major): ldmatrix.trans of V rows.
#pragma unroll
      for (int ks = 0; ks < BN / 16; ++ks) {
        uint32_t a[4];
        a[0] = pack2<T>(s[2 * ks][0], s[2 * ks][1]);
        a[1] = pack2<T>(s[2 * ks][2], s[2 * ks][3]);
        a[2] = pack2<T>(s[2 * ks + 1][0], s[2 * ks + 1][1]);
        a[3] = pack2<T>(s[2 * ks + 1][2], s[2 * ks + 1][3]);
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
          uint32_t b0, b1, b2, b3;  // n-tile 2dp: (b0, b1); 2dp+1: (b2, b3)
          ldsm_x4_t(b0, b1, b2, b3, Vb + (ks * 16 + (li & 1) * 8 + lr) * LD + dp * 16 + (li >> 1) * 8);
          mma16816<T>(oacc[2 * dp], a, b0, b1);
          mma16816<T>(oacc[2 * dp + 1], a, b2, b3);
        }
      }
      __syncthreads();  // everyone is done with buffer `buf` before it is refilled
      buf ^= 1;
      j = jn;
    }
  }

  // Epilogue: row sums over the quad, normalise, store o (bf16/fp16) and lse (natural log).
  float l0 = l_r[0], l1 = l_r[1];
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  T* obase = static_cast<T*>(p.o) + (int64_t(b) * p.nq * p.hq + h) * D;
  float* lbase = p.lse + (int64_t(b) * p.hq + h) * p.nq;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = m0 + warp * 16 + g + half * 8;
    if (row >= p.nq) continue;
    const float l = half ? l1 : l0;
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    T* orow = obase + int64_t(row) * qstride;
#pragma unroll
    for (int nt = 0; nt < OT; ++nt)
      st_u32(orow + nt * 8 + 2 * t, pack2<T>(oacc[nt][2 * half] * inv, oacc[nt][2 * half + 1] * inv));
    if (t == 0) lbase[row] = l > 0.0f ? (m_r[half] + log2f(l)) * kLn2 : -kInf;
  }
}

}  // namespace
}  // namespace cpbench::cuda::kern
