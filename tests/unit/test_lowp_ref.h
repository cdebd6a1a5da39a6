// Scalar references of the CPU backend's bf16/fp16 attention emulation (DESIGN "Rounding
// points"): one plain loop per query row (or key), written from DESIGN's list, not from the
// kernels (kernels/cpu/attention_lowp.cpp, attention_rows.h), which tile, transpose, vectorise and
// split the work over threads. They follow the same rounding points AND the same order of fp32
// operations, because the emulation is pinned bit for bit; a naive reference in another order
// would differ in the last bits of fp32 sums. The order (the part the kernels are not free to
// change without changing DESIGN and these references):
//   - a dot product over d (or dv for do . v): fp32, ascending element order, from 0;
//   - forward: keys in tiles of `key_tile` consecutive indices; a tile in which the row sees no
//     key is skipped; else per tile m' = max(m, max s2), alpha = exp2(m - m'), P = exp2(s2 - m'),
//     l = l * alpha + (sum of P in key order), O = O * alpha, then O += P~ v key by key, where P~
//     is P rounded to the dtype (P itself when nq = 1: a decode step; under s.p_e4m3, fp8, at every
//     nq round_e4m3(P * 2^8) / 2^8); o = round(O * (1 / l));
//   - backward: per visible pair P = exp2(s2 - lse * log2 e), dS = P (do . v - delta); dV, dK of
//     a key summed over (query head, row) ascending of P~ do and dS~ q, dQ of a row over keys
//     ascending of dS~ k, in fp32 from 0, then dk += scale * dK, dv += dV, dq += scale * dQ;
//   - delta: double, 8 interleaved lanes combined ((0+4)+(1+5))+((2+6)+(3+7)), then the tail;
//   - merge: weights in double, fa * o_acc + fb * o_blk in fp32, rounded.
// Values are floats holding dtype values; `Round` rounds an fp32 to the dtype and back. These
// files are compiled in ISO C++ mode, where GCC does not contract a*b + c into an FMA.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/backend.h"
#include "kernels/float16.h"
#include "kernels/float8.h"
#include "tests/unit/test_kernels_ref.h"

namespace cpbench::test::lowp {

using Round = float (*)(float);
inline float round_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }
inline float round_fp16(float x) { return f16_to_f32(f32_to_f16(x)); }

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr double kLog2e = 1.4426950408889634074;
constexpr double kLn2 = 0.6931471805599453094;

inline float dot(const float* a, const float* b, int d) {
  float acc = 0.0f;
  for (int c = 0; c < d; ++c) acc += a[c] * b[c];
  return acc;
}

struct Fwd {
  std::vector<float> o, lse;  // [B,nq,hq,dv] (dtype values), [B,hq,nq]
};

inline Fwd attn_fwd(const AttnShape& s, const std::vector<float>& q, const std::vector<float>& k,
                    const std::vector<float>& v, const Positions& qpos, const Positions& kpos,
                    Round rnd, int key_tile) {
  const int64_t B = s.B, nq = s.nq, nk = s.nk;
  const int hq = s.hq, hk = s.hk, d = s.d, dv = s.vdim();  // q, k over d; v, o over dv
  const int grp = s.rep > 0 ? s.rep : hq / hk;  // query head h uses kv head (h + head0) / grp
  const float sl2 = static_cast<float>(attn_scale(s) * kLog2e);
  const std::vector<int64_t> qp = qpos.list(), kp = kpos.list();
  Fwd r;
  r.o.assign(size_t(B * nq * hq * dv), 0.0f);
  r.lse.assign(size_t(B * hq * nq), kNegInf);
  std::vector<float> sc(static_cast<size_t>(key_tile)), O(static_cast<size_t>(dv));
  for (int64_t b = 0; b < B; ++b)
    for (int h = 0; h < hq; ++h)
      for (int64_t i = 0; i < nq; ++i) {
        const int g = (h + s.head0) / grp;
        const float* qi = &q[size_t(((b * nq + i) * hq + h) * d)];
        float m = kNegInf, l = 0.0f;
        std::fill(O.begin(), O.end(), 0.0f);
        for (int64_t j0 = 0; j0 < nk; j0 += key_tile) {
          const int64_t nj = std::min<int64_t>(key_tile, nk - j0);
          float mx = kNegInf;
          for (int64_t j = 0; j < nj; ++j) {
            const float* kj = &k[size_t(((b * nk + j0 + j) * hk + g) * d)];
            sc[size_t(j)] = ref_visible(s, qp[size_t(i)], kp[size_t(j0 + j)]) ? dot(qi, kj, d) * sl2 : kNegInf;
            mx = std::max(mx, sc[size_t(j)]);
          }
          if (mx == kNegInf) continue;
          const float mn = std::max(m, mx);
          const float alpha = std::exp2(m - mn);
          float sum = 0.0f;
          for (int64_t j = 0; j < nj; ++j) {
            sc[size_t(j)] = std::exp2(sc[size_t(j)] - mn);
            sum += sc[size_t(j)];
          }
          l = l * alpha + sum;
          m = mn;
          for (int c = 0; c < dv; ++c) O[size_t(c)] *= alpha;
          for (int64_t j = 0; j < nj; ++j) {
            const float p = s.p_e4m3 ? round_e4m3(sc[size_t(j)] * 256.0f) / 256.0f
                            : nq == 1  ? sc[size_t(j)]
                                       : rnd(sc[size_t(j)]);
            const float* vj = &v[size_t(((b * nk + j0 + j) * hk + g) * dv)];
            for (int c = 0; c < dv; ++c) O[size_t(c)] += p * vj[c];
          }
        }
        if (l > 0.0f) {
          const float inv = 1.0f / l;
          for (int c = 0; c < dv; ++c) r.o[size_t(((b * nq + i) * hq + h) * dv + c)] = rnd(O[size_t(c)] * inv);
          r.lse[size_t((b * hq + h) * nq + i)] = static_cast<float>(kLn2 * (double(m) + std::log2(double(l))));
        }
      }
  return r;
}

