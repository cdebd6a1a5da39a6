// CPU backend: memory, replay mode and compute log, GEMM, RMSNorm, RoPE and layout ops against
// float64 references; concurrent single-threaded OpenBLAS calls from OpenMP threads.
#include <catch2/catch.hpp>
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_kernels.h"
#include "tests/unit/test_kernels_ref.h"

using namespace cpbench;
using cpbench::test::compare;
using cpbench::test::randn;

namespace {
constexpr double kTol = 1e-5;

Tensor upload(Backend& be, const std::vector<float>& h, std::vector<int64_t> shape) {
  Tensor t = be.alloc(std::move(shape), DType::f32, MemKind::activations);
  be.upload(h, t);
  return t;
}
bool all_nan(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(), [](float x) { return std::isnan(x); });
}
}  // namespace

TEST_CASE("cpu alloc: aligned, tracked by kind, poisoned, freed with the last view", "[cpu]") {
  CpuBackend be(2);
  {
    Tensor w = be.alloc({10, 3}, DType::f32, MemKind::weights);
    CHECK(reinterpret_cast<uintptr_t>(w.data) % 64 == 0);
    CHECK(be.mem().stats().live[0] == 120);
    Tensor a = be.alloc({7}, DType::f32, MemKind::comm);
    CHECK(be.mem().stats().live[2] == 28);
    CHECK(be.mem().stats().live_total == 148);
    Tensor v = w.view(3, {6});
    w = Tensor{};
    CHECK(be.mem().stats().live[0] == 120);  // the view keeps it alive
    v = Tensor{};
    CHECK(be.mem().stats().live[0] == 0);
    CHECK(be.mem().stats().peak_total == 148);
  }
  CHECK(be.mem().stats().live_total == 0);
  be.set_poison(true);
  Tensor p = be.alloc({1000}, DType::f32, MemKind::activations);
  CHECK(all_nan(be.download(p)));
  Tensor h16 = be.alloc({4}, DType::bf16, MemKind::activations);  // 2 bytes per element, poisoned too
  CHECK(be.mem().stats().live[1] == 4000 + 8);
  CHECK(all_nan(be.download(h16)));
  Tensor z = be.alloc({0, 5}, DType::f32, MemKind::activations);
  CHECK(z.numel() == 0);
  CHECK(!z.empty());
}

TEST_CASE("cpu upload/download/copy_2d/convert/fill/add", "[cpu]") {
  CpuBackend be(2);
  const auto h = randn(60, 3);
  Tensor t = upload(be, h, {6, 10});
  CHECK(be.download(t) == h);
  CHECK_THROWS_WITH(be.upload(randn(59, 1), t), Catch::Contains("59"));
  // copy a 4x3 block from pitch 10 into pitch 5
  be.set_poison(true);
  Tensor d = be.alloc({4, 5}, DType::f32, MemKind::activations);
  be.copy_2d(d, 5, t, 10, 4, 3);
  const auto dh = be.download(d);
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 5; ++c) {
      if (c < 3) CHECK(dh[size_t(r * 5 + c)] == h[size_t(r * 10 + c)]);
      else CHECK(std::isnan(dh[size_t(r * 5 + c)]));  // outside the block: untouched
    }
  CHECK_THROWS(be.copy_2d(d, 5, t, 10, 5, 3));  // 5 rows do not fit in d
  Tensor c2 = be.alloc({6, 10}, DType::f32, MemKind::activations);
  be.convert(c2, t);
  CHECK(be.download(c2) == h);
  be.fill(c2, 2.5f);
  be.add(c2, c2, t);  // out aliases a
  const auto sum = be.download(c2);
  for (size_t i = 0; i < h.size(); ++i) CHECK(sum[i] == 2.5f + h[i]);
  Tensor small = be.alloc({5}, DType::f32, MemKind::activations);
  CHECK_THROWS(be.add(small, t, t));
}

