// Flash-attention backward on tensor cores (mma.sync m16n8k16), FlashAttention-2 style.
// One CTA of 4 warps owns BN = 64 keys of one (batch, query head); each warp owns 16 keys and
// keeps their dK, dV accumulators in registers while query tiles of BM = 64 rows (Q, dO, lse,
// delta) stream through double-buffered shared memory. Per query tile, each warp computes for its
// keys (all "transposed": keys are the M dimension):
//   S^T = K Q^T,  P^T = exp2(S^T * scale*log2e - lse*log2e)   (masked -> 0)
//   dV += P^T dO,  dP^T = V dO^T,  dS^T = P^T o (dP^T - delta),  dK += dS^T Q
// (dP^T..dS^T in two halves of 32 queries, to stay within 255 registers at d = 128)
// then dS^T goes to shared memory and the CTA computes dQ_tile = dS K (each warp 16 query rows),
// added to the fp32 dq with atomics (four floats per atomic: float4 atomics on sm_90). At the end dK (times scale) and dV are added to the fp32
// dk, dv with atomics (several query heads share a kv head under GQA). All three are accumulated:
// "+=" as backend.h says.
//
// Masks and tile skipping use global positions and the mask as in the forward (each query row
// sees [lo, hi]; the rows' bounds go to shared memory with lse and delta). Query rows past nq get
// lse = +inf (P = 0) and zero Q/dO rows; key rows past nk are masked; rows whose final lse is
// -inf (they see no key anywhere) get P = 0.
//
// The bwd kernel itself (launched from attention_bwd.cu; also compiled for the host by the
// emulator test, tests/unit/test_cuda_emu.cpp).
#pragma once
#include "kernels/cuda/device_common.cuh"

