// What the CPU attention kernels of every element type share (internal to kernels/cpu): the
// softmax-state formulas, and the two per-row operations written once as templates, the merge of
// a block's partial result and the backward's row term delta. attention.cpp instantiates them
// for float (compiled with FMA contraction allowed), attention_lowp.cpp for bf16_t and fp16_t
// (compiled without it, so that the emulation is the documented sequence of fp32 operations).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/elem.h"

namespace cpbench::cpu {

inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();
inline constexpr double kLog2e = 1.4426950408889634074;
inline constexpr double kLn2 = 0.6931471805599453094;

// Scores are kept in log2 units: s2 = (q . k) * scale * log2(e), exponentials base 2.
inline float scale_log2(const AttnShape& s) { return static_cast<float>(attn_scale(s) * kLog2e); }
// The natural-log lse of a row from its base-2 running max m and sum l (l > 0).
inline float lse_of(float m, float l) { return static_cast<float>(kLn2 * (double(m) + std::log2(double(l)))); }
// lse in log2 units, as the backward subtracts it from s2 (-inf stays -inf).
inline float lse_log2(float lse) { return lse == kNegInf ? kNegInf : static_cast<float>(lse * kLog2e); }

// Calls f(lse index, o row offset) for every (batch b, query row i, head h) of s: lse, delta are
// [B, hq, nq] ((b*hq + h)*nq + i), o rows [B, nq, hq, dv] ((b*nq + i)*hq + h)*dv. The query rows
// are split over the threads (each (b, i, h) is visited by one thread, so the per-row kernels
// below are deterministic for any thread count).
template <class F>
void for_each_row(const AttnShape& s, int threads, F&& f) {
  const int64_t nq = s.nq, rows = s.B * s.nq;
  const int hq = s.hq, d = s.vdim();
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t bi = 0; bi < rows; ++bi) {
    const int64_t b = bi / nq, i = bi % nq;
    for (int h = 0; h < hq; ++h) f((b * hq + h) * nq + i, (bi * hq + h) * d, h);
  }
}

// o_acc, lse_acc <- merge(o_acc, lse_acc, o_blk, lse_blk) (DESIGN "Attention blocks"): the weights
// in double, each o element loaded to fp32, fa * o_acc + fb * o_blk in fp32, stored in T.
template <class T>
void attn_merge(const AttnShape& s, T* o_acc, float* lse_acc, const T* o_blk, const float* lse_blk,
                int threads) {
  const int d = s.vdim();
  for_each_row(s, threads, [&](int64_t li, int64_t row, int) {
    float& la = lse_acc[li];
    const float lb = lse_blk[li];
    T* oa = o_acc + row;
    const T* ob = o_blk + row;
    if (lb == kNegInf) {  // the block adds nothing (its o may be anything)
      if (la == kNegInf) std::fill(oa, oa + d, from_f32<T>(0.0f));  // still no key: o = 0 by convention
      return;
    }
    if (la == kNegInf) {  // nothing so far: take the block (o_acc may be anything)
      std::memcpy(static_cast<void*>(oa), ob, sizeof(T) * size_t(d));
      la = lb;
      return;
    }
    // Weights relative to the larger lse, in double: lse = mx + log(wa + wb).
    const double mx = std::max(la, lb);
    const double wa = std::exp(double(la) - mx), wb = std::exp(double(lb) - mx);
    const double sum = wa + wb;
    const float fa = static_cast<float>(wa / sum), fb = static_cast<float>(wb / sum);
    for (int c = 0; c < d; ++c) oa[c] = from_f32<T>(fa * to_f32(oa[c]) + fb * to_f32(ob[c]));
    la = static_cast<float>(mx + std::log(sum));
  });
}

// The sinks (Backend::attn_sink_fwd): lse' = log(e^lse + e^sink) and the weight e^(lse - lse')
// in double, each o element scaled in fp32 and stored in T; a row with lse = -inf gets o = 0.
template <class T>
void attn_sink_fwd(const AttnShape& s, const float* sinks, T* o, float* lse, int threads) {
  const int d = s.vdim();
  for_each_row(s, threads, [&](int64_t li, int64_t row, int h) {
    float& l = lse[li];
    T* oh = o + row;
    const double sk = sinks[h];
    if (l == kNegInf) {  // no key: only the sink, which has no value
      std::fill(oh, oh + d, from_f32<T>(0.0f));
      l = static_cast<float>(sk);
      return;
    }
    const double mx = std::max(double(l), sk);
    const double lse2 = mx + std::log(std::exp(double(l) - mx) + std::exp(sk - mx));
    const float w = static_cast<float>(std::exp(double(l) - lse2));
    for (int c = 0; c < d; ++c) oh[c] = from_f32<T>(w * to_f32(oh[c]));
    l = static_cast<float>(lse2);
  });
}

// dsinks[h] -= sum over (b, i) of e^(sink - lse') * rowsum(dout * o'), per head in double in the
// order (b, i) (deterministic for any thread count), added to dsinks once.
template <class T>
void attn_sink_bwd(const AttnShape& s, const float* sinks, const T* o, const T* dout, const float* lse,
                   float* dsinks, int threads) {
  const int64_t B = s.B, nq = s.nq;
  const int hq = s.hq, d = s.vdim();
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int h = 0; h < hq; ++h) {
    double acc = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < nq; ++i) {
        const float l = lse[(b * hq + h) * nq + i];
        if (l == kNegInf) continue;  // unreachable after attn_sink_fwd (lse' >= sink)
        const T* a = o + ((b * nq + i) * hq + h) * d;
        const T* c = dout + ((b * nq + i) * hq + h) * d;
        double dot = 0;
        for (int e = 0; e < d; ++e) dot += double(to_f32(a[e])) * double(to_f32(c[e]));
        acc += std::exp(double(sinks[h]) - double(l)) * dot;
      }
    dsinks[h] = static_cast<float>(double(dsinks[h]) - acc);
  }
}

// delta = rowsum(do * o) over dv, in double: 8 interleaved lanes (lane u takes elements
// e = u mod 8 of the whole groups of 8), combined ((0+4)+(1+5))+((2+6)+(3+7)), then the tail
// elements in order; rounded to fp32 once.
template <class T>
void attn_bwd_delta(const AttnShape& s, const T* o, const T* dout, float* delta, int threads) {
  const int d = s.vdim();
  for_each_row(s, threads, [&](int64_t li, int64_t row, int) {
    const T* a = o + row;
    const T* c = dout + row;
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // independent lanes: vectorisable, fixed order
    int e = 0;
    for (; e + 8 <= d; e += 8)
      for (int u = 0; u < 8; ++u) acc[u] += double(to_f32(a[e + u])) * double(to_f32(c[e + u]));
    double t = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; e < d; ++e) t += double(to_f32(a[e])) * double(to_f32(c[e]));
    delta[li] = static_cast<float>(t);
  });
}

}  // namespace cpbench::cpu