TEST_CASE("cpu swiglu forward and backward against float64, in place too", "[cpu][mlp]") {
  CpuBackend be(2);
  const int64_t n = 777;
  auto ha = randn(size_t(n), 11), hb = randn(size_t(n), 12), hdg = randn(size_t(n), 13);
  for (size_t i = 0; i < ha.size(); i += 50) ha[i] *= 20.0f;  // saturated sigmoids
  Tensor a = upload(be, ha, {n}), b = upload(be, hb, {n}), dg = upload(be, hdg, {n});
  be.set_poison(true);
  Tensor g = be.alloc({n}, DType::f32, MemKind::activations), da = be.alloc({n}, DType::f32, MemKind::activations),
         db = be.alloc({n}, DType::f32, MemKind::activations);
  be.swiglu_fwd(a, b, g);
  be.swiglu_bwd(a, b, dg, da, db);
  const auto hg = be.download(g), hda = be.download(da), hdb = be.download(db);
  for (size_t i = 0; i < size_t(n); ++i) {
    const double x = ha[i], y = hb[i], d = hdg[i], s = 1.0 / (1.0 + std::exp(-x));
    const double tol = 1e-6 * (1.0 + std::abs(x)) * (1.0 + std::abs(y)) * (1.0 + std::abs(d));
    CAPTURE(i, x, y, d);
    CHECK(std::abs(hg[i] - x * s * y) <= tol);
    CHECK(std::abs(hda[i] - d * y * s * (1.0 + x * (1.0 - s))) <= tol);
    CHECK(std::abs(hdb[i] - d * x * s) <= tol);
  }
  be.swiglu_bwd(a, b, dg, a, b);  // da over a, db over b (the block's memory reuse): same values
  CHECK(be.download(a) == hda);
  CHECK(be.download(b) == hdb);
  Tensor small = be.alloc({5}, DType::f32, MemKind::activations);
  CHECK_THROWS(be.swiglu_fwd(a, b, small));
  CHECK_THROWS(be.swiglu_bwd(a, b, dg, small, db));
}

TEST_CASE("cpu compute log, compute-busy time, replay mode", "[cpu]") {
  CpuBackend be(1);
  Tensor a = upload(be, randn(16, 1), {4, 4}), b = upload(be, randn(16, 2), {4, 4});
  be.set_poison(true);
  Tensor c = be.alloc({4, 4}, DType::f32, MemKind::activations);
  be.set_phase(1);
  const Event e0 = be.record_event();
  be.gemm(false, false, 4, 4, 4, 1.0f, a, 4, b, 4, 0.0f, c, 4);
  be.add(c, c, a);
  be.fill(c, 1.0f);  // layout ops are busy time too
  const Event e1 = be.record_event();
  REQUIRE(be.compute_log().size() == 3);
  CHECK(be.compute_log()[0].name == "gemm");
  CHECK(be.compute_log()[1].name == "add");
  CHECK(be.compute_log()[1].phase == 1);
  CHECK(be.compute_log()[2].name == "fill");
  CHECK(be.compute_busy_ms() >= 0);
  CHECK(be.compute_busy_ms() <= be.elapsed_ms(e0, e1) + 1e-9);
  CHECK(be.model_flops() == 2.0 * 4 * 4 * 4);
  // Replay: compute becomes a no-op, layout still runs.
  be.set_compute_enabled(false);
  Tensor d = be.alloc({4, 4}, DType::f32, MemKind::activations);
  be.gemm(false, false, 4, 4, 4, 1.0f, a, 4, b, 4, 0.0f, d, 4);
  be.add(d, a, b);
  CHECK(all_nan(be.download(d)));
  be.copy_2d(d, 4, a, 4, 4, 4);
  CHECK(be.download(d) == be.download(a));
  REQUIRE(be.compute_log().size() == 4);  // gemm and add skipped, copy_2d ran and was logged
  CHECK(be.compute_log()[3].name == "copy_2d");
  // The harness's compute-busy time is the sum of the intervals.
  be.compute_log() = {{"x", 0, 1.0, 3.0}, {"y", 1, 5.0, 5.5}};
  CHECK(be.compute_busy_ms() == Approx(2.5));
}

