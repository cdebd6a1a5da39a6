#include "bench/verify_bound.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

#include "kernels/backend.h"

namespace cpbench {

namespace {
// 0 finite, 1 NaN, 2 +Inf, 3 -Inf: non-finite elements must agree in position and kind.
int finite_kind(float x) { return std::isfinite(x) ? 0 : std::isnan(x) ? 1 : x > 0 ? 2 : 3; }

const std::vector<float>& tensor(const std::map<std::string, std::vector<float>>& t, const char* name, size_t count) {
  const auto it = t.find(name);
  if (it == t.end()) throw std::invalid_argument(std::string("gradient scales: the reference has no tensor '") + name + "'");
  if (it->second.size() != count)
    throw std::invalid_argument(std::string("gradient scales: tensor '") + name + "' has " +
                                std::to_string(it->second.size()) + " elements, expected " + std::to_string(count));
  return it->second;
}
}  // namespace

double verify_tolerance(const std::string& dtype, const std::string& comm_dtype) {
  auto bound = [](const std::string& t) { return t == "fp32" ? 1e-5 : t == "fp8" ? 1.0 / 16 : 2e-2; };
  return comm_dtype == "run" ? bound(dtype) : std::max(bound(dtype), bound(comm_dtype));
}

double verify_error(const std::vector<float>& a, const std::vector<float>& b, double m) {
  if (a.size() != b.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const int ka = finite_kind(a[i]), kb = finite_kind(b[i]);
    if (ka != kb) return INFINITY;
    if (ka != 0) continue;
    const double diff = double(a[i]) - double(b[i]);
    num += diff * diff;
    den += double(b[i]) * double(b[i]);
  }
  if (num == 0) return 0.0;
  const double scale = std::max(std::sqrt(den), m);
  return scale > 0 ? std::sqrt(num) / scale : INFINITY;
}

GradientScales gradient_scale_squares(const std::map<std::string, std::vector<float>>& ref, const LayerShape& s,
                                      int part, int parts) {
  if (parts < 1 || part < 0 || part >= parts)
    throw std::invalid_argument("gradient scales: part=" + std::to_string(part) + " of parts=" + std::to_string(parts));
  GradientScales sq;
  if (s.forward_only()) return sq;  // no backward: dq and dk are not computed
  const int64_t B = s.B, N = s.N, H = s.H, G = s.G, d = s.d, dv = s.vdim(), rep = H / G;  // v, o: dv wide
  const size_t nq = size_t(B * N * H * d), nk = size_t(B * N * G * d), no = size_t(B * N * H * dv), nv = size_t(B * N * G * dv);
  const std::vector<float>& q = tensor(ref, "q", nq);
  const std::vector<float>& k = tensor(ref, "k", nk);
  const std::vector<float>& v = tensor(ref, "v", nv);
  const std::vector<float>& o = tensor(ref, "o", no);
  const std::vector<float>& dout = tensor(ref, "do", no);
  const std::vector<float>& lse = tensor(ref, "lse", size_t(B * H * N));
  const AttnMask mask = s.mask.attn();  // the kernels' visibility rule
  const double scale = 1.0 / std::sqrt(double(d));
  // Per work item, its kv head's k, |k| and v as contiguous float64 rows [N, d]; per query row,
  // q, |q| and do. The dot products keep four partial sums so the compiler can vectorise them.
  const size_t Nd = size_t(N * d), ud = size_t(d);
  std::vector<double> kd(Nd), ka(Nd), vd(static_cast<size_t>(N * dv)), qd(ud), qa(ud), dod(static_cast<size_t>(dv));
  std::vector<double> acc_q(ud);  // one row of m_dq before the 1/sqrt(d)
  std::vector<double> acc_k(Nd);  // m_dk of the kv head, summed over its query heads
  auto dot = [](const double* x, const double* y, int64_t n) {
    double p[4] = {0, 0, 0, 0};
    int64_t c = 0;
    for (; c + 4 <= n; c += 4)
      for (int l = 0; l < 4; ++l) p[l] += x[c + l] * y[c + l];
    for (; c < n; ++c) p[0] += x[c] * y[c];
    return (p[0] + p[1]) + (p[2] + p[3]);
  };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t g = 0; g < G; ++g) {
      if ((b * G + g) % parts != part) continue;
      for (int64_t j = 0; j < N; ++j) {
        for (int64_t c = 0; c < d; ++c) {
          const size_t at = size_t(((b * N + j) * G + g) * d + c), to = size_t(j * d + c);
          kd[to] = k[at], ka[to] = std::fabs(k[at]);
        }
        for (int64_t c = 0; c < dv; ++c) vd[size_t(j * dv + c)] = v[size_t(((b * N + j) * G + g) * dv + c)];
      }
      std::fill(acc_k.begin(), acc_k.end(), 0.0);
      for (int64_t h = g * rep; h < (g + 1) * rep; ++h)
        for (int64_t i = 0; i < N; ++i) {
          const double L = lse[size_t((b * H + h) * N + i)];
          if (!std::isfinite(L)) continue;  // a row that sees no key has no gradient
          const size_t row = size_t(((b * N + i) * H + h) * d), orow = size_t(((b * N + i) * H + h) * dv);  // [B,N,H,d|dv]
          double D = 0;
          for (int64_t c = 0; c < d; ++c) qd[size_t(c)] = q[row + size_t(c)], qa[size_t(c)] = std::fabs(q[row + size_t(c)]);
          for (int64_t c = 0; c < dv; ++c) {
            dod[size_t(c)] = dout[orow + size_t(c)];
            D += double(dout[orow + size_t(c)]) * o[orow + size_t(c)];
          }
          const double absD = std::fabs(D);
          std::fill(acc_q.begin(), acc_q.end(), 0.0);
          const int64_t j0 = std::max<int64_t>(0, mask.lo(i)), j1 = std::min<int64_t>(N - 1, mask.hi(i));
          for (int64_t j = j0; j <= j1; ++j) {
            const size_t kr = size_t(j * d);
            const double w = std::exp(dot(qd.data(), &kd[kr], d) * scale - L) *
                             (std::fabs(dot(dod.data(), &vd[size_t(j * dv)], dv)) + absD);
            for (size_t c = 0; c < ud; ++c) {
              acc_q[c] += w * ka[kr + c];
              acc_k[kr + c] += w * qa[c];
            }
          }
          for (double x : acc_q) sq.dq += (x * scale) * (x * scale);
        }
      for (double x : acc_k) sq.dk += (x * scale) * (x * scale);
    }
  return sq;
}