// Internal linkage (anonymous namespace): each translation unit that includes this header (the
// launcher, the emulator test) gets its own copy, so host stubs and emulated kernels never clash.
namespace cpbench::cuda::kern {
namespace {

constexpr int kBwdThreads = 128;  // 4 warps
constexpr int kBwdBN = 64;        // keys per CTA (16 per warp)
constexpr int kBwdBM = 64;        // query rows per tile

struct BwdParams {
  const void* q;     // [B, nq, hq, D]
  const void* k;     // [B, nk, hk, D]
  const void* v;     // [B, nk, hk, D]
  const void* dout;  // [B, nq, hq, D]
  const float* lse;    // [B, hq, nq]
  const float* delta;  // [B, hq, nq]
  float* dq;  // [B, nq, hq, D]
  float* dk;  // [B, nk, hk, D]
  float* dv;  // [B, nk, hk, D]
  int nq, nk, hq, hk;
  int rep, head0;  // GQA map: query head h uses kv head (h + head0) / rep (AttnShape)
  MaskArg mask;
  float scale, scale_log2;
  PosArg qpos, kpos;
};

template <int D>
constexpr int bwd_smem_bytes() {
  return (2 * kBwdBN + 4 * kBwdBM) * (D + 8) * 2  // K, V, 2 x (Q, dO)
         + kBwdBN * (kBwdBM + 8) * 2               // dS^T
         + 4 * kBwdBM * 4;                         // lse, delta, row bounds lo, hi
}

template <typename T, int ROWS, int D>
__device__ __forceinline__ void load_rows_async_b(T* s, const T* g, int64_t gstride, int nvalid,
                                                  const T* safe, int tid) {
  constexpr int LD = D + 8;
  constexpr int CPR = D / 8;
  static_assert((ROWS * CPR) % kBwdThreads == 0, "tile chunks must divide among the threads");
#pragma unroll
  for (int it = 0; it < ROWS * CPR / kBwdThreads; ++it) {
    const int idx = it * kBwdThreads + tid;
    const int r = idx / CPR, c = idx % CPR;
    const bool ok = r < nvalid;
    const T* src = ok ? g + r * gstride + c * 8 : safe;
    cp_async16(s + r * LD + c * 8, src, ok ? 16 : 0);
  }
}

template <typename T, int D>
__global__ void __launch_bounds__(kBwdThreads) attn_bwd_kernel(const BwdParams p) {
  constexpr int BN = kBwdBN, BM = kBwdBM, LD = D + 8, LDS = BM + 8;
  constexpr int KT = D / 16;  // k-steps over the head dim
  constexpr int QT = BM / 8;  // n-tiles over the query tile
  constexpr int OT = D / 8;   // n-tiles over the head dim
  CPB_DYNAMIC_SMEM(smem);
  T* Ks = reinterpret_cast<T*>(smem);  // [BN][LD]
  T* Vs = Ks + BN * LD;                // [BN][LD]
  T* Qs = Vs + BN * LD;                // [2][BM][LD]
  T* dOs = Qs + 2 * BM * LD;           // [2][BM][LD]
  T* dSs = dOs + 2 * BM * LD;          // [BN][LDS]: dS^T, keys x queries
  float* lse_s = reinterpret_cast<float*>(dSs + BN * LDS);  // [BM], base-2, +inf = no key
  float* dl_s = lse_s + BM;                                 // [BM]
  int* lo_s = reinterpret_cast<int*>(dl_s + BM);            // [BM] visible key interval
  int* hi_s = lo_s + BM;                                    // [BM]

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int lr = lane & 7, li = lane >> 3;
  const int nblk = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int kvh = (h + p.head0) / p.rep;
  const int n0 = nblk * BN;
  const int ncols = min(BN, p.nk - n0);

  const int64_t qstride = int64_t(p.hq) * D, kstride = int64_t(p.hk) * D;
  const T* qbase = static_cast<const T*>(p.q) + (int64_t(b) * p.nq * p.hq + h) * D;
  const T* dobase = static_cast<const T*>(p.dout) + (int64_t(b) * p.nq * p.hq + h) * D;
  const T* kbase = static_cast<const T*>(p.k) + (int64_t(b) * p.nk * p.hk + kvh) * D;
  const T* vbase = static_cast<const T*>(p.v) + (int64_t(b) * p.nk * p.hk + kvh) * D;
  const float* lse_row = p.lse + (int64_t(b) * p.hq + h) * p.nq;
  const float* dl_row = p.delta + (int64_t(b) * p.hq + h) * p.nq;
  const int mtiles = (p.nq + BM - 1) / BM;

  int kmin, kmax;
  pos_range(p.kpos, n0, n0 + ncols, kmin, kmax);
  auto tile_kind = [&](int i) -> int {  // 0 skip, 1 masked, 2 fully visible and whole
    const int m0 = i * BM, mrows = min(BM, p.nq - m0);
    int qmin, qmax, min_lo, min_hi, max_lo, max_hi;
    pos_range(p.qpos, m0, m0 + mrows, qmin, qmax);
    row_bounds(p.mask, qmin, min_lo, min_hi);  // bounds are monotone in the position
    row_bounds(p.mask, qmax, max_lo, max_hi);
    if (kmin > max_hi || kmax < min_lo) return 0;
    return (max_lo <= kmin && kmax <= min_hi && mrows == BM && ncols == BN) ? 2 : 1;
  };
  auto next_tile = [&](int i) {
    while (i < mtiles && tile_kind(i) == 0) ++i;
    return i;
  };

  int i = next_tile(0);
  if (i >= mtiles) return;  // no query sees these keys: dk, dv unchanged

  load_rows_async_b<T, BN, D>(Ks, kbase + n0 * kstride, kstride, ncols, kbase, tid);
  load_rows_async_b<T, BN, D>(Vs, vbase + n0 * kstride, kstride, ncols, vbase, tid);
  cp_async_commit();
  load_rows_async_b<T, BM, D>(Qs, qbase + i * BM * qstride, qstride, p.nq - i * BM, qbase, tid);
  load_rows_async_b<T, BM, D>(dOs, dobase + i * BM * qstride, qstride, p.nq - i * BM, dobase, tid);
  cp_async_commit();

  // This thread's two key rows (local warp*16 + g and +8): positions and range flags.
  const int key0 = n0 + warp * 16 + g, key1 = key0 + 8;
  const bool kin0 = key0 < p.nk, kin1 = key1 < p.nk;
  const int kp0 = pos_at(p.kpos, key0);
  const int kp1 = pos_at(p.kpos, key1);

  float dk_acc[OT][4], dv_acc[OT][4];
#pragma unroll
  for (int x = 0; x < OT; ++x)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk_acc[x][e] = dv_acc[x][e] = 0.0f;

  int buf = 0;
  while (i < mtiles) {
    const int inx = next_tile(i + 1);
    if (inx < mtiles) {
      load_rows_async_b<T, BM, D>(Qs + (buf ^ 1) * BM * LD, qbase + inx * BM * qstride, qstride,
                                  p.nq - inx * BM, qbase, tid);
      load_rows_async_b<T, BM, D>(dOs + (buf ^ 1) * BM * LD, dobase + inx * BM * qstride, qstride,
                                  p.nq - inx * BM, dobase, tid);
    }
    cp_async_commit();
    const int m0 = i * BM;
    if (tid < BM) {
      const int r = m0 + tid;
      float L = kInf, dl = 0.0f;
      int lo = 1, hi = 0;  // padding rows see nothing
      if (r < p.nq) {
        const float lv = lse_row[r];
        L = lv == -kInf ? kInf : lv * kLog2e;
        dl = dl_row[r];
        row_bounds(p.mask, pos_at(p.qpos, r), lo, hi);
      }
      sh_st(lse_s + tid, L);
      sh_st(dl_s + tid, dl);
      sh_st(lo_s + tid, lo);
      sh_st(hi_s + tid, hi);
    }
    cp_async_wait<1>();  // K, V and query tile i have landed
    __syncthreads();

    const T* Qb = Qs + buf * BM * LD;
    const T* dOb = dOs + buf * BM * LD;
    const int kind = tile_kind(i);

    // (1) S^T = K Q^T: A = K rows of this warp, B[k][n] = Q[n][k] (ldmatrix of Q rows).
    float st[QT][4];
#pragma unroll
    for (int x = 0; x < QT; ++x) st[x][0] = st[x][1] = st[x][2] = st[x][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < KT; ++kk) {
      uint32_t a[4];
      ldsm_x4(a[0], a[1], a[2], a[3], Ks + (warp * 16 + (li & 1) * 8 + lr) * LD + kk * 16 + (li >> 1) * 8);
#pragma unroll
      for (int np = 0; np < BM / 16; ++np) {
        uint32_t b0, b1, b2, b3;
        ldsm_x4(b0, b1, b2, b3, Qb + (np * 16 + (li >> 1) * 8 + lr) * LD + kk * 16 + (li & 1) * 8);
        mma16816<T>(st[2 * np], a, b0, b1);
        mma16816<T>(st[2 * np + 1], a, b2, b3);
      }
    }

    // (2) P^T. st[nt][e] / st[nt][e+2]: key rows key0 / key1, query column nt*8 + 2t + e.
#pragma unroll
    for (int nt = 0; nt < QT; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int qc = nt * 8 + 2 * t + e;
        const float L = sh_ld(lse_s + qc);
        float p0 = exp2f(st[nt][e] * p.scale_log2 - L);
        float p1 = exp2f(st[nt][e + 2] * p.scale_log2 - L);
        if (kind == 1) {
          const int lo = sh_ld(lo_s + qc), hi = sh_ld(hi_s + qc);
          if (!kin0 || kp0 < lo || kp0 > hi) p0 = 0.0f;
          if (!kin1 || kp1 < lo || kp1 > hi) p1 = 0.0f;
        }
        st[nt][e] = p0;
        st[nt][e + 2] = p1;
      }
    }

    // (3) dV += P^T dO: A = P^T (C fragments of n-tiles 2ks, 2ks+1), B[k][n] = dO[k][n]
    //     (ldmatrix.trans of dO rows).
#pragma unroll
    for (int ks = 0; ks < BM / 16; ++ks) {
      uint32_t a[4];
      a[0] = pack2<T>(st[2 * ks][0], st[2 * ks][1]);
      a[1] = pack2<T>(st[2 * ks][2], st[2 * ks][3]);
      a[2] = pack2<T>(st[2 * ks + 1][0], st[2 * ks + 1][1]);
      a[3] = pack2<T>(st[2 * ks + 1][2], st[2 * ks + 1][3]);
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t b0, b1, b2, b3;
        ldsm_x4_t(b0, b1, b2, b3, dOb + (ks * 16 + (li & 1) * 8 + lr) * LD + dp * 16 + (li >> 1) * 8);
        mma16816<T>(dv_acc[2 * dp], a, b0, b1);
        mma16816<T>(dv_acc[2 * dp + 1], a, b2, b3);
      }
    }