TEST_CASE("cpu gemm: all transposes, pitches, alpha and beta", "[cpu][gemm]") {
  CpuBackend be(2);
  const int64_t m = 37, n = 29, k = 45;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      DYNAMIC_SECTION("trans_a " << ta << " trans_b " << tb) {
        const int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
        const int64_t lda = ac + 3, ldb = bc + 5, ldc = n + 2;
        const auto A = randn(size_t(ar * lda), 10), Bm = randn(size_t(br * ldb), 11), C0 = randn(size_t(m * ldc), 12);
        Tensor tA = upload(be, A, {ar, lda}), tB = upload(be, Bm, {br, ldb}), tC = upload(be, C0, {m, ldc});
        const float alpha = 0.7f, beta = -1.3f;
        be.gemm(ta, tb, m, n, k, alpha, tA, lda, tB, ldb, beta, tC, ldc);
        std::vector<double> want(C0.begin(), C0.end());
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double acc = 0;
            for (int64_t p = 0; p < k; ++p) {
              const double a = ta ? A[size_t(p * lda + i)] : A[size_t(i * lda + p)];
              const double b = tb ? Bm[size_t(j * ldb + p)] : Bm[size_t(p * ldb + j)];
              acc += a * b;
            }
            want[size_t(i * ldc + j)] = double(alpha) * acc + double(beta) * C0[size_t(i * ldc + j)];
          }
        const auto got = be.download(tC);
        const auto cm = compare(got, want);
        INFO(cm.str());
        CHECK(cm.ok(kTol));
        // The padding columns of C are not touched.
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = n; j < ldc; ++j) CHECK(got[size_t(i * ldc + j)] == C0[size_t(i * ldc + j)]);
      }
    }
  SECTION("beta = 0 ignores NaN in C; k = 0 scales C") {
    be.set_poison(true);
    Tensor A = upload(be, randn(12, 1), {3, 4}), B = upload(be, randn(8, 2), {4, 2});
    Tensor C = be.alloc({3, 2}, DType::f32, MemKind::activations);
    be.gemm(false, false, 3, 2, 4, 1.0f, A, 4, B, 2, 0.0f, C, 2);
    CHECK(!all_nan(be.download(C)));
    for (float x : be.download(C)) CHECK(std::isfinite(x));
    be.fill(C, 2.0f);
    be.gemm(false, false, 3, 2, 0, 1.0f, A, 4, B, 2, 0.5f, C, 2);
    for (float x : be.download(C)) CHECK(x == 1.0f);
  }
  SECTION("bad sizes are rejected") {
    Tensor A = be.alloc({3, 4}, DType::f32, MemKind::activations);
    Tensor Bs = be.alloc({2, 2}, DType::f32, MemKind::activations);
    Tensor C = be.alloc({3, 2}, DType::f32, MemKind::activations);
    CHECK_NOTHROW(be.gemm(false, false, 3, 2, 4, 1.0f, A, 4, A, 3, 0.0f, C, 2));
    CHECK_THROWS_WITH(be.gemm(false, false, 3, 2, 4, 1.0f, A, 4, Bs, 2, 0.0f, C, 2), Catch::Contains("B needs 8"));
    CHECK_THROWS_WITH(be.gemm(false, false, 4, 4, 4, 1.0f, A, 4, A, 4, 0.0f, A, 4), Catch::Contains("A needs 16"));
    CHECK_THROWS_WITH(be.gemm(false, false, 3, 4, 4, 1.0f, A, 3, A, 4, 0.0f, A, 4), Catch::Contains("pitch 3"));
  }
}

// MLA decode's per-head absorptions: B rows of each head's slice against that head's columns of a
// weight, one call (strides per entry; the layout of absorbed_attention, bench/block/block.cpp).
TEST_CASE("cpu gemm_batched = each entry's gemm, FLOPs counted per entry, bad strides refused", "[cpu][gemm]") {
  CpuBackend be(2);
  const int64_t B = 3, heads = 5, dn = 6, r = 7;  // q [B, heads, dn], W [r, heads*dn]: per head q_h W_hᵀ
  for (DType dt : {DType::f32, DType::bf16}) {
    INFO(dtype_name(dt));
    auto make = [&](const std::vector<float>& h, std::vector<int64_t> shape) {
      Tensor t = be.alloc(std::move(shape), dt, MemKind::activations);
      be.upload(h, t);
      return t;
    };
    Tensor q = make(randn(size_t(B * heads * dn), 21), {B, heads * dn}), w = make(randn(size_t(r * heads * dn), 22), {r, heads * dn});
    Tensor c1 = be.alloc({B, heads * r}, dt, MemKind::activations), c2 = be.alloc({B, heads * r}, dt, MemKind::activations);
    be.reset_flops();
    be.gemm_batched(false, true, B, r, dn, 1.0f, q, heads * dn, dn, w, heads * dn, dn, 0.0f, c1, heads * r, r, heads);
    CHECK(be.model_flops() == Approx(double(heads) * 2.0 * B * r * dn));
    for (int64_t h = 0; h < heads; ++h) {
      Tensor ch = c2.view(h * r, {c2.numel() - h * r});
      be.gemm(false, true, B, r, dn, 1.0f, q.view(h * dn, {q.numel() - h * dn}), heads * dn,
              w.view(h * dn, {w.numel() - h * dn}), heads * dn, 0.0f, ch, heads * r);
    }
    const std::vector<float> a = be.download(c1), b = be.download(c2);
    CHECK(std::all_of(a.begin(), a.end(), [](float x) { return std::isfinite(x); }));
    CHECK(a == b);
    // An entry past a tensor's end, or its last rows out of bounds, is refused by name.
    CHECK_THROWS_WITH(be.gemm_batched(false, true, B, r, dn, 1.0f, q, heads * dn, dn, w, heads * dn, dn, 0.0f, c1,
                                      heads * r, r, heads + 1),
                      Catch::Contains("needs"));
    CHECK_THROWS_WITH(be.gemm_batched(false, true, B, r, dn, 1.0f, q, heads * dn, -1, w, heads * dn, dn, 0.0f, c1,
                                      heads * r, r, heads),
                      Catch::Contains("strides"));
  }
}