GradientScales gradient_scales(const std::map<std::string, std::vector<float>>& ref, const LayerShape& shape) {
  const GradientScales sq = gradient_scale_squares(ref, shape, 0, 1);
  return {std::sqrt(sq.dq), std::sqrt(sq.dk)};
}

TestPerturbation test_perturbation() {
  const char* env = std::getenv("CPBENCH_TEST_PERTURB");
  TestPerturbation p;
  if (!env || !*env) return p;
  const std::string spec = env;
  const auto bad = [&](const std::string& why) {
    return std::invalid_argument("CPBENCH_TEST_PERTURB='" + spec + "' (test only): " + why);
  };
  const size_t colon = spec.find(':');
  if (colon == std::string::npos) throw bad("expected TENSOR:VALUE, e.g. dk:1e-3");
  p.tensor = spec.substr(0, colon);
  const MlaDims every_mla{1, 1, 1, 1, 1};  // a query rank: MLA's names with w_dq's
  const std::vector<std::string> names = dump_tensor_names(true, true, &every_mla);  // with every name a run may dump
  if (std::find(names.begin(), names.end(), p.tensor) == names.end()) {
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    throw bad("'" + p.tensor + "' is not a dumped tensor (" + list + ")");
  }
  const std::string num = spec.substr(colon + 1);
  char* end = nullptr;
  p.value = std::strtof(num.c_str(), &end);
  if (num.empty() || end != num.c_str() + num.size() || !std::isfinite(p.value))
    throw bad("VALUE '" + num + "' is not a finite number");
  return p;
}

}  // namespace cpbench
