// Attention on bf16/fp16 tensors: an emulation of the rounding points of the repository's CUDA
// tensor-core kernels (FlashAttention-2's), DESIGN "Rounding points". Inputs are loaded to fp32
// (exact), every product and sum is an fp32 operation, and values are rounded to the storage type
// exactly where the GPU kernels round them: P before P·V (not in a decode step, nq = 1, whose CUDA
// kernel multiplies fp32 P), P before dV += Pᵀ·dO, dS before dK += dSᵀ·Q and dQ += dS·K, o once at
// the end. The fp32 backward accumulators and lse stay fp32. Under fp8 (AttnShape::p_e4m3, the
// forward only) P is rounded to e4m3 offset by 2^8 (FlashAttention-3's fp8 forward) instead, at
// every nq.
//
// The order of the fp32 operations is fixed and documented, so that tests/unit/test_lowp_ref.h
// (a scalar loop per row) reproduces every bit: a dot product over d is summed in ascending
// element order; the forward visits keys in tiles of kLowpKeyTile consecutive indices (a tile
// in which the row sees no key is skipped), updating the running max once per tile; the backward
// accumulates dK, dV of a key over (query head, query row) ascending and dQ of a row over keys
// ascending, in fp32 buffers added to dq, dk, dv once, times the scale for dq and dk. Pairs the
// mask hides add nothing. This file is compiled without FMA contraction (kernels/CMakeLists.txt)
// so that a*b + c is two roundings here as in the reference.
//
// Parallel over (batch, head, query tile) in the forward and in the backward's dQ pass, over
// (batch, kv head, key tile) in its dK, dV pass: every work item owns its outputs, so the result
// does not depend on the thread count. The backward computes P and dS twice (once per pass), by
// the same function, with the same bits. It is an emulation: fp32 loops vectorised across keys or
// across d, slower than the fp32 path's sgemm tiles.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/attention_rows.h"
#include "kernels/float8.h"
#include "kernels/cpu/cpu_kernels.h"