    // (4)-(7) in two halves of the query tile (32 queries each), so that only half of dP^T is
    // live next to P^T and the dK, dV accumulators: at d = 128 the whole of it does not fit in
    // 255 registers without spilling (issue 10). The V fragments are loaded once per half.
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      constexpr int HT = QT / 2;  // n-tiles of a half
      // (4) dP^T = V dO^T: A = V rows of this warp, B[k][n] = dO[n][k] (ldmatrix of dO rows).
      float dpt[HT][4];
#pragma unroll
      for (int x = 0; x < HT; ++x) dpt[x][0] = dpt[x][1] = dpt[x][2] = dpt[x][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < KT; ++kk) {
        uint32_t a[4];
        ldsm_x4(a[0], a[1], a[2], a[3], Vs + (warp * 16 + (li & 1) * 8 + lr) * LD + kk * 16 + (li >> 1) * 8);
#pragma unroll
        for (int np2 = 0; np2 < HT / 2; ++np2) {
          const int np = hh * (HT / 2) + np2;
          uint32_t b0, b1, b2, b3;
          ldsm_x4(b0, b1, b2, b3, dOb + (np * 16 + (li >> 1) * 8 + lr) * LD + kk * 16 + (li & 1) * 8);
          mma16816<T>(dpt[2 * np2], a, b0, b1);
          mma16816<T>(dpt[2 * np2 + 1], a, b2, b3);
        }
      }