TEST_CASE("cpu gemm split across threads agrees with one thread and the reference", "[cpu][gemm]") {
  // Large enough that the product is split by rows (m >= n) or by columns (n > m). OpenBLAS picks
  // its kernels and k-blocking by block shape and CPU, so 1, 2 and 3 threads need not agree bit
  // for bit (they do not on AVX2 without AVX-512). Each element is held to the classical bound of
  // a float32 dot product of length k plus the alpha/beta update: |got - exact| <=
  // (k + 2) * eps * (|alpha| sum_p |a_ip b_pj| + |beta c_ij|), eps = FLT_EPSILON (twice the unit
  // roundoff, so the bound is not tight but cannot be met by a wrong sum); two thread counts then
  // differ by at most twice that.
  constexpr double kEps = std::numeric_limits<float>::epsilon();
  const float alpha = 0.5f, beta = 2.0f;
  for (const auto& dims : {std::vector<int64_t>{256, 96, 200}, std::vector<int64_t>{96, 300, 200}}) {
    const int64_t m = dims[0], n = dims[1], k = dims[2];
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        const int64_t lda = (ta ? m : k) + 1, ldb = (tb ? k : n) + 2, ldc = n + 3;
        const auto A = randn(size_t((ta ? k : m) * lda), 50), B = randn(size_t((tb ? n : k) * ldb), 51),
                   C0 = randn(size_t(m * ldc), 52);
        std::vector<std::vector<float>> got;
        for (int threads : {1, 2, 3}) {
          CpuBackend be(threads);
          Tensor tA = upload(be, A, {int64_t(A.size())}), tB = upload(be, B, {int64_t(B.size())});
          Tensor tC = upload(be, C0, {m, ldc});
          be.gemm(ta, tb, m, n, k, alpha, tA, lda, tB, ldb, beta, tC, ldc);
          got.push_back(be.download(tC));
        }
        INFO("m " << m << " n " << n << " k " << k << " ta " << ta << " tb " << tb);
        std::vector<double> want(C0.begin(), C0.end()), bound(C0.size(), 0.0);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double acc = 0, mag = 0;
            for (int64_t p = 0; p < k; ++p) {
              const double prod = double(ta ? A[size_t(p * lda + i)] : A[size_t(i * lda + p)]) *
                                  double(tb ? B[size_t(j * ldb + p)] : B[size_t(p * ldb + j)]);
              acc += prod;
              mag += std::fabs(prod);
            }
            const size_t e = size_t(i * ldc + j);
            want[e] = alpha * acc + beta * double(C0[e]);
            bound[e] = double(k + 2) * kEps * (std::fabs(alpha) * mag + std::fabs(beta * double(C0[e])));
          }
        // Elements outside the m x n block (the pitch padding) must be untouched.
        int64_t over_bound = 0, thread_disagree = 0, padding_changed = 0;
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < ldc; ++j) {
            const size_t e = size_t(i * ldc + j);
            for (size_t t = 0; t < got.size(); ++t) {
              if (j >= n) {
                padding_changed += got[t][e] != C0[e];
                continue;
              }
              over_bound += !(std::fabs(double(got[t][e]) - want[e]) <= bound[e]);
              thread_disagree += !(std::fabs(double(got[t][e]) - double(got[0][e])) <= 2 * bound[e]);
            }
          }
        CHECK(over_bound == 0);
        CHECK(thread_disagree == 0);
        CHECK(padding_changed == 0);
        CHECK(compare(got[1], want).ok(kTol));
      }
  }
}