// Adds the gradients to dq, dk, dv (fp32 accumulators, as the kernel does).
inline void attn_bwd(const AttnShape& s, const std::vector<float>& q, const std::vector<float>& k,
                     const std::vector<float>& v, const std::vector<float>& dout,
                     const std::vector<float>& lse, const std::vector<float>& delta,
                     const Positions& qpos, const Positions& kpos, Round rnd,
                     std::vector<float>& dq, std::vector<float>& dk, std::vector<float>& dv_acc) {
  const int64_t B = s.B, nq = s.nq, nk = s.nk;
  const int hq = s.hq, hk = s.hk, d = s.d, dv = s.vdim();  // q, k over d; v, o over dv
  const int grp = s.rep > 0 ? s.rep : hq / hk;  // query head h uses kv head (h + head0) / grp
  const float scale = attn_scale(s), sl2 = static_cast<float>(scale * kLog2e);
  const std::vector<int64_t> qp = qpos.list(), kp = kpos.list();
  std::vector<float> dQ(dq.size(), 0.0f), dK(dk.size(), 0.0f), dV(dv_acc.size(), 0.0f);
  // For a key, its terms arrive in (query head, row) order; for a row, in key order.
  for (int64_t b = 0; b < B; ++b)
    for (int h = 0; h < hq; ++h)
      for (int64_t i = 0; i < nq; ++i) {
        const float lv = lse[size_t((b * hq + h) * nq + i)];
        if (lv == kNegInf) continue;
        const float L = static_cast<float>(lv * kLog2e), dl = delta[size_t((b * hq + h) * nq + i)];
        const int g = (h + s.head0) / grp;
        const size_t qo = size_t(((b * nq + i) * hq + h) * d), oo = size_t(((b * nq + i) * hq + h) * dv);
        for (int64_t j = 0; j < nk; ++j) {
          if (!ref_visible(s, qp[size_t(i)], kp[size_t(j)])) continue;
          const size_t ko = size_t(((b * nk + j) * hk + g) * d), vo = size_t(((b * nk + j) * hk + g) * dv);
          const float P = std::exp2(dot(&q[qo], &k[ko], d) * sl2 - L);
          const float dS = P * (dot(&dout[oo], &v[vo], dv) - dl);
          const float pr = rnd(P), dsr = rnd(dS);
          for (int c = 0; c < dv; ++c) dV[vo + size_t(c)] += pr * dout[oo + size_t(c)];
          for (int c = 0; c < d; ++c) {
            dK[ko + size_t(c)] += dsr * q[qo + size_t(c)];
            dQ[qo + size_t(c)] += dsr * k[ko + size_t(c)];
          }
        }
      }
  for (size_t x = 0; x < dq.size(); ++x) dq[x] += scale * dQ[x];
  for (size_t x = 0; x < dk.size(); ++x) dk[x] += scale * dK[x];
  for (size_t x = 0; x < dv_acc.size(); ++x) dv_acc[x] += dV[x];
}

inline std::vector<float> attn_bwd_delta(const AttnShape& s, const std::vector<float>& o,
                                         const std::vector<float>& dout) {
  std::vector<float> delta(size_t(s.B * s.hq * s.nq));
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t i = 0; i < s.nq; ++i)
      for (int h = 0; h < s.hq; ++h) {
        const size_t base = size_t(((b * s.nq + i) * s.hq + h) * s.vdim());
        double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        const int whole = s.vdim() / 8 * 8;
        for (int e = 0; e < whole; ++e) lane[e % 8] += double(o[base + size_t(e)]) * double(dout[base + size_t(e)]);
        double t = ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
        for (int e = whole; e < s.vdim(); ++e) t += double(o[base + size_t(e)]) * double(dout[base + size_t(e)]);
        delta[size_t((b * s.hq + h) * s.nq + i)] = static_cast<float>(t);
      }
  return delta;
}

// o_acc, lse_acc <- merge(o_acc, lse_acc, o_blk, lse_blk); o values rounded by rnd.
inline void attn_merge(const AttnShape& s, std::vector<float>& o_acc, std::vector<float>& lse_acc,
                       const std::vector<float>& o_blk, const std::vector<float>& lse_blk, Round rnd) {
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t i = 0; i < s.nq; ++i)
      for (int h = 0; h < s.hq; ++h) {
        float& la = lse_acc[size_t((b * s.hq + h) * s.nq + i)];
        const float lb = lse_blk[size_t((b * s.hq + h) * s.nq + i)];
        float* oa = &o_acc[size_t(((b * s.nq + i) * s.hq + h) * s.vdim())];
        const float* ob = &o_blk[size_t(((b * s.nq + i) * s.hq + h) * s.vdim())];
        if (lb == kNegInf) {
          if (la == kNegInf) std::fill(oa, oa + s.vdim(), 0.0f);
          continue;
        }
        if (la == kNegInf) {
          std::copy(ob, ob + s.vdim(), oa);
          la = lb;
          continue;
        }
        const double mx = std::max(la, lb);
        const double wa = std::exp(double(la) - mx), wb = std::exp(double(lb) - mx), sum = wa + wb;
        const float fa = static_cast<float>(wa / sum), fb = static_cast<float>(wb / sum);
        for (int c = 0; c < s.vdim(); ++c) oa[c] = rnd(fa * oa[c] + fb * ob[c]);
        la = static_cast<float>(mx + std::log(sum));
      }
}

}  // namespace cpbench::test::lowp