      // (5) dS^T = P^T o (dP^T - delta[query]).
#pragma unroll
      for (int x = 0; x < HT; ++x) {
        const int nt = hh * HT + x;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float dl = sh_ld(dl_s + nt * 8 + 2 * t + e);
          dpt[x][e] = st[nt][e] * (dpt[x][e] - dl);
          dpt[x][e + 2] = st[nt][e + 2] * (dpt[x][e + 2] - dl);
        }
      }

      // (6) dK += dS^T Q: A = dS^T (C fragments), B[k][n] = Q[k][n] (ldmatrix.trans of Q rows).
#pragma unroll
      for (int ks2 = 0; ks2 < HT / 2; ++ks2) {
        const int ks = hh * (HT / 2) + ks2;
        uint32_t a[4];
        a[0] = pack2<T>(dpt[2 * ks2][0], dpt[2 * ks2][1]);
        a[1] = pack2<T>(dpt[2 * ks2][2], dpt[2 * ks2][3]);
        a[2] = pack2<T>(dpt[2 * ks2 + 1][0], dpt[2 * ks2 + 1][1]);
        a[3] = pack2<T>(dpt[2 * ks2 + 1][2], dpt[2 * ks2 + 1][3]);
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
          uint32_t b0, b1, b2, b3;
          ldsm_x4_t(b0, b1, b2, b3, Qb + (ks * 16 + (li & 1) * 8 + lr) * LD + dp * 16 + (li >> 1) * 8);
          mma16816<T>(dk_acc[2 * dp], a, b0, b1);
          mma16816<T>(dk_acc[2 * dp + 1], a, b2, b3);
        }
      }

      // (7) dS^T -> shared memory, [key][query], in the element type.
