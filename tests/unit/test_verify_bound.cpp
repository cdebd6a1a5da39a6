// The verification bound (bench/verify_bound.h): the error ||a-b|| / max(||b||, m), the scales m
// of dq and dk against a hand computation and a dense re-derivation, and the test-only
// perturbation's parsing.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "bench/verify_bound.h"

using namespace cpbench;

namespace {
using Tensors = std::map<std::string, std::vector<float>>;

std::vector<float> normal(size_t n, std::mt19937& rng, double sigma = 1.0) {
  std::normal_distribution<float> dist(0.0f, float(sigma));
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

double norm(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  return std::sqrt(s);
}

LayerShape shape_of(int64_t B, int64_t N, int H, int G, int d, bool causal) {
  LayerShape s;
  s.B = B, s.N = N, s.H = H, s.G = G, s.d = d, s.D = H * d, s.mask.causal = causal;
  return s;
}

DocStarts doc_starts(std::vector<int64_t> starts) { return std::make_shared<const std::vector<int64_t>>(std::move(starts)); }

// Random reference tensors of a shape; lse is each row's log-sum-exp over its visible keys (as
// the forward gives), -inf for a row that sees none.
Tensors random_reference(const LayerShape& s, std::mt19937& rng) {
  const size_t nq = size_t(s.B * s.N * s.H * s.d), nk = size_t(s.B * s.N * s.G * s.d);
  Tensors t{{"q", normal(nq, rng)}, {"k", normal(nk, rng)}, {"v", normal(nk, rng)},
            {"o", normal(nq, rng)}, {"do", normal(nq, rng)}, {"lse", {}}};
  const AttnMask mask = s.mask.attn();
  const int rep = s.H / s.G;
  for (int64_t b = 0; b < s.B; ++b)
    for (int h = 0; h < s.H; ++h)
      for (int64_t i = 0; i < s.N; ++i) {
        double sum = 0;
        for (int64_t j = 0; j < s.N; ++j) {
          if (!mask.visible(i, j)) continue;
          double qk = 0;
          for (int c = 0; c < s.d; ++c)
            qk += double(t["q"][size_t(((b * s.N + i) * s.H + h) * s.d + c)]) *
                  t["k"][size_t(((b * s.N + j) * s.G + h / rep) * s.d + c)];
          sum += std::exp(qk / std::sqrt(double(s.d)));
        }
        t["lse"].push_back(sum > 0 ? float(std::log(sum)) : -INFINITY);
      }
  // lse is [B, H, N]: the loops above run in that order.
  return t;
}

// m_dq, m_dk written out densely per (b, h): W = P o (|dP| + |D|) as an N x N matrix, then
// m_dq = scale * W @ |K|, m_dk = scale * sum over the group's heads of W^T @ |Q|.
std::pair<double, double> dense_scales(const Tensors& t, const LayerShape& s) {
  const int64_t N = s.N;
  const int d = s.d, rep = s.H / s.G;
  const double scale = 1.0 / std::sqrt(double(d));
  const AttnMask mask = s.mask.attn();
  auto Q = [&](int64_t b, int64_t i, int h, int c) { return double(t.at("q")[size_t(((b * N + i) * s.H + h) * d + c)]); };
  auto K = [&](const char* n, int64_t b, int64_t j, int g, int c) {
    return double(t.at(n)[size_t(((b * N + j) * s.G + g) * d + c)]);
  };
  auto HD = [&](const char* n, int64_t b, int64_t i, int h, int c) {
    return double(t.at(n)[size_t(((b * N + i) * s.H + h) * d + c)]);
  };
  double sq_dq = 0, sq_dk = 0;
  for (int64_t b = 0; b < s.B; ++b)
    for (int g = 0; g < s.G; ++g) {
      std::vector<double> mdk(size_t(N * d), 0.0);
      for (int h = g * rep; h < (g + 1) * rep; ++h) {
        std::vector<double> W(size_t(N * N), 0.0);
        for (int64_t i = 0; i < N; ++i) {
          const double L = t.at("lse")[size_t((b * s.H + h) * N + i)];
          double D = 0;
          for (int c = 0; c < d; ++c) D += HD("do", b, i, h, c) * HD("o", b, i, h, c);
          for (int64_t j = 0; j < N; ++j) {
            if (!mask.visible(i, j) || !std::isfinite(L)) continue;
            double qk = 0, dp = 0;
            for (int c = 0; c < d; ++c) qk += Q(b, i, h, c) * K("k", b, j, g, c), dp += HD("do", b, i, h, c) * K("v", b, j, g, c);
            W[size_t(i * N + j)] = std::exp(qk * scale - L) * (std::fabs(dp) + std::fabs(D));
          }
        }
        for (int64_t i = 0; i < N; ++i)
          for (int c = 0; c < d; ++c) {
            double x = 0;
            for (int64_t j = 0; j < N; ++j) x += W[size_t(i * N + j)] * std::fabs(K("k", b, j, g, c));
            sq_dq += (scale * x) * (scale * x);
          }
        for (int64_t j = 0; j < N; ++j)
          for (int c = 0; c < d; ++c)
            for (int64_t i = 0; i < N; ++i) mdk[size_t(j * d + c)] += scale * W[size_t(i * N + j)] * std::fabs(Q(b, i, h, c));
      }
      for (double x : mdk) sq_dk += x * x;
    }
  return {std::sqrt(sq_dq), std::sqrt(sq_dk)};
}
}  // namespace

TEST_CASE("verify_error: relative L2 when m = 0, and it cannot rubber-stamp") {
  CHECK(verify_error({1, 2, 3}, {1, 2, 3}) == 0.0);
  CHECK(verify_error({0, 0}, {0, 0}) == 0.0);
  CHECK(verify_error({1, 2, 3.0001f}, {1, 2, 3}) == Approx(1e-4 / std::sqrt(14.0)).epsilon(1e-2));
  CHECK(std::isinf(verify_error({1, NAN, 3}, {1, 2, 3})));       // NaN where the reference has none
  CHECK(std::isinf(verify_error({1, 2, 3}, {1, -INFINITY, 3})));  // a finite value where it has -inf
  CHECK(std::isinf(verify_error({INFINITY, 2}, {-INFINITY, 2})));  // non-finite of another kind
  CHECK(verify_error({NAN, -INFINITY, 2}, {NAN, -INFINITY, 2}) == 0.0);
  CHECK(std::isinf(verify_error({1, 2}, {1, 2, 3})));
  CHECK(std::isinf(verify_error({1e-30f, 0}, {0, 0})));  // a zero reference with no scale: any error fails
}

TEST_CASE("verify_error: m only matters where the reference is small against it") {
  std::mt19937 rng(7);
  // A normal tensor: ||b|| >> m, so the value is today's relative L2 error, bit for bit.
  const std::vector<float> b = normal(4096, rng);
  std::vector<float> a = b;
  for (size_t i = 0; i < a.size(); i += 17) a[i] += 1e-4f;
  const double rel = verify_error(a, b);
  CHECK(rel > 1e-6);
  CHECK(verify_error(a, b, 1e-3 * norm(b)) == rel);
  CHECK(verify_error(a, b, 0.5 * norm(b)) == rel);
  // m above ||b|| divides by m instead.
  CHECK(verify_error(a, b, 10 * norm(b)) == Approx(rel / 10).epsilon(1e-12));

  // A vanishing gradient: the reference is exactly zero, the candidate is noise.
  const double m = 3.7;
  const std::vector<float> zero(4096, 0.0f);
  std::vector<float> noise = normal(4096, rng);
  const double n0 = norm(noise);
  for (float& x : noise) x = float(x / n0 * 1e-7 * m);  // ||noise|| = 1e-7 m: rounding-sized
  CHECK(verify_error(noise, zero, m) == Approx(1e-7).epsilon(1e-3));
  CHECK(verify_error(noise, zero, m) <= 1e-5);
  CHECK(std::isinf(verify_error(noise, zero)));  // today's rule: relative error of noise is infinite
  for (float& x : noise) x *= 1e4f;              // ||noise|| = 1e-3 m: a real error
  CHECK(verify_error(noise, zero, m) == Approx(1e-3).epsilon(1e-3));
  CHECK_FALSE(verify_error(noise, zero, m) <= 1e-5);
}

TEST_CASE("gradient scales: a hand-computed case (N = 2, d = 1, causal)") {
  // q = [1, 2], k = [1, -1], v = [2, 3], do = [1, -1], o = [0.5, 4], lse = [1, 0] (not from a real
  // forward: the formula takes them as given). P00 = e^0, P10 = e^2, P11 = e^-2; D = [0.5, -4];
  // dP00 = 2, dP10 = -2, dP11 = -3; W = P o (|dP| + |D|): W00 = 2.5, W10 = 6e^2, W11 = 7e^-2.
  // m_dq = [W00 |k0|, W10 |k0| + W11 |k1|], m_dk = [W00 |q0| + W10 |q1|, W11 |q1|].
  const LayerShape s = shape_of(1, 2, 1, 1, 1, true);
  const Tensors t{{"q", {1, 2}}, {"k", {1, -1}}, {"v", {2, 3}}, {"do", {1, -1}}, {"o", {0.5f, 4}}, {"lse", {1, 0}}};
  const double e2 = std::exp(2.0), em2 = std::exp(-2.0);
  const GradientScales m = gradient_scales(t, s);
  CHECK(m.dq == Approx(std::hypot(2.5, 6 * e2 + 7 * em2)).epsilon(1e-12));
  CHECK(m.dk == Approx(std::hypot(2.5 + 12 * e2, 14 * em2)).epsilon(1e-12));
  CHECK(m.of("dq") == m.dq);
  CHECK(m.of("dk") == m.dk);
  CHECK(m.of("dv") == 0.0);
  CHECK(m.of("dx") == 0.0);
  // Not causal: row 0 also sees key 1 (P01 = e^(1 * -1 - 1) = e^-2, dP01 = 3, W01 = 3.5 e^-2).
  const GradientScales nc = gradient_scales(t, shape_of(1, 2, 1, 1, 1, false));
  CHECK(nc.dq == Approx(std::hypot(2.5 + 3.5 * em2, 6 * e2 + 7 * em2)).epsilon(1e-12));
  CHECK(nc.dk == Approx(std::hypot(2.5 + 12 * e2, 14 * em2 + 3.5 * em2)).epsilon(1e-12));
}

TEST_CASE("gradient scales: equal to a dense re-derivation under every mask, GQA, B = 2") {
  std::mt19937 rng(11);
  struct Case {
    const char* what;
    bool causal;
    int64_t window;
    std::vector<int64_t> starts;  // empty: one document
  };
  const std::vector<Case> cases = {{"causal", true, 0, {}},
                                   {"not causal", false, 0, {}},
                                   {"causal window 3", true, 3, {}},
                                   {"window 2, not causal", false, 2, {}},
                                   {"documents", true, 0, {0, 4, 5, 11}},
                                   {"documents, window, not causal", false, 3, {0, 6, 7}}};
  for (const Case& c : cases) {
    SECTION(c.what) {
      LayerShape s = shape_of(2, 13, 4, 2, 8, c.causal);
      s.mask.window = c.window;
      if (!c.starts.empty()) s.mask.docs = doc_starts(c.starts);
      const Tensors t = random_reference(s, rng);
      const auto [want_dq, want_dk] = dense_scales(t, s);
      const GradientScales m = gradient_scales(t, s);
      CHECK(want_dq > 0);
      CHECK(m.dq == Approx(want_dq).epsilon(1e-12));
      CHECK(m.dk == Approx(want_dk).epsilon(1e-12));
      // Shared over 3 parts (ranks): the sums of squares add up to the whole.
      double dq2 = 0, dk2 = 0;
      for (int part = 0; part < 3; ++part) {
        const GradientScales p = gradient_scale_squares(t, s, part, 3);
        dq2 += p.dq, dk2 += p.dk;
      }
      CHECK(std::sqrt(dq2) == Approx(m.dq).epsilon(1e-12));
      CHECK(std::sqrt(dk2) == Approx(m.dk).epsilon(1e-12));
    }
  }
}

TEST_CASE("gradient scales: window 1 and one-token documents see only the diagonal") {
  // Each query sees itself: P_ii = 1 with lse_i = q_i.k_i / sqrt(d), and
  // m_dq row i = (|do_i.v_i| + |do_i.o_i|) |k_i| / sqrt(d) (m_dk likewise with |q_i|, MHA).
  std::mt19937 rng(5);
  LayerShape s = shape_of(1, 9, 2, 2, 4, true);
  s.mask.window = 1;
  const Tensors t = random_reference(s, rng);
  double sq_dq = 0, sq_dk = 0;
  for (int64_t i = 0; i < s.N; ++i)
    for (int h = 0; h < s.H; ++h) {
      const size_t row = size_t((i * s.H + h) * s.d);
      double dp = 0, D = 0;
      for (int c = 0; c < s.d; ++c) dp += double(t.at("do")[row + c]) * t.at("v")[row + c], D += double(t.at("do")[row + c]) * t.at("o")[row + c];
      const double w = (std::fabs(dp) + std::fabs(D)) / std::sqrt(double(s.d));
      for (int c = 0; c < s.d; ++c) {
        sq_dq += std::pow(w * std::fabs(t.at("k")[row + c]), 2);
        sq_dk += std::pow(w * std::fabs(t.at("q")[row + c]), 2);
      }
    }
  const GradientScales w1 = gradient_scales(t, s);
  CHECK(w1.dq == Approx(std::sqrt(sq_dq)).epsilon(1e-6));  // lse is rounded to float
  CHECK(w1.dk == Approx(std::sqrt(sq_dk)).epsilon(1e-6));
  // The same tensors under documents of one token each, not causal, no window: the same mask.
  LayerShape docs = s;
  docs.mask.window = 0;
  docs.mask.causal = false;
  std::vector<int64_t> starts;
  for (int64_t i = 0; i < s.N; ++i) starts.push_back(i);
  docs.mask.docs = doc_starts(starts);
  const GradientScales d1 = gradient_scales(t, docs);
  CHECK(d1.dq == w1.dq);
  CHECK(d1.dk == w1.dk);
}

TEST_CASE("gradient scales: rows that see no key, prefill, missing tensors") {
  const LayerShape s = shape_of(1, 2, 1, 1, 1, true);
  Tensors t{{"q", {1, 2}}, {"k", {1, -1}}, {"v", {2, 3}}, {"do", {1, -1}}, {"o", {0.5f, 4}}, {"lse", {-INFINITY, 0}}};
  const double e2 = std::exp(2.0), em2 = std::exp(-2.0);
  const GradientScales m = gradient_scales(t, s);  // row 0 contributes nothing
  CHECK(m.dq == Approx(6 * e2 + 7 * em2).epsilon(1e-12));
  CHECK(m.dk == Approx(std::hypot(12 * e2, 14 * em2)).epsilon(1e-12));
  LayerShape prefill = s;
  prefill.pass.kind = PassKind::prefill;
  CHECK(gradient_scales(t, prefill).dq == 0.0);
  CHECK(gradient_scales(t, prefill).dk == 0.0);
  t.erase("do");
  CHECK_THROWS_WITH(gradient_scales(t, s), Catch::Contains("no tensor 'do'"));
  t["do"] = {1, -1, 0};
  CHECK_THROWS_WITH(gradient_scales(t, s), Catch::Contains("'do' has 3 elements, expected 2"));
}

TEST_CASE("CPBENCH_TEST_PERTURB: TENSOR:VALUE, anything else is an error naming it") {
  unsetenv("CPBENCH_TEST_PERTURB");
  CHECK(test_perturbation().tensor.empty());
  setenv("CPBENCH_TEST_PERTURB", "dk:1e-3", 1);
  const TestPerturbation p = test_perturbation();
  CHECK(p.tensor == "dk");
  CHECK(p.value == 1e-3f);
  setenv("CPBENCH_TEST_PERTURB", "dz:1e-3", 1);
  CHECK_THROWS_WITH(test_perturbation(), Catch::Contains("CPBENCH_TEST_PERTURB='dz:1e-3'") &&
                                             Catch::Contains("'dz' is not a dumped tensor"));
  setenv("CPBENCH_TEST_PERTURB", "dk:abc", 1);
  CHECK_THROWS_WITH(test_perturbation(), Catch::Contains("VALUE 'abc' is not a finite number"));
  setenv("CPBENCH_TEST_PERTURB", "dk:inf", 1);
  CHECK_THROWS_WITH(test_perturbation(), Catch::Contains("not a finite number"));
  setenv("CPBENCH_TEST_PERTURB", "dk", 1);
  CHECK_THROWS_WITH(test_perturbation(), Catch::Contains("expected TENSOR:VALUE"));
  unsetenv("CPBENCH_TEST_PERTURB");
}