TEST_CASE("cpu rmsnorm forward and backward vs float64 Jacobian", "[cpu][rmsnorm]") {
  CpuBackend be(2);
  be.set_poison(true);
  const int64_t rows = 33, D = 96;
  const float eps = 1e-5f;
  const auto x = randn(size_t(rows * D), 31), w = randn(size_t(D), 32), dy = randn(size_t(rows * D), 33);
  const auto dw0 = randn(size_t(D), 34);
  Tensor tx = upload(be, x, {rows, D}), tw = upload(be, w, {D}), tdy = upload(be, dy, {rows, D});
  Tensor y = be.alloc({rows, D}, DType::f32, MemKind::activations), rstd = be.alloc({rows}, DType::f32, MemKind::activations);
  Tensor dx = be.alloc({rows, D}, DType::f32, MemKind::activations);
  Tensor dw = upload(be, dw0, {D});
  be.rmsnorm_fwd(tx, tw, eps, y, rstd);
  be.rmsnorm_bwd(tx, tw, rstd, tdy, dx, dw);

  std::vector<double> y_ref(x.size()), r_ref(static_cast<size_t>(rows)), dx_ref(x.size()), dw_ref(dw0.begin(), dw0.end());
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = &x[size_t(r * D)];
    double ss = 0;
    for (int64_t c = 0; c < D; ++c) ss += double(xr[c]) * xr[c];
    const double rs = 1.0 / std::sqrt(ss / double(D) + double(eps));
    r_ref[size_t(r)] = rs;
    for (int64_t c = 0; c < D; ++c) y_ref[size_t(r * D + c)] = xr[c] * rs * w[size_t(c)];
    // Explicit Jacobian dy_k/dx_c = w_k (rs delta_kc - x_k x_c rs^3 / D).
    for (int64_t c = 0; c < D; ++c) {
      double g = 0;
      for (int64_t kk = 0; kk < D; ++kk) {
        const double jac = w[size_t(kk)] * ((kk == c ? rs : 0.0) - double(xr[kk]) * xr[c] * rs * rs * rs / double(D));
        g += dy[size_t(r * D + kk)] * jac;
      }
      dx_ref[size_t(r * D + c)] = g;
      dw_ref[size_t(c)] += dy[size_t(r * D + c)] * xr[c] * rs;
    }
  }
  const auto cy = compare(be.download(y), y_ref), cr = compare(be.download(rstd), r_ref),
             cx = compare(be.download(dx), dx_ref), cw = compare(be.download(dw), dw_ref);
  INFO("y " << cy.str() << " rstd " << cr.str() << " dx " << cx.str() << " dw " << cw.str());
  CHECK(cy.ok(kTol));
  CHECK(cr.ok(kTol));
  CHECK(cx.ok(kTol));
  CHECK(cw.ok(kTol));
  CHECK_THROWS(be.rmsnorm_fwd(tx, be.alloc({D + 1}, DType::f32, MemKind::weights), eps, y, rstd));
}

