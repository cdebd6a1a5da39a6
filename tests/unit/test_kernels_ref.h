// Naive float64 references and comparators for the kernel tests. The references follow the
// textbook definitions (direct softmax over all visible keys, explicit Jacobians), never the
// kernels' tiled algorithms.
#pragma once
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/backend.h"

namespace cpbench::test {

inline std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

inline std::vector<double> to_double(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// ||a - b|| / ||b|| over finite reference entries; the NaN/Inf pattern must match exactly (a NaN
// where the reference is finite, an unwritten poisoned element, is a mismatch). The one
// comparator of the kernel tests: CPU kernels, the CUDA emulator and the CUDA backend use it.
struct Cmp {
  double rel_l2 = 0;
  int64_t nonfinite_mismatch = 0;  // positions where a and b disagree on NaN / +-inf
  int64_t worst = -1;              // the first non-finite mismatch, else the largest error
  std::string str() const {
    std::ostringstream os;
    os << "rel_l2=" << rel_l2 << " nonfinite_mismatch=" << nonfinite_mismatch << " worst=" << worst;
    return os.str();
  }
  bool ok(double tol) const { return nonfinite_mismatch == 0 && rel_l2 <= tol; }
};

// got[0..n) against want[0..n): anything indexable whose elements convert to double.
template <class Got, class Want>
Cmp compare_n(const Got& got, const Want& want, size_t n) {
  Cmp c;
  double num = 0, den = 0, worst = -1;
  for (size_t i = 0; i < n; ++i) {
    const double x = double(got[i]), y = double(want[i]);
    const bool fx = std::isfinite(x), fy = std::isfinite(y);
    if (!fx || !fy) {
      const bool same = (std::isnan(x) && std::isnan(y)) || (std::isinf(x) && std::isinf(y) && (x > 0) == (y > 0));
      if (!same) {
        ++c.nonfinite_mismatch;
        if (c.worst < 0 || c.nonfinite_mismatch == 1) c.worst = int64_t(i);
      }
      continue;
    }
    const double e = (x - y) * (x - y);
    num += e;
    den += y * y;
    if (e > worst) {
      worst = e;
      if (c.nonfinite_mismatch == 0) c.worst = int64_t(i);
    }
  }
  c.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return c;
}

// Whole vectors; a size mismatch fails (nonfinite_mismatch = -1, rel_l2 = inf).
template <class A, class B>
Cmp compare(const std::vector<A>& a, const std::vector<B>& b) {
  if (a.size() != b.size()) {
    Cmp c;
    c.nonfinite_mismatch = -1;
    c.rel_l2 = std::numeric_limits<double>::infinity();
    return c;
  }
  return compare_n(a, b, a.size());
}

// An attention problem's shape in one call (the kernel tests' case tables).
inline AttnShape attn_case_shape(int64_t B, int64_t nq, int64_t nk, int hq, int hk, int d, bool causal,
                                 int64_t window = 0, DocStarts docs = nullptr, int rep = 0, int head0 = 0,
                                 int d_v = 0) {
  AttnShape s;
  s.d_v = d_v;
  s.rep = rep;
  s.head0 = head0;
  s.B = B;
  s.nq = nq;
  s.nk = nk;
  s.hq = hq;
  s.hk = hk;
  s.d = d;
  s.causal = causal;
  s.window = window;
  s.docs = std::move(docs);
  return s;
}

// ---- attention --------------------------------------------------------------------------------
// DESIGN's visibility rule written out directly (not through AttnMask), on global positions:
// same document, causal order, and the sliding window.
inline bool ref_visible(const AttnShape& s, int64_t i, int64_t j) {
  auto doc = [&](int64_t p) {
    int64_t idx = 0;
    if (s.docs)
      for (size_t x = 0; x < s.docs->size(); ++x)
        if ((*s.docs)[x] <= p) idx = int64_t(x);
    return idx;
  };
  if (doc(i) != doc(j)) return false;
  if (s.causal && j > i) return false;
  if (s.window == 0) return true;
  return s.causal ? i - j < s.window : std::llabs(i - j) < s.window;
}

// Brute-force count of visible pairs (the FLOP counter's reference).
inline int64_t ref_visible_pairs(const AttnShape& s, const Positions& qpos, const Positions& kpos) {
  int64_t n = 0;
  for (int64_t i : qpos.list())
    for (int64_t j : kpos.list()) n += ref_visible(s, i, j);
  return n;
}

struct AttnRef {
  std::vector<double> o, lse;       // [B,nq,hq,dv], [B,hq,nq]
  std::vector<double> dq, dk, dv;   // gradients of sum(o * dout)
};

// Direct definition: for each row, softmax over the visible keys.
inline AttnRef attn_reference(const AttnShape& s, const std::vector<double>& q,
                              const std::vector<double>& k, const std::vector<double>& v,
                              const std::vector<double>& dout, const Positions& qpos,
                              const Positions& kpos, bool with_grad) {
  const int64_t B = s.B, nq = s.nq, nk = s.nk;
  const int hq = s.hq, hk = s.hk, d = s.d, dv = s.vdim();  // q, k over d; v, o over dv
  const int grp = s.rep > 0 ? s.rep : hq / hk;  // query head h uses kv head (h + head0) / grp
  const double scale = s.scale != 0 ? s.scale : 1.0 / std::sqrt(double(d));
  const std::vector<int64_t> qp = qpos.list(), kp = kpos.list();
  AttnRef r;
  r.o.assign(size_t(B * nq * hq * dv), 0.0);
  r.lse.assign(size_t(B * hq * nq), -std::numeric_limits<double>::infinity());
  if (with_grad) {
    r.dq.assign(size_t(B * nq * hq * d), 0.0);
    r.dk.assign(size_t(B * nk * hk * d), 0.0);
    r.dv.assign(size_t(B * nk * hk * dv), 0.0);
  }
  auto Q = [&](int64_t b, int64_t i, int h) { return &q[size_t(((b * nq + i) * hq + h) * d)]; };
  auto K = [&](int64_t b, int64_t j, int g) { return &k[size_t(((b * nk + j) * hk + g) * d)]; };
  auto V = [&](int64_t b, int64_t j, int g) { return &v[size_t(((b * nk + j) * hk + g) * dv)]; };
  std::vector<double> sc(static_cast<size_t>(nk)), p(sc), dp(sc);
  for (int64_t b = 0; b < B; ++b)
    for (int h = 0; h < hq; ++h) {
      const int g = (h + s.head0) / grp;
      for (int64_t i = 0; i < nq; ++i) {
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < nk; ++j) {
          const bool vis = ref_visible(s, qp[i], kp[j]);
          double dot = 0;
          for (int c = 0; c < d; ++c) dot += Q(b, i, h)[c] * K(b, j, g)[c];
          sc[j] = vis ? dot * scale : -std::numeric_limits<double>::infinity();
          mx = std::max(mx, sc[j]);
        }
        if (mx == -std::numeric_limits<double>::infinity()) continue;  // no visible key
        double l = 0;
        for (int64_t j = 0; j < nk; ++j) {
          p[j] = std::exp(sc[j] - mx);
          l += p[j];
        }
        for (int64_t j = 0; j < nk; ++j) p[j] /= l;
        double* orow = &r.o[size_t(((b * nq + i) * hq + h) * dv)];
        for (int64_t j = 0; j < nk; ++j)
          for (int c = 0; c < dv; ++c) orow[c] += p[j] * V(b, j, g)[c];
        r.lse[size_t((b * hq + h) * nq + i)] = mx + std::log(l);
        if (!with_grad) continue;
        // Softmax Jacobian: dS_j = p_j (dp_j - sum_l p_l dp_l), dp_j = dout . v_j.
        const double* dorow = &dout[size_t(((b * nq + i) * hq + h) * dv)];
        double sum_pdp = 0;
        for (int64_t j = 0; j < nk; ++j) {
          double t = 0;
          for (int c = 0; c < dv; ++c) t += dorow[c] * V(b, j, g)[c];
          dp[j] = t;
          sum_pdp += p[j] * t;
        }
        double* dqrow = &r.dq[size_t(((b * nq + i) * hq + h) * d)];
        for (int64_t j = 0; j < nk; ++j) {
          if (p[j] == 0) continue;
          const double ds = p[j] * (dp[j] - sum_pdp);
          double* dkrow = &r.dk[size_t(((b * nk + j) * hk + g) * d)];
          double* dvrow = &r.dv[size_t(((b * nk + j) * hk + g) * dv)];
          for (int c = 0; c < d; ++c) {
            dqrow[c] += scale * ds * K(b, j, g)[c];
            dkrow[c] += scale * ds * Q(b, i, h)[c];
          }
          for (int c = 0; c < dv; ++c) dvrow[c] += p[j] * dorow[c];
        }
      }
    }
  return r;
}

}  // namespace cpbench::test