#pragma unroll
      for (int x = 0; x < HT; ++x) {
        const int nt = hh * HT + x;
        st_u32(dSs + (warp * 16 + g) * LDS + nt * 8 + 2 * t, pack2<T>(dpt[x][0], dpt[x][1]));
        st_u32(dSs + (warp * 16 + g + 8) * LDS + nt * 8 + 2 * t, pack2<T>(dpt[x][2], dpt[x][3]));
      }
    }
    __syncthreads();

    // (8) dQ[query rows warp*16..+15] += scale * dS K. A[m][k] = dS^T[k][m] (ldmatrix.trans of
    //     dS^T rows), loaded once for the whole head dim (BN/16 fragments); B[k][n] = K[k][n]
    //     (ldmatrix.trans of K rows), two n-tiles per load. Added to the fp32 dq with one
    //     four-float atomic per row and lane (atomic_add_frag16; vector atomics on sm_90).
    {
      uint32_t adq[BN / 16][4];
#pragma unroll
      for (int ks = 0; ks < BN / 16; ++ks)
        ldsm_x4_t(adq[ks][0], adq[ks][1], adq[ks][2], adq[ks][3],
                  dSs + (ks * 16 + (li >> 1) * 8 + lr) * LDS + warp * 16 + (li & 1) * 8);
      const int qr0 = m0 + warp * 16 + g, qr1 = qr0 + 8;
      float* dq0 = qr0 < p.nq ? p.dq + (int64_t(b) * p.nq + qr0) * qstride + int64_t(h) * D : nullptr;
      float* dq1 = qr1 < p.nq ? p.dq + (int64_t(b) * p.nq + qr1) * qstride + int64_t(h) * D : nullptr;
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        float acc[2][4];
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[0][e] = acc[1][e] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < BN / 16; ++ks) {
          uint32_t b0, b1, b2, b3;
          ldsm_x4_t(b0, b1, b2, b3, Ks + (ks * 16 + (li & 1) * 8 + lr) * LD + dp * 16 + (li >> 1) * 8);
          mma16816<T>(acc[0], adq[ks], b0, b1);
          mma16816<T>(acc[1], adq[ks], b2, b3);
        }
        atomic_add_frag16(dq0 ? dq0 + dp * 16 : nullptr, dq1 ? dq1 + dp * 16 : nullptr, acc[0], acc[1],
                          p.scale, t);
      }
    }
    __syncthreads();  // lse_s, dl_s, dSs and buffer `buf` are rewritten next iteration
    buf ^= 1;
    i = inx;
  }

  // dK (times scale) and dV of this warp's keys, four floats per atomic (atomic_add_frag16).
  const int64_t koff = int64_t(kvh) * D;
  float* dk0 = kin0 ? p.dk + (int64_t(b) * p.nk + key0) * kstride + koff : nullptr;
  float* dk1 = kin1 ? p.dk + (int64_t(b) * p.nk + key1) * kstride + koff : nullptr;
  float* dv0 = kin0 ? p.dv + (int64_t(b) * p.nk + key0) * kstride + koff : nullptr;
  float* dv1 = kin1 ? p.dv + (int64_t(b) * p.nk + key1) * kstride + koff : nullptr;
#pragma unroll
  for (int dp = 0; dp < D / 16; ++dp) {
    atomic_add_frag16(dk0 ? dk0 + dp * 16 : nullptr, dk1 ? dk1 + dp * 16 : nullptr, dk_acc[2 * dp],
                      dk_acc[2 * dp + 1], p.scale, t);
    atomic_add_frag16(dv0 ? dv0 + dp * 16 : nullptr, dv1 ? dv1 + dp * 16 : nullptr, dv_acc[2 * dp],
                      dv_acc[2 * dp + 1], 1.0f, t);
  }
}

}  // namespace
}  // namespace cpbench::cuda::kern