TEST_CASE("cpu rope: formula, inverse after forward, packed pitch", "[cpu][rope]") {
  CpuBackend be(2);
  const int64_t B = 2, T = 19;
  const int heads = 3, d = 24;
  const int64_t pitch = 5 * d;  // rows of a packed qkv buffer: 3 rotated heads + 2 untouched
  const double theta = 10000.0;
  // Packed documents: the angle position restarts at each document start.
  const std::vector<int64_t> starts = {0, 5, 300, 70010};
  const DocStarts docs = std::make_shared<const std::vector<int64_t>>(starts);
  for (int with_docs = 0; with_docs < 2; ++with_docs)
  for (const Positions& pos : {Positions::contiguous(70000, T), Positions::two(0, 9, 300, 10), Positions::strided(2, 4, T)}) {
    DYNAMIC_SECTION("positions " << pos.str() << (with_docs ? " with documents" : "")) {
      const DocStarts ds = with_docs ? docs : nullptr;
      const auto x = randn(size_t(B * T * pitch), 41);
      Tensor t = upload(be, x, {B, T, pitch});
      be.rope(t, B, T, heads, d, pitch, pos, theta, false, ds);
      const auto y = be.download(t);
      std::vector<double> want(x.begin(), x.end());
      auto p = pos.list();
      if (with_docs)
        for (int64_t& q : p) {
          int64_t start = 0;
          for (int64_t st : starts)
            if (st <= q) start = st;
          q -= start;
        }
      for (int64_t b = 0; b < B; ++b)
        for (int64_t tt = 0; tt < T; ++tt)
          for (int h = 0; h < heads; ++h)
            for (int i = 0; i < d / 2; ++i) {
              const size_t o = size_t((b * T + tt) * pitch + h * d);
              const long double ang = (long double)p[size_t(tt)] * std::pow((long double)theta, -2.0L * i / d);
              const double cs = double(std::cos(ang)), sn = double(std::sin(ang));
              want[o + size_t(i)] = x[o + size_t(i)] * cs - x[o + size_t(i + d / 2)] * sn;
              want[o + size_t(i + d / 2)] = x[o + size_t(i + d / 2)] * cs + x[o + size_t(i)] * sn;
            }
      const auto c = compare(y, want);
      INFO(c.str());
      CHECK(c.ok(kTol));
      for (int64_t r = 0; r < B * T; ++r)  // columns past heads*d untouched, bit for bit
        for (int64_t col = int64_t(heads) * d; col < pitch; ++col) CHECK(y[size_t(r * pitch + col)] == x[size_t(r * pitch + col)]);
      be.rope(t, B, T, heads, d, pitch, pos, theta, true, ds);
      const auto back = compare(be.download(t), std::vector<double>(x.begin(), x.end()));
      INFO("inverse(forward(x)) vs x: " << back.str());
      CHECK(back.ok(1e-6));
    }
  }
  SECTION("position 0 is the identity; bad arguments") {
    const auto x = randn(size_t(heads * d), 3);
    Tensor t = upload(be, x, {1, 1, heads * d});
    be.rope(t, 1, 1, heads, d, heads * d, Positions::contiguous(0, 1), theta, false);
    CHECK(be.download(t) == x);
    CHECK_THROWS_WITH(be.rope(t, 1, 1, heads, 23, heads * d, Positions::contiguous(0, 1), theta, false), Catch::Contains("even d"));
    CHECK_THROWS_WITH(be.rope(t, 1, 2, heads, d, heads * d, Positions::contiguous(0, 2), theta, false), Catch::Contains("need"));
    const DocStarts bad = std::make_shared<const std::vector<int64_t>>(std::vector<int64_t>{0, 4, 2});
    CHECK_THROWS_WITH(be.rope(t, 1, 1, heads, d, heads * d, Positions::contiguous(0, 1), theta, false, bad),
                      Catch::Contains("strictly ascending"));
  }
}

TEST_CASE("OpenBLAS: concurrent single-threaded sgemm from OpenMP threads is safe", "[cpu][gemm]") {
  // The attention kernels call cblas_sgemm from every OpenMP thread at once with OpenBLAS set to
  // one thread. Verify against the same products computed one after another.
  const int n = 64, jobs = 48;
  std::vector<std::vector<float>> A(jobs), B(jobs), serial(jobs), par(jobs);
  for (int j = 0; j < jobs; ++j) {
    A[size_t(j)] = randn(size_t(n * n), 100 + j);
    B[size_t(j)] = randn(size_t(n * n), 200 + j);
    serial[size_t(j)].assign(size_t(n * n), 0.0f);
    par[size_t(j)].assign(size_t(n * n), 0.0f);
  }
  const int saved = cpu::blas_threads();
  {
    cpu::BlasSingleThreaded single;
    CHECK(cpu::blas_threads() == 1);
    for (int j = 0; j < jobs; ++j)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, A[size_t(j)].data(), n, B[size_t(j)].data(), n, 0.0f,
                  serial[size_t(j)].data(), n);
    for (int rep = 0; rep < 5; ++rep) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(4)
      for (int j = 0; j < jobs; ++j)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, A[size_t(j)].data(), n, B[size_t(j)].data(), n, 0.0f,
                    par[size_t(j)].data(), n);
      for (int j = 0; j < jobs; ++j) REQUIRE(par[size_t(j)] == serial[size_t(j)]);
    }
  }
  CHECK(cpu::blas_threads() == saved);
}
