// Flash-attention forward on tensor cores (mma.sync m16n8k16, bf16/fp16 in, fp32 accumulate),
// FlashAttention-2's work split: one CTA of 4 warps owns BM = 128 query rows of one (batch,
// head); each warp owns 32 rows (two m16 tiles) and keeps its O accumulator and softmax state in
// registers, so every K or V fragment loaded from shared memory (ldmatrix.x4: two n8 tiles) feeds
// four MMAs (two n-tiles x two m-tiles). d = 64 also keeps its Q fragments in registers; d = 128
// reloads them from shared memory at every k-step (its 2 x 16 x 128 O accumulator leaves no room)
// and takes BN = 32 keys per tile (d = 64: 64), as FlashAttention-2 does at d = 128.
// Key/value tiles stream through double-buffered shared memory (cp.async).
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
constexpr int kFwdBM = 128;       // query rows per CTA (32 per warp: two m16 tiles)

// Keys per tile, and whether a warp keeps its Q fragments in registers, per head dim: at d = 128
// the O accumulator alone takes 128 registers per thread.
template <int D>
constexpr int fwd_bn() {
  return D <= 64 ? 64 : 32;
}
template <int D>
constexpr bool fwd_q_in_regs() {
  return D <= 64;
}

struct FwdParams {
  const void* q;  // [B, nq, hq, D]
  const void* k;  // [B, nk, hk, D]
  const void* v;  // [B, nk, hk, D]
  void* o;        // [B, nq, hq, D]
  float* lse;     // [B, hq, nq]
  int nq, nk, hq, hk;
  int rep, head0;  // GQA map: query head h uses kv head (h + head0) / rep (AttnShape)
  MaskArg mask;
  float scale_log2;  // softmax scale * log2(e)
  PosArg qpos, kpos;
};