namespace cpbench::cpu {

namespace {

constexpr int kBK = kLowpKeyTile;
constexpr int kQT = 64;  // query rows per work item (no effect on the result)

// Per-thread scratch that survives between calls (no page faults in the timed loop).
float* scratch(int slot, size_t n) {
  thread_local std::vector<float> buf[8];
  if (buf[slot].size() < n) buf[slot].resize(n);
  return buf[slot].data();
}

// Positions, each query row's visible key interval [lo, hi] (AttnMask), and each key tile's
// smallest and largest position (a row whose interval misses them sees no key of the tile).
struct Plan {
  std::vector<int64_t> kp, lo, hi, tmin, tmax;
  int64_t ntiles = 0;
  bool visible(int64_t i, int64_t j) const { return lo[size_t(i)] <= kp[size_t(j)] && kp[size_t(j)] <= hi[size_t(i)]; }
  bool may_see(int64_t i, int64_t t) const { return tmax[size_t(t)] >= lo[size_t(i)] && tmin[size_t(t)] <= hi[size_t(i)]; }
};

Plan make_plan(const AttnShape& s, const Positions& qpos, const Positions& kpos) {
  Plan p;
  const AttnMask mask = s.mask();
  const std::vector<int64_t> qp = qpos.list();
  p.kp = kpos.list();
  p.lo.resize(qp.size());
  p.hi.resize(qp.size());
  for (size_t i = 0; i < qp.size(); ++i) {
    p.lo[i] = mask.lo(qp[i]);
    p.hi[i] = mask.hi(qp[i]);
  }
  p.ntiles = (s.nk + kBK - 1) / kBK;
  for (int64_t t = 0; t < p.ntiles; ++t) {
    const auto b = p.kp.begin() + t * kBK, e = p.kp.begin() + std::min<int64_t>(s.nk, (t + 1) * kBK);
    p.tmin.push_back(*std::min_element(b, e));
    p.tmax.push_back(*std::max_element(b, e));
  }
  return p;
}

// Rows [j0, j0 + nj) of a [B, nk, hk, d] tensor at (b, g), widened to fp32: transposed
// (out[c * kBK + j]) for the dot products, or row-major (out[j * d + c]) for accumulation.
template <class T>
void widen_tile_t(const T* x, int64_t row0, int64_t hk, int d, int nj, float* out) {
  for (int j = 0; j < nj; ++j) {
    const T* r = x + (row0 + j) * hk * d;
    for (int c = 0; c < d; ++c) out[c * kBK + j] = to_f32(r[c]);
  }
}
template <class T>
void widen_tile(const T* x, int64_t row0, int64_t pitch, int d, int nj, float* out) {  // rows pitch apart
  for (int j = 0; j < nj; ++j) {
    const T* r = x + (row0 + j) * pitch;
    for (int c = 0; c < d; ++c) out[j * d + c] = to_f32(r[c]);
  }
}
template <class T>
void widen_row(const T* x, int d, float* out) {
  for (int c = 0; c < d; ++c) out[c] = to_f32(x[c]);
}

// out[j] = sum over c ascending of x[c] * Kt[c][j] (fp32, one rounding per product and per sum),
// for the nj keys of a transposed tile; vectorised across j, the order per key unchanged.
void dots(const float* x, const float* Kt, int d, int nj, float* out) {
  for (int j = 0; j < nj; ++j) out[j] = 0.0f;
  for (int c = 0; c < d; ++c) {
    const float xc = x[c];
    const float* kr = Kt + c * kBK;
    for (int j = 0; j < nj; ++j) out[j] += xc * kr[j];
  }
}

// The backward's per-pair terms of one query row against a key tile: P = exp2(s2 - L) with
// s2 = (q . k) * scale_log2 and L = lse in log2 units, dS = P (dP - delta) with dP = do . v, all
// fp32 and unrounded (each pass rounds what it multiplies); q . k over d, do . v over dv. Shared by
// both passes.
void pair_terms(const float* q, const float* dO, const float* Kt, const float* Vt, int d, int dv, int nj,
                float sl2, float L, float dl, float* P, float* dS) {
  dots(q, Kt, d, nj, P);
  dots(dO, Vt, dv, nj, dS);
  for (int j = 0; j < nj; ++j) {
    P[j] = std::exp2(P[j] * sl2 - L);
    dS[j] = P[j] * (dS[j] - dl);
  }
}

}  // namespace

// ---- forward ----------------------------------------------------------------------------------
template <class T>
void attn_fwd_lowp(const AttnShape& s, const T* q, const T* k, const T* v, const Positions& qpos,
                   const Positions& kpos, T* o, float* lse, int threads) {
  const int64_t B = s.B, nq = s.nq, nk = s.nk;
  const int hq = s.hq, hk = s.hk, d = s.d, dv = s.vdim();  // q, k over d; v, o over dv
  if (nq == 0) return;
  const bool round_p = nq != 1;  // a decode step: the CUDA decode kernel's P·V is all fp32
  const bool p8 = s.p_e4m3;      // fp8: P in e4m3 at every nq (FlashAttention-3 has no fp32 P·V)
  const Plan pl = make_plan(s, qpos, kpos);
  const float sl2 = scale_log2(s);
  const int64_t nqt = (nq + kQT - 1) / kQT, items = B * hq * nqt;

#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t it = 0; it < items; ++it) {
    const int64_t b = it / (hq * nqt);
    const int h = static_cast<int>(it / nqt % hq), g = s.kv_head(h);
    const int64_t i0 = (it % nqt) * kQT;
    const int rows = static_cast<int>(std::min<int64_t>(kQT, nq - i0));
    float* Q = scratch(0, size_t(kQT) * d);
    float* O = scratch(1, size_t(kQT) * dv);
    float* m = scratch(2, size_t(2) * kQT);
    float* l = m + kQT;
    float* Kt = scratch(3, size_t(kBK) * d);
    float* V = scratch(4, size_t(kBK) * dv);
    float* S = scratch(5, kBK);
    for (int r = 0; r < rows; ++r) widen_row(q + ((b * nq + i0 + r) * hq + h) * d, d, Q + r * d);
    std::fill(O, O + size_t(rows) * dv, 0.0f);
    std::fill(m, m + rows, kNegInf);
    std::fill(l, l + rows, 0.0f);
    for (int64_t t = 0; t < pl.ntiles; ++t) {
      bool any = false;
      for (int r = 0; r < rows && !any; ++r) any = pl.may_see(i0 + r, t);
      if (!any) continue;
      const int64_t j0 = t * kBK;
      const int nj = static_cast<int>(std::min<int64_t>(kBK, nk - j0));
      widen_tile_t(k + (b * nk * hk + g) * d, j0, hk, d, nj, Kt);
      widen_tile(v + (b * nk * hk + g) * s.v_row(), j0, hk * s.v_row(), dv, nj, V);  // v_in_k: k's rows
      for (int r = 0; r < rows; ++r) {
        const int64_t i = i0 + r;
        if (!pl.may_see(i, t)) continue;  // a shortcut: the tile's scores would all be -inf
        dots(Q + r * d, Kt, d, nj, S);
        float mx = kNegInf;
        for (int j = 0; j < nj; ++j) {
          S[j] = pl.visible(i, j0 + j) ? S[j] * sl2 : kNegInf;
          mx = S[j] > mx ? S[j] : mx;
        }
        if (mx == kNegInf) continue;  // the row sees no key of this tile: skipped
        const float mn = std::max(m[r], mx);
        const float alpha = std::exp2(m[r] - mn);  // 0 while the row has seen nothing
        float sum = 0.0f;
        for (int j = 0; j < nj; ++j) {
          S[j] = std::exp2(S[j] - mn);  // masked: exp2(-inf) = 0
          sum += S[j];
        }
        l[r] = l[r] * alpha + sum;  // the row sum of the fp32 P
        m[r] = mn;
        float* Or = O + r * dv;
        for (int c = 0; c < dv; ++c) Or[c] *= alpha;
        for (int j = 0; j < nj; ++j) {
          // P in the input dtype (fp8: e4m3) before P·V
          const float p = p8 ? round_p_e4m3(S[j]) : round_p ? round_to<T>(S[j]) : S[j];
          const float* vr = V + j * dv;
          for (int c = 0; c < dv; ++c) Or[c] += p * vr[c];
        }
      }
    }
    // o = O / l rounded once, lse fp32; a row that saw no key: o = 0, lse = -inf.
    float* lrow = lse + (b * hq + h) * nq + i0;
    for (int r = 0; r < rows; ++r) {
      T* orow = o + ((b * nq + i0 + r) * hq + h) * dv;
      if (l[r] > 0.0f) {
        const float inv = 1.0f / l[r];
        for (int c = 0; c < dv; ++c) orow[c] = from_f32<T>(O[r * dv + c] * inv);
        lrow[r] = lse_of(m[r], l[r]);
      } else {
        std::fill(orow, orow + dv, from_f32<T>(0.0f));
        lrow[r] = kNegInf;
      }
    }
  }
}

