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

#include "kernels/attention_reference.h"
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
// The float64 reference (kernels/attention_reference.h), shared with `cpbench verify --numerics`.
using cpbench::AttnRef;
using cpbench::attn_reference;
using cpbench::ref_visible;
using cpbench::ref_visible_pairs;

}  // namespace cpbench::test