template <int D>
constexpr int fwd_smem_bytes() {
  return (kFwdBM + 4 * fwd_bn<D>()) * (D + 8) * 2;  // Q + 2 x (K, V), 16-bit elements
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
  constexpr int BM = kFwdBM, BN = fwd_bn<D>(), LD = D + 8;
  constexpr int WM = BM / 64;  // m16 tiles per warp
  constexpr int KT = D / 16;   // k-steps over the head dim (QK^T)
  constexpr int ST = BN / 8;   // n-tiles of the score tile
  constexpr int OT = D / 8;    // n-tiles of the output
  constexpr bool QREG = fwd_q_in_regs<D>();
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
  const int kvh = (h + p.head0) / p.rep;
  const int m0 = mblk * BM;
  const int mrows = min(BM, p.nq - m0);
  const int wrow = warp * (16 * WM);  // this warp's first row in the block

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

  // Per m-tile mi: running max (base-2 scaled scores) and this thread's part of the running sum
  // of rows g and g+8.
  float m_r[WM][2], l_r[WM][2];
  float oacc[WM][OT][4];
#pragma unroll
  for (int mi = 0; mi < WM; ++mi) {
    m_r[mi][0] = m_r[mi][1] = -kInf;
    l_r[mi][0] = l_r[mi][1] = 0.0f;
#pragma unroll
    for (int i = 0; i < OT; ++i) oacc[mi][i][0] = oacc[mi][i][1] = oacc[mi][i][2] = oacc[mi][i][3] = 0.0f;
  }

  int j = next_tile(0);
  if (j < ntiles) {
    load_rows_async<T, BM, D>(Qs, qbase + m0 * qstride, qstride, mrows, qbase, tid);
    cp_async_commit();
    load_rows_async<T, BN, D>(Ks, kbase + j * BN * kstride, kstride, p.nk - j * BN, kbase, tid);
    load_rows_async<T, BN, D>(Vs, vbase + j * BN * kstride, kstride, p.nk - j * BN, vbase, tid);
    cp_async_commit();
    cp_async_wait<1>();  // Q has landed
    __syncthreads();

    // A fragments of this warp's query rows: m-tile mi, k-step kk (kept in registers when QREG).
    auto q_frag = [&](uint32_t (&a)[4], int mi, int kk) {
      ldsm_x4(a[0], a[1], a[2], a[3], Qs + (wrow + mi * 16 + (li & 1) * 8 + lr) * LD + kk * 16 + (li >> 1) * 8);
    };
    [[maybe_unused]] uint32_t qf[QREG ? WM * KT : 1][4];
    if constexpr (QREG) {
#pragma unroll
      for (int mi = 0; mi < WM; ++mi)
#pragma unroll
        for (int kk = 0; kk < KT; ++kk) q_frag(qf[mi * KT + kk], mi, kk);
    }

    // Visible key intervals of this thread's rows (for partially masked tiles).
    int lo[WM][2], hi[WM][2];
#pragma unroll
    for (int mi = 0; mi < WM; ++mi)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf)
        row_bounds(p.mask, pos_at(p.qpos, m0 + wrow + mi * 16 + hf * 8 + g), lo[mi][hf], hi[mi][hf]);

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

      // S = Q K^T (32 x BN per warp). B[k][n] = K[n][k]: ldmatrix (no trans) of K rows; each
      // load feeds two n-tiles of both m-tiles.
      float s[WM][ST][4];
#pragma unroll
      for (int mi = 0; mi < WM; ++mi)
#pragma unroll
        for (int i = 0; i < ST; ++i) s[mi][i][0] = s[mi][i][1] = s[mi][i][2] = s[mi][i][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < KT; ++kk) {
        uint32_t aq[WM][4];
#pragma unroll
        for (int mi = 0; mi < WM; ++mi) {
          if constexpr (QREG) {
#pragma unroll
            for (int r = 0; r < 4; ++r) aq[mi][r] = qf[mi * KT + kk][r];
          } else {
            q_frag(aq[mi], mi, kk);
          }
        }
#pragma unroll
        for (int np = 0; np < BN / 16; ++np) {
          uint32_t b0, b1, b2, b3;  // n-tile 2np: (b0, b1); n-tile 2np+1: (b2, b3)
          ldsm_x4(b0, b1, b2, b3, Kb + (np * 16 + (li >> 1) * 8 + lr) * LD + kk * 16 + (li & 1) * 8);
#pragma unroll
          for (int mi = 0; mi < WM; ++mi) {
            mma16816<T>(s[mi][2 * np], aq[mi], b0, b1);
            mma16816<T>(s[mi][2 * np + 1], aq[mi], b2, b3);
          }
        }
      }

      // Scale to base 2; mask. s[mi][nt][e] / s[mi][nt][e+2]: rows mi*16 + g / +8, key column
      // nt*8 + 2t + e.
      if (kind == 1) {
#pragma unroll
        for (int nt = 0; nt < ST; ++nt) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int col = n0 + nt * 8 + 2 * t + e;
            const bool in = col < p.nk;
            const int kp = pos_at(p.kpos, col);
#pragma unroll
            for (int mi = 0; mi < WM; ++mi) {
              const bool ok0 = in && lo[mi][0] <= kp && kp <= hi[mi][0];
              const bool ok1 = in && lo[mi][1] <= kp && kp <= hi[mi][1];
              s[mi][nt][e] = ok0 ? s[mi][nt][e] * p.scale_log2 : -kInf;
              s[mi][nt][e + 2] = ok1 ? s[mi][nt][e + 2] * p.scale_log2 : -kInf;
            }
          }
        }
      } else {
#pragma unroll
        for (int mi = 0; mi < WM; ++mi)
#pragma unroll
          for (int nt = 0; nt < ST; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[mi][nt][e] *= p.scale_log2;
      }

      // Online softmax, per m-tile. The four lanes of a quad (same g) hold one row's columns.
#pragma unroll
      for (int mi = 0; mi < WM; ++mi) {
        float mx0 = -kInf, mx1 = -kInf;
#pragma unroll
        for (int nt = 0; nt < ST; ++nt) {
          mx0 = fmaxf(mx0, fmaxf(s[mi][nt][0], s[mi][nt][1]));
          mx1 = fmaxf(mx1, fmaxf(s[mi][nt][2], s[mi][nt][3]));
        }
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
        const float mn0 = fmaxf(m_r[mi][0], mx0), mn1 = fmaxf(m_r[mi][1], mx1);
        // A row with nothing visible yet subtracts 0 (not -inf): P = exp2(-inf) = 0, no NaN.
        const float base0 = mn0 == -kInf ? 0.0f : mn0;
        const float base1 = mn1 == -kInf ? 0.0f : mn1;
        const float al0 = exp2f(m_r[mi][0] - base0), al1 = exp2f(m_r[mi][1] - base1);  // 0 when m = -inf
        m_r[mi][0] = mn0;
        m_r[mi][1] = mn1;
        l_r[mi][0] *= al0;
        l_r[mi][1] *= al1;
#pragma unroll
        for (int i = 0; i < OT; ++i) {
          oacc[mi][i][0] *= al0;
          oacc[mi][i][1] *= al0;
          oacc[mi][i][2] *= al1;
          oacc[mi][i][3] *= al1;
        }
#pragma unroll
        for (int nt = 0; nt < ST; ++nt) {
          s[mi][nt][0] = exp2f(s[mi][nt][0] - base0);
          s[mi][nt][1] = exp2f(s[mi][nt][1] - base0);
          s[mi][nt][2] = exp2f(s[mi][nt][2] - base1);
          s[mi][nt][3] = exp2f(s[mi][nt][3] - base1);
          l_r[mi][0] += s[mi][nt][0] + s[mi][nt][1];
          l_r[mi][1] += s[mi][nt][2] + s[mi][nt][3];
        }
      }

      // O += P V. P's C fragments of n-tiles 2ks, 2ks+1 are exactly the A fragment of k-step ks.
      // B[k][n] = V[k][n] (V row-major): ldmatrix.trans of V rows; each load feeds both m-tiles.
#pragma unroll
      for (int ks = 0; ks < BN / 16; ++ks) {
        uint32_t a[WM][4];
#pragma unroll
        for (int mi = 0; mi < WM; ++mi) {
          a[mi][0] = pack2<T>(s[mi][2 * ks][0], s[mi][2 * ks][1]);
          a[mi][1] = pack2<T>(s[mi][2 * ks][2], s[mi][2 * ks][3]);
          a[mi][2] = pack2<T>(s[mi][2 * ks + 1][0], s[mi][2 * ks + 1][1]);
          a[mi][3] = pack2<T>(s[mi][2 * ks + 1][2], s[mi][2 * ks + 1][3]);
        }
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
          uint32_t b0, b1, b2, b3;  // n-tile 2dp: (b0, b1); 2dp+1: (b2, b3)
          ldsm_x4_t(b0, b1, b2, b3, Vb + (ks * 16 + (li & 1) * 8 + lr) * LD + dp * 16 + (li >> 1) * 8);
#pragma unroll
          for (int mi = 0; mi < WM; ++mi) {
            mma16816<T>(oacc[mi][2 * dp], a[mi], b0, b1);
            mma16816<T>(oacc[mi][2 * dp + 1], a[mi], b2, b3);
          }
        }
      }
      __syncthreads();  // everyone is done with buffer `buf` before it is refilled
      buf ^= 1;
      j = jn;
    }
  }

  // Epilogue: row sums over the quad, normalise, store o (bf16/fp16) and lse (natural log).
  T* obase = static_cast<T*>(p.o) + (int64_t(b) * p.nq * p.hq + h) * D;
  float* lbase = p.lse + (int64_t(b) * p.hq + h) * p.nq;
#pragma unroll
  for (int mi = 0; mi < WM; ++mi) {
    float l0 = l_r[mi][0], l1 = l_r[mi][1];
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = m0 + wrow + mi * 16 + g + half * 8;
      if (row >= p.nq) continue;
      const float l = half ? l1 : l0;
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      T* orow = obase + int64_t(row) * qstride;
#pragma unroll
      for (int nt = 0; nt < OT; ++nt)
        st_u32(orow + nt * 8 + 2 * t, pack2<T>(oacc[mi][nt][2 * half] * inv, oacc[mi][nt][2 * half + 1] * inv));
      if (t == 0) lbase[row] = l > 0.0f ? (m_r[mi][half] + log2f(l)) * kLn2 : -kInf;
    }
  }
}

}  // namespace
}  // namespace cpbench::cuda::kern