// ---- backward ---------------------------------------------------------------------------------
template <class T>
void attn_bwd_lowp(const AttnShape& s, const T* q, const T* k, const T* v, const T* dout,
                   const float* lse, const float* delta, const Positions& qpos,
                   const Positions& kpos, float* dq, float* dk, float* dv_acc, int threads) {
  const int64_t B = s.B, nq = s.nq, nk = s.nk;
  const int hq = s.hq, hk = s.hk, d = s.d, dv = s.vdim();  // q, k over d; v, o over dv
  if (nq == 0 || nk == 0) return;
  const Plan pl = make_plan(s, qpos, kpos);
  const float sl2 = scale_log2(s), scale = attn_scale(s);

  // dK, dV: one item per (b, kv head, key tile), over every query head of the group and row.
  const int64_t kitems = B * hk * pl.ntiles;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t it = 0; it < kitems; ++it) {
    const int64_t b = it / (hk * pl.ntiles), t = it % pl.ntiles;
    const int g = static_cast<int>(it / pl.ntiles % hk);
    const int64_t j0 = t * kBK;
    const int nj = static_cast<int>(std::min<int64_t>(kBK, nk - j0));
    float* Kt = scratch(0, size_t(kBK) * d);
    float* Vt = scratch(1, size_t(kBK) * dv);
    float* dK = scratch(2, size_t(kBK) * d);
    float* dV = scratch(3, size_t(kBK) * dv);
    float* qr = scratch(4, size_t(d) + dv);
    float* dor = qr + d;
    float* P = scratch(5, size_t(2) * kBK);
    float* dS = P + kBK;
    widen_tile_t(k + (b * nk * hk + g) * d, j0, hk, d, nj, Kt);
    widen_tile_t(v + (b * nk * hk + g) * dv, j0, hk, dv, nj, Vt);
    std::fill(dK, dK + size_t(nj) * d, 0.0f);
    std::fill(dV, dV + size_t(nj) * dv, 0.0f);
    for (int h = s.q_begin(g); h < s.q_end(g); ++h)
      for (int64_t i = 0; i < nq; ++i) {
        const float L = lse_log2(lse[(b * hq + h) * nq + i]);
        if (L == kNegInf || !pl.may_see(i, t)) continue;  // a row that saw no key has no gradient
        widen_row(q + ((b * nq + i) * hq + h) * d, d, qr);
        widen_row(dout + ((b * nq + i) * hq + h) * dv, dv, dor);
        pair_terms(qr, dor, Kt, Vt, d, dv, nj, sl2, L, delta[(b * hq + h) * nq + i], P, dS);
        for (int j = 0; j < nj; ++j) {
          if (!pl.visible(i, j0 + j)) continue;
          const float p = round_to<T>(P[j]), ds = round_to<T>(dS[j]);  // before dV += Pᵀ dO, dK += dSᵀ Q
          float *dKj = dK + j * d, *dVj = dV + j * dv;
          for (int c = 0; c < dv; ++c) dVj[c] += p * dor[c];
          for (int c = 0; c < d; ++c) dKj[c] += ds * qr[c];
        }
      }
    for (int j = 0; j < nj; ++j) {
      float* dkr = dk + ((b * nk + j0 + j) * hk + g) * d;
      float* dvr = dv_acc + ((b * nk + j0 + j) * hk + g) * dv;
      for (int c = 0; c < d; ++c) dkr[c] += scale * dK[j * d + c];
      for (int c = 0; c < dv; ++c) dvr[c] += dV[j * dv + c];
    }
  }

  // dQ: one item per (b, query head, query tile), over the key tiles ascending.
  const int64_t nqt = (nq + kQT - 1) / kQT, qitems = B * hq * nqt;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t it = 0; it < qitems; ++it) {
    const int64_t b = it / (hq * nqt);
    const int h = static_cast<int>(it / nqt % hq), g = s.kv_head(h);
    const int64_t i0 = (it % nqt) * kQT;
    const int rows = static_cast<int>(std::min<int64_t>(kQT, nq - i0));
    float* Q = scratch(0, size_t(kQT) * d);
    float* dO = scratch(1, size_t(kQT) * dv);
    float* dQ = scratch(2, size_t(kQT) * d);
    float* Kt = scratch(3, size_t(kBK) * d);
    float* Vt = scratch(4, size_t(kBK) * dv);
    float* K = scratch(5, size_t(kBK) * d);
    float* P = scratch(6, size_t(2) * kBK);
    float* dS = P + kBK;
    float* L = scratch(7, kQT);
    for (int r = 0; r < rows; ++r) {
      const int64_t i = i0 + r, off = ((b * nq + i) * hq + h) * d, ooff = ((b * nq + i) * hq + h) * dv;
      widen_row(q + off, d, Q + r * d);
      widen_row(dout + ooff, dv, dO + r * dv);
      L[r] = lse_log2(lse[(b * hq + h) * nq + i]);
    }
    std::fill(dQ, dQ + size_t(rows) * d, 0.0f);
    for (int64_t t = 0; t < pl.ntiles; ++t) {
      bool any = false;
      for (int r = 0; r < rows && !any; ++r) any = L[r] != kNegInf && pl.may_see(i0 + r, t);
      if (!any) continue;
      const int64_t j0 = t * kBK;
      const int nj = static_cast<int>(std::min<int64_t>(kBK, nk - j0));
      const T* kb = k + (b * nk * hk + g) * d;
      widen_tile_t(kb, j0, hk, d, nj, Kt);
      widen_tile_t(v + (b * nk * hk + g) * dv, j0, hk, dv, nj, Vt);
      widen_tile(kb, j0, int64_t(hk) * d, d, nj, K);
      for (int r = 0; r < rows; ++r) {
        const int64_t i = i0 + r;
        if (L[r] == kNegInf || !pl.may_see(i, t)) continue;
        pair_terms(Q + r * d, dO + r * dv, Kt, Vt, d, dv, nj, sl2, L[r], delta[(b * hq + h) * nq + i], P, dS);
        float* dQr = dQ + r * d;
        for (int j = 0; j < nj; ++j) {
          if (!pl.visible(i, j0 + j)) continue;
          const float ds = round_to<T>(dS[j]);  // before dQ += dS K
          const float* kr = K + j * d;
          for (int c = 0; c < d; ++c) dQr[c] += ds * kr[c];
        }
      }
    }
    for (int r = 0; r < rows; ++r) {
      float* dqr = dq + ((b * nq + i0 + r) * hq + h) * d;
      for (int c = 0; c < d; ++c) dqr[c] += scale * dQ[r * d + c];
    }
  }
}

// ---- instantiations: the attention ops of bf16 and fp16 tensors ---------------------------------
#define CPB_ATTN_LOWP(T)                                                                            \
  template void attn_fwd_lowp<T>(const AttnShape&, const T*, const T*, const T*, const Positions&,  \
                                 const Positions&, T*, float*, int);                                \
  template void attn_bwd_lowp<T>(const AttnShape&, const T*, const T*, const T*, const T*,          \
                                 const float*, const float*, const Positions&, const Positions&,    \
                                 float*, float*, float*, int);                                      \
  template void attn_merge<T>(const AttnShape&, T*, float*, const T*, const float*, int);           \
  template void attn_bwd_delta<T>(const AttnShape&, const T*, const T*, float*, int);                \
  template void attn_sink_fwd<T>(const AttnShape&, const float*, T*, float*, int);                   \
  template void attn_sink_bwd<T>(const AttnShape&, const float*, const T*, const T*, const float*, float*, int);
CPB_ATTN_LOWP(bf16_t)
CPB_ATTN_LOWP(fp16_t)
#undef CPB_ATTN_LOWP

}  // namespace cpbench::cpu
