// Every CUDA backend operation against the CPU backend (fp32, the ground truth) on random inputs,
// in bf16 and fp16 (and fp32 where the op takes it). Inputs are rounded to the run dtype on the
// host first, so both backends see the same values and the error measured is the kernels' own.
// Tolerance: rel-L2 <= 2e-2 for bf16/fp16 (DESIGN's bound), 1e-5 for fp32; NaN/Inf positions
// must match exactly (lse = -inf rows). Outputs are poisoned (NaN) before each kernel runs, so an
// element a kernel forgets to write fails the comparison.
//
// Without a CUDA device every case that needs one prints "SKIPPED: no CUDA device" and exits 77,
// which ctest reports as skipped (SKIP_RETURN_CODE in tests/unit/cuda.cmake); the host-wait
// deadline case at the end needs no device and runs everywhere.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_check.h"
#include "tests/unit/test_kernels_ref.h"

using namespace cpbench;

namespace {

bool have_cuda() {
  static const bool ok = [] {
    int n = 0;
    const bool r = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
    (void)cudaGetLastError();
    return r;
  }();
  return ok;
}

// Catch2 v2 has no skip: without a device the binary prints why and exits with kSkipExit, which
// tests/unit/cuda.cmake declares as SKIP_RETURN_CODE, so ctest reports every case "Skipped"
// (never passed). Run by hand, the first case stops the binary with that status.
constexpr int kSkipExit = 77;
#define SKIP_WITHOUT_CUDA()                                            \
  do {                                                                 \
    if (!have_cuda()) {                                                \
      std::printf("SKIPPED: no CUDA device (exit %d)\n", kSkipExit);   \
      std::fflush(stdout);                                             \
      std::exit(kSkipExit);                                            \
    }                                                                  \
  } while (0)

struct Pair {
  std::unique_ptr<Backend> cpu, gpu;
};

Pair& backends() {
  static Pair p = [] {
    Pair q;
    BackendOptions o;
    o.name = "cpu";
    o.threads = 2;
    q.cpu = make_backend(o);
    o.name = "cuda";
    q.gpu = make_backend(o);
    q.cpu->set_poison(true);
    q.gpu->set_poison(true);
    return q;
  }();
  return p;
}

// The value a bf16/fp16 tensor holds for x (CUDA's host conversions, round to nearest even).
float round_to(DType t, float x) {
  if (t == DType::bf16) return __bfloat162float(__float2bfloat16_rn(x));
  if (t == DType::f16) return __half2float(__float2half_rn(x));
  return x;
}

std::vector<float> rnd(size_t n, uint64_t seed, DType t, float scale = 1.0f) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = round_to(t, d(g));
  return v;
}

Tensor up(Backend& be, const std::vector<float>& h, std::vector<int64_t> shape, DType t) {
  Tensor x = be.alloc(std::move(shape), t, MemKind::activations);
  be.upload(h, x);
  return x;
}

using test::Cmp;
using test::compare;  // the shared comparator (test_kernels_ref.h)

double tol(DType t) { return t == DType::f32 ? 1e-5 : 2e-2; }

#define CHECK_CLOSE(name, got, want, t)                         \
  do {                                                          \
    const Cmp c_ = compare(got, want);                          \
    INFO(name << ": " << c_.str() << " (tolerance " << (t) << ")"); \
    CHECK(c_.nonfinite_mismatch == 0);                          \
    CHECK(c_.rel_l2 <= (t));                                    \
  } while (0)

const DType kHalfTypes[] = {DType::bf16, DType::f16};
const DType kAllTypes[] = {DType::f32, DType::bf16, DType::f16};

}  // namespace

TEST_CASE("cuda: upload/download round trip, poison, memory tracking", "[cuda]") {
  SKIP_WITHOUT_CUDA();
  Backend& g = *backends().gpu;
  REQUIRE(g.name() == "cuda");
  REQUIRE(g.device_memory());
  for (DType t : kAllTypes) {
    INFO("dtype " << dtype_name(t));
    const std::vector<float> h = rnd(1000, 1, t);
    const int64_t live0 = g.mem().stats().live[int(MemKind::comm)];
    {
      Tensor x = up(g, h, {10, 100}, t);
      CHECK(g.mem().stats().live[int(MemKind::activations)] >= int64_t(x.bytes()));
      CHECK(g.download(x) == h);  // exactly representable values round-trip exactly
      Tensor p = g.alloc({7, 3}, t, MemKind::comm);
      CHECK(g.mem().stats().live[int(MemKind::comm)] == live0 + int64_t(p.bytes()));
      for (float v : g.download(p)) CHECK(std::isnan(v));  // poisoned
      // Raw byte copies (MPI host staging).
      std::vector<unsigned char> raw(x.bytes());
      g.copy_to_host_raw(raw.data(), x, raw.size());
      Tensor y = g.alloc({10, 100}, t, MemKind::activations);
      g.copy_from_host_raw(y, raw.data(), raw.size());
      CHECK(g.download(y) == h);
    }
    CHECK(g.mem().stats().live[int(MemKind::comm)] == live0);
  }
}

TEST_CASE("cuda: fill, convert, add, copy_2d", "[cuda]") {
  SKIP_WITHOUT_CUDA();
  Backend& c = *backends().cpu;
  Backend& g = *backends().gpu;
  for (DType t : kAllTypes) {
    INFO("dtype " << dtype_name(t));
    const std::vector<float> a = rnd(37 * 29, 2, t), b = rnd(37 * 29, 3, t);
    Tensor ga = up(g, a, {37, 29}, t), gb = up(g, b, {37, 29}, t);
    Tensor ca = up(c, a, {37, 29}, DType::f32), cb = up(c, b, {37, 29}, DType::f32);
    // add, out aliasing a
    g.add(ga, ga, gb);
    c.add(ca, ca, cb);
    CHECK_CLOSE("add", g.download(ga), c.download(ca), tol(t));
    // fill
    Tensor gf = g.alloc({5, 7}, t, MemKind::activations);
    g.fill(gf, -1.5f);
    for (float v : g.download(gf)) CHECK(v == -1.5f);
    g.fill(gf, 0.0f);
    for (float v : g.download(gf)) CHECK(v == 0.0f);
    // convert to fp32 and back
    Tensor g32 = g.alloc({37, 29}, DType::f32, MemKind::activations);
    g.convert(g32, gb);
    CHECK(g.download(g32) == b);
    Tensor gback = g.alloc({37, 29}, t, MemKind::activations);
    g.convert(gback, g32);
    CHECK(g.download(gback) == b);
    // copy_2d: a 20 x 11 block from pitch 29 into pitch 13 at offset 2
    Tensor gd = g.alloc({25, 13}, t, MemKind::activations);
    Tensor cd = c.alloc({25, 13}, DType::f32, MemKind::activations);
    g.fill(gd, 7.0f);
    c.fill(cd, 7.0f);
    Tensor gdv = gd.view(2, {25 * 13 - 2}), cdv = cd.view(2, {25 * 13 - 2});
    g.copy_2d(gdv, 13, gb, 29, 20, 11);
    c.copy_2d(cdv, 13, cb, 29, 20, 11);
    CHECK(g.download(gd) == c.download(cd));
  }
}

TEST_CASE("cuda: gemm against the cpu backend", "[cuda]") {
  SKIP_WITHOUT_CUDA();
  Backend& c = *backends().cpu;
  Backend& g = *backends().gpu;
  const int64_t m = 67, n = 45, k = 129;
  for (DType t : kAllTypes) {
    for (int ta = 0; ta < 2; ++ta) {
      for (int tb = 0; tb < 2; ++tb) {
        for (int cf32 = 0; cf32 < 2; ++cf32) {
          INFO("dtype " << dtype_name(t) << " trans_a " << ta << " trans_b " << tb << " C fp32 " << cf32);
          const DType tc = cf32 ? DType::f32 : t;
          const int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
          const int64_t lda = ac + 3, ldb = bc + 5, ldc = n + 2;
          const std::vector<float> A = rnd(size_t(ar * lda), 10, t), B = rnd(size_t(br * ldb), 11, t);
          const std::vector<float> C0 = rnd(size_t(m * ldc), 12, tc);
          Tensor gA = up(g, A, {ar, lda}, t), gB = up(g, B, {br, ldb}, t), gC = up(g, C0, {m, ldc}, tc);
          Tensor cA = up(c, A, {ar, lda}, DType::f32), cB = up(c, B, {br, ldb}, DType::f32),
                 cC = up(c, C0, {m, ldc}, DType::f32);
          const float beta = cf32 ? 1.0f : 0.0f;  // fp32 C: accumulate (weight gradients)
          g.gemm(ta, tb, m, n, k, 0.5f, gA, lda, gB, ldb, beta, gC, ldc);
          c.gemm(ta, tb, m, n, k, 0.5f, cA, lda, cB, ldb, beta, cC, ldc);
          CHECK_CLOSE("C", g.download(gC), c.download(cC), tol(tc == DType::f32 && t == DType::f32 ? DType::f32 : DType::bf16));
        }
      }
    }
  }
}

// cuBLAS's strided-batched GEMM in MLA decode's layout: per head, B rows of a head's slice against
// that head's columns of a weight (transposed for W_UK's absorption, plain for W_UV's).
TEST_CASE("cuda: gemm_batched against the cpu backend", "[cuda]") {
  SKIP_WITHOUT_CUDA();
  Backend& c = *backends().cpu;
  Backend& g = *backends().gpu;
  const int64_t B = 3, heads = 5, dn = 24, r = 40;
  for (DType t : kAllTypes)
    for (int tb = 0; tb < 2; ++tb) {
      INFO("dtype " << dtype_name(t) << " trans_b " << tb);
      const std::vector<float> q = rnd(size_t(B * heads * dn), 30, t), w = rnd(size_t(r * heads * dn), 31, t);
      const std::vector<int64_t> ws = tb ? std::vector<int64_t>{r, heads * dn} : std::vector<int64_t>{dn, heads * r};
      const int64_t ldb = tb ? heads * dn : heads * r, sb = tb ? dn : r;
      Tensor gq = up(g, q, {B, heads * dn}, t), gw = up(g, w, ws, t), cq = up(c, q, {B, heads * dn}, DType::f32),
             cw = up(c, w, ws, DType::f32);
      Tensor gC = g.alloc({B, heads * r}, t, MemKind::activations), cC = c.alloc({B, heads * r}, DType::f32, MemKind::activations);
      g.gemm_batched(false, tb, B, r, dn, 1.0f, gq, heads * dn, dn, gw, ldb, sb, 0.0f, gC, heads * r, r, heads);
      c.gemm_batched(false, tb, B, r, dn, 1.0f, cq, heads * dn, dn, cw, ldb, sb, 0.0f, cC, heads * r, r, heads);
      CHECK_CLOSE("C", g.download(gC), c.download(cC), tol(t == DType::f32 ? DType::f32 : DType::bf16));
    }
}

TEST_CASE("cuda: rmsnorm forward and backward against the cpu backend", "[cuda]") {
  SKIP_WITHOUT_CUDA();
  Backend& c = *backends().cpu;
  Backend& g = *backends().gpu;
  const int64_t rows = 37, D = 300;
  for (DType t : kAllTypes) {
    INFO("dtype " << dtype_name(t));
    const std::vector<float> x = rnd(size_t(rows * D), 20, t), w = rnd(size_t(D), 21, t, 0.5f),
                             dy = rnd(size_t(rows * D), 22, t), dw0 = rnd(size_t(D), 23, DType::f32);
    Tensor gx = up(g, x, {rows, D}, t), gw = up(g, w, {D}, t), gdy = up(g, dy, {rows, D}, t);
    Tensor cx = up(c, x, {rows, D}, DType::f32), cw = up(c, w, {D}, DType::f32),
           cdy = up(c, dy, {rows, D}, DType::f32);
    Tensor gy = g.alloc({rows, D}, t, MemKind::activations), cy = c.alloc({rows, D}, DType::f32, MemKind::activations);
    Tensor gr = g.alloc({rows}, DType::f32, MemKind::activations), cr = c.alloc({rows}, DType::f32, MemKind::activations);
    g.rmsnorm_fwd(gx, gw, 1e-5f, gy, gr);
    c.rmsnorm_fwd(cx, cw, 1e-5f, cy, cr);
    CHECK_CLOSE("y", g.download(gy), c.download(cy), tol(t));
    CHECK_CLOSE("rstd", g.download(gr), c.download(cr), tol(t));
    Tensor gdx = g.alloc({rows, D}, t, MemKind::activations), cdx = c.alloc({rows, D}, DType::f32, MemKind::activations);
    Tensor gdw = up(g, dw0, {D}, DType::f32), cdw = up(c, dw0, {D}, DType::f32);
    g.rmsnorm_bwd(gx, gw, gr, gdy, gdx, gdw);
    c.rmsnorm_bwd(cx, cw, cr, cdy, cdx, cdw);
    CHECK_CLOSE("dx", g.download(gdx), c.download(cdx), tol(t));
    CHECK_CLOSE("dw (accumulated)", g.download(gdw), c.download(cdw), t == DType::f32 ? 1e-4 : 2e-2);
  }
}

TEST_CASE("cuda: rope forward and inverse against the cpu backend", "[cuda]") {
  SKIP_WITHOUT_CUDA();
  Backend& c = *backends().cpu;
  Backend& g = *backends().gpu;
  // q heads inside a packed qkv buffer: B=2, T=33 tokens, 3 q heads of d=64, pitch (3+2*1)*64.
  const int64_t B = 2, T = 33, pitch = 5 * 64;
  const int heads = 3, d = 64;
  const Positions pos = Positions::two(5, 17, 100000, 16);  // zigzag-like, large angles
  // Documents: position ids restart at 12 and 100010 (the cpu backend's rope is checked
  // against the formula in test_cpu_kernels.cpp).
  const DocStarts docs = std::make_shared<const std::vector<int64_t>>(std::vector<int64_t>{0, 12, 100010});
  for (DType t : kAllTypes) {
    for (int inverse = 0; inverse < 2; ++inverse)
      for (const DocStarts& ds : {DocStarts{}, docs}) {
        INFO("dtype " << dtype_name(t) << " inverse " << inverse << " docs " << (ds ? "yes" : "no"));
        const std::vector<float> x = rnd(size_t(B * T * pitch), 30, t);
        Tensor gx = up(g, x, {B * T, pitch}, t), cx = up(c, x, {B * T, pitch}, DType::f32);
        g.rope(gx, B, T, heads, d, pitch, pos, 10000.0, inverse, ds);
        c.rope(cx, B, T, heads, d, pitch, pos, 10000.0, inverse, ds);
        CHECK_CLOSE("x", g.download(gx), c.download(cx), tol(t));
      }
  }
}

namespace {

struct AttnCase {
  const char* name;
  int64_t B;
  int hq, hk, d;
  bool causal;
  Positions qpos, kpos;
  int64_t window = 0;
  std::vector<int64_t> docs = {};  // document starts (empty: one document)
  int d_v = 0;                     // the values' head dim (MLA; 0: d)
};

std::vector<AttnCase> attn_cases() {
  return {
      {"contiguous self causal, GQA 4/2, d64, B2", 2, 4, 2, 64, true, Positions::contiguous(0, 150), Positions::contiguous(0, 150)},
      {"contiguous self non-causal, d128", 1, 2, 2, 128, false, Positions::contiguous(0, 150), Positions::contiguous(0, 150)},
      {"zigzag queries vs middle keys (skipped tiles, -inf rows), d128", 1, 2, 2, 128, true,
       Positions::two(0, 64, 448, 64), Positions::contiguous(128, 256)},
      {"queries vs zigzag keys, d64", 1, 4, 4, 64, true, Positions::contiguous(200, 130), Positions::two(0, 70, 300, 70)},
      {"striped, MQA 4/1, d128", 1, 4, 1, 128, true, Positions::strided(1, 4, 97), Positions::strided(0, 4, 97)},
      {"keys after the first queries (-inf rows), d64", 1, 2, 1, 64, true, Positions::contiguous(0, 100), Positions::contiguous(50, 120)},
      {"larger causal, several tiles both ways, d128", 1, 2, 2, 128, true, Positions::contiguous(217, 300), Positions::contiguous(0, 517)},
      {"one key, one query row block, d64", 1, 2, 2, 64, false, Positions::contiguous(0, 33), Positions::contiguous(0, 1)},
      {"single query, causal, d128", 1, 2, 2, 128, true, Positions::contiguous(70, 1), Positions::contiguous(0, 129)},
      // Masks: windows, documents, both; several segments; rows that see nothing.
      {"window causal, GQA 4/2, d64", 1, 4, 2, 64, true, Positions::contiguous(0, 300), Positions::contiguous(0, 300), 70},
      {"window non-causal, d128", 1, 2, 2, 128, false, Positions::contiguous(0, 300), Positions::contiguous(0, 300), 45},
      {"documents causal, d64", 2, 2, 2, 64, true, Positions::contiguous(0, 260), Positions::contiguous(0, 260), 0, {0, 70, 71, 200}},
      {"documents + window non-causal, zigzag, d128", 1, 2, 1, 128, false, Positions::two(0, 75, 225, 75),
       Positions::two(75, 75, 150, 75), 64, {0, 60, 160, 240}},
      {"3 segments, documents + window causal, d64", 1, 2, 2, 64, true,
       Positions::segments({{0, 1, 40}, {100, 1, 30}, {250, 2, 20}}), Positions::segments({{10, 1, 50}, {200, 3, 30}, {95, 1, 10}}), 45, {0, 120, 260}},
      {"window: no row sees a key, d64", 1, 2, 2, 64, false, Positions::contiguous(0, 64), Positions::contiguous(200, 80), 50},
  };
}

// Head dims only the fp32 kernels take.
std::vector<AttnCase> attn_cases_f32_only() {
  return {
      {"fp32 d96, GQA, zigzag", 1, 4, 2, 96, true, Positions::two(0, 40, 200, 40), Positions::contiguous(0, 240)},
      {"fp32 d256, non-causal", 1, 1, 1, 256, false, Positions::contiguous(0, 20), Positions::contiguous(0, 33)},
      // Two head dims (MLA's expanded heads: d 192, d_v 128; and d_v > d with GQA, a window, documents).
      {"fp32 MLA d192 d_v128, causal", 1, 4, 4, 192, true, Positions::contiguous(0, 130), Positions::contiguous(0, 130),
       0, {}, 128},
      {"fp32 d48 d_v80, GQA, window + documents", 2, 4, 2, 48, true, Positions::contiguous(0, 150),
       Positions::contiguous(0, 150), 30, {0, 70}, 80},
  };
}

}  // namespace

TEST_CASE("cuda: attention forward, merge, delta, backward and sinks against the cpu backend", "[cuda]") {
  SKIP_WITHOUT_CUDA();
  Backend& c = *backends().cpu;
  Backend& g = *backends().gpu;
  // fp32 runs the SIMT kernels (two head dims up to 1024), bf16/fp16 the tensor-core kernels (d_v = d).
  std::vector<std::pair<AttnCase, DType>> runs;
  for (const AttnCase& ac : attn_cases())
    for (DType t : kAllTypes) runs.emplace_back(ac, t);
  for (const AttnCase& ac : attn_cases_f32_only()) runs.emplace_back(ac, DType::f32);
  for (const auto& [ac, t] : runs) {
    INFO("case: " << ac.name << ", dtype " << dtype_name(t));
    AttnShape s;
    s.B = ac.B;
    s.nq = ac.qpos.count();
    s.nk = ac.kpos.count();
    s.hq = ac.hq;
    s.hk = ac.hk;
    s.d = ac.d;
    s.d_v = ac.d_v;
    s.causal = ac.causal;
    s.window = ac.window;
    if (!ac.docs.empty()) s.docs = std::make_shared<const std::vector<int64_t>>(ac.docs);
    // q, k, dq, dk d wide; v, o, do, dv d_v wide (vdim())
    const std::vector<int64_t> qs = {s.B, s.nq, s.hq, s.d}, ks = {s.B, s.nk, s.hk, s.d}, ls = {s.B, s.hq, s.nq};
    const std::vector<int64_t> os = {s.B, s.nq, s.hq, s.vdim()}, vs = {s.B, s.nk, s.hk, s.vdim()};
    const size_t nqe = size_t(s.B * s.nq * s.hq * s.d), nke = size_t(s.B * s.nk * s.hk * s.d);
    const size_t noe = size_t(s.B * s.nq * s.hq * s.vdim()), nve = size_t(s.B * s.nk * s.hk * s.vdim());
    const std::vector<float> q = rnd(nqe, 40, t), k = rnd(nke, 41, t), v = rnd(nve, 42, t),
                             dout = rnd(noe, 43, t);
    Tensor gq = up(g, q, qs, t), gk = up(g, k, ks, t), gv = up(g, v, vs, t), gdo = up(g, dout, os, t);
    Tensor cq = up(c, q, qs, DType::f32), ck = up(c, k, ks, DType::f32), cv = up(c, v, vs, DType::f32),
           cdo = up(c, dout, os, DType::f32);
    Tensor go = g.alloc(os, t, MemKind::activations), gl = g.alloc(ls, DType::f32, MemKind::activations);
    Tensor co = c.alloc(os, DType::f32, MemKind::activations), cl = c.alloc(ls, DType::f32, MemKind::activations);
    g.attn_fwd(s, gq, gk, gv, ac.qpos, ac.kpos, go, gl);
    c.attn_fwd(s, cq, ck, cv, ac.qpos, ac.kpos, co, cl);
    const std::vector<float> o_c = c.download(co), l_c = c.download(cl);
    CHECK_CLOSE("o", g.download(go), o_c, tol(t));
    CHECK_CLOSE("lse", g.download(gl), l_c, tol(t));

    // delta = rowsum(dO o O), each backend from its own O (as in a real backward).
    Tensor gdl = g.alloc(ls, DType::f32, MemKind::activations), cdl = c.alloc(ls, DType::f32, MemKind::activations);
    g.attn_bwd_delta(s, go, gdo, gdl);
    c.attn_bwd_delta(s, co, cdo, cdl);
    CHECK_CLOSE("delta", g.download(gdl), c.download(cdl), tol(t));

    // Backward accumulates into non-zero gradients.
    const std::vector<float> dq0 = rnd(nqe, 44, DType::f32, 0.1f), dk0 = rnd(nke, 45, DType::f32, 0.1f),
                             dv0 = rnd(nve, 46, DType::f32, 0.1f);
    Tensor gdq = up(g, dq0, qs, DType::f32), gdk = up(g, dk0, ks, DType::f32), gdv = up(g, dv0, vs, DType::f32);
    Tensor cdq = up(c, dq0, qs, DType::f32), cdk = up(c, dk0, ks, DType::f32), cdv = up(c, dv0, vs, DType::f32);
    g.attn_bwd(s, gq, gk, gv, gdo, gl, gdl, ac.qpos, ac.kpos, gdq, gdk, gdv);
    c.attn_bwd(s, cq, ck, cv, cdo, cl, cdl, ac.qpos, ac.kpos, cdq, cdk, cdv);
    // fp32 gradients: dS = P (dP - delta) cancels, so allow 1e-4 (summation orders differ).
    const double gt = t == DType::f32 ? 1e-4 : tol(t);
    CHECK_CLOSE("dq", g.download(gdq), c.download(cdq), gt);
    CHECK_CLOSE("dk", g.download(gdk), c.download(cdk), gt);
    CHECK_CLOSE("dv", g.download(gdv), c.download(cdv), gt);

    // Merge this block's result into a running one with lse = -inf in some rows.
    std::vector<float> oacc = rnd(noe, 47, t), lacc = rnd(size_t(s.B * s.hq * s.nq), 48, DType::f32);
    for (size_t i = 0; i < lacc.size(); i += 5) lacc[i] = -INFINITY;
    Tensor goa = up(g, oacc, os, t), gla = up(g, lacc, ls, DType::f32);
    Tensor coa = up(c, oacc, os, DType::f32), cla = up(c, lacc, ls, DType::f32);
    Tensor go_c = up(g, o_c, os, t);  // the same block result on both sides
    Tensor gl_c = up(g, l_c, ls, DType::f32);
    g.attn_merge(s, goa, gla, go_c, gl_c);
    c.attn_merge(s, coa, cla, co, cl);
    CHECK_CLOSE("merged o", g.download(goa), c.download(coa), tol(t));
    CHECK_CLOSE("merged lse", g.download(gla), c.download(cla), tol(t));

    // The sinks on the merged rows (some of which still see no key: lse = -inf), then their
    // gradient from those rows into a nonzero dsinks.
    std::vector<float> sk = rnd(size_t(s.hq), 49, DType::f32, 2.0f), ds0 = rnd(size_t(s.hq), 50, DType::f32);
    Tensor gsk = up(g, sk, {s.hq}, DType::f32), csk = up(c, sk, {s.hq}, DType::f32);
    Tensor gds = up(g, ds0, {s.hq}, DType::f32), cds = up(c, ds0, {s.hq}, DType::f32);
    g.attn_sink_fwd(s, gsk, goa, gla);
    c.attn_sink_fwd(s, csk, coa, cla);
    CHECK_CLOSE("sink o", g.download(goa), c.download(coa), tol(t));
    CHECK_CLOSE("sink lse", g.download(gla), c.download(cla), tol(t));
    g.attn_sink_bwd(s, gsk, goa, gdo, gla, gds);
    c.attn_sink_bwd(s, csk, coa, cdo, cla, cds);
    CHECK_CLOSE("dsinks", g.download(gds), c.download(cds), t == DType::f32 ? 1e-4 : tol(t));
  }
}

// Decode steps (nq = 1: attn_fwd takes the split-along-keys decode kernels): a rank's cache shard
// (contiguous block, then strided slots, some after the query), windows, rows that see no key;
// nk up to 70000 so that the split count comes from the device (B * hq rows against its resident
// blocks) and the chunks do not divide nk. Then the kept scratch: a later step with more keys
// allocates nothing.
TEST_CASE("cuda: decode attention (nq = 1) against the cpu backend", "[cuda]") {
  SKIP_WITHOUT_CUDA();
  Backend& c = *backends().cpu;
  Backend& g = *backends().gpu;
  struct Dec {
    int64_t B;
    int hq, hk, d;
    int64_t nk;
    int mode;  // 0 keys after the query, 1 window, 2 no visible key (causal), 3 no visible key (window)
  };
  std::vector<std::pair<Dec, DType>> runs;
  for (DType t : kAllTypes)
    for (int d : {64, 128})
      for (int hk : {2, 8})
        for (int64_t nk : {1, 300, 5000, 70000}) runs.push_back({{2, 8, hk, d, nk, 0}, t});
  for (DType t : kAllTypes) {
    runs.push_back({{2, 8, 2, 128, 20000, 1}, t});
    runs.push_back({{1, 32, 8, 64, 3000, 2}, t});
    runs.push_back({{2, 4, 4, 64, 3000, 3}, t});
  }
  runs.push_back({{2, 8, 2, 16, 4000, 0}, DType::f32});  // head dims only fp32 takes
  runs.push_back({{1, 4, 1, 96, 4000, 1}, DType::f32});
  for (const auto& [dc, t] : runs) {
    const int64_t n2 = dc.nk / 4, n1 = dc.nk - n2, C = 4 * n1;
    const Positions kpos = Positions::segments({{n1, 1, n1}, {C + 1, 4, n2}});
    int64_t qp = n2 > 0 ? C + 1 + 4 * (n2 - n2 / 4 - 1) : C + 1, window = 0;
    if (dc.mode == 1) window = qp - (n1 + n1 / 2) + 1;
    if (dc.mode == 2) qp = n1 - 1;
    if (dc.mode == 3) qp = C + 1 + 4 * n2 + 10, window = 5;
    INFO("decode B " << dc.B << " hq " << dc.hq << " hk " << dc.hk << " d " << dc.d << " nk " << dc.nk << " mode "
                     << dc.mode << ", dtype " << dtype_name(t));
    const Positions qpos = Positions::contiguous(qp, 1);
    AttnShape s;
    s.B = dc.B;
    s.nq = 1;
    s.nk = dc.nk;
    s.hq = dc.hq;
    s.hk = dc.hk;
    s.d = dc.d;
    s.causal = true;
    s.window = window;
    const std::vector<int64_t> qs = {s.B, 1, s.hq, s.d}, ks = {s.B, s.nk, s.hk, s.d}, ls = {s.B, s.hq, 1};
    const size_t nqe = size_t(s.B * s.hq * s.d), nke = size_t(s.B * s.nk * s.hk * s.d);
    const std::vector<float> q = rnd(nqe, 60, t), k = rnd(nke, 61, t), v = rnd(nke, 62, t);
    Tensor gq = up(g, q, qs, t), gk = up(g, k, ks, t), gv = up(g, v, ks, t);
    Tensor cq = up(c, q, qs, DType::f32), ck = up(c, k, ks, DType::f32), cv = up(c, v, ks, DType::f32);
    Tensor go = g.alloc(qs, t, MemKind::activations), gl = g.alloc(ls, DType::f32, MemKind::activations);
    Tensor co = c.alloc(qs, DType::f32, MemKind::activations), cl = c.alloc(ls, DType::f32, MemKind::activations);
    g.attn_fwd(s, gq, gk, gv, qpos, kpos, go, gl);
    c.attn_fwd(s, cq, ck, cv, qpos, kpos, co, cl);
    const std::vector<float> o_g = g.download(go), l_g = g.download(gl), o_c = c.download(co), l_c = c.download(cl);
    CHECK_CLOSE("decode o", o_g, o_c, tol(t));
    CHECK_CLOSE("decode lse", l_g, l_c, tol(t));
    if (dc.mode >= 2) {  // no visible key: o = 0 exactly, lse = -inf
      for (float x : o_g) CHECK(x == 0.0f);
      for (float x : l_g) CHECK(x == -INFINITY);
    }
  }

  // The decode scratch is sized by B * hq and d only: once a shape has run, steps with other nk
  // (a growing cache) allocate nothing.
  const DType t = DType::bf16;
  AttnShape s;
  s.B = 2;
  s.nq = 1;
  s.hq = 8;
  s.hk = 2;
  s.d = 128;
  Tensor q = g.alloc({2, 1, 8, 128}, t, MemKind::activations), o = g.alloc({2, 1, 8, 128}, t, MemKind::activations);
  Tensor l = g.alloc({2, 8, 1}, DType::f32, MemKind::activations);
  Tensor kv = g.alloc({2, 200000, 2, 128}, t, MemKind::activations);
  g.fill(q, 0.5f);
  g.fill(kv, 0.25f);
  int64_t allocs = -1;
  for (int64_t nk : {100, 1000, 50000, 200000}) {
    INFO("nk " << nk);
    s.nk = nk;
    Tensor kvs = kv.view(0, {2, nk, 2, 128});  // the first nk keys of batch row 0 (values all equal)
    g.attn_fwd(s, q, kvs, kvs, Positions::contiguous(nk, 1), Positions::contiguous(0, nk), o, l);
    if (allocs >= 0) CHECK(g.mem().alloc_calls() == allocs);
    allocs = g.mem().alloc_calls();
    for (float x : g.download(o)) CHECK(x == 0.25f);  // every weight on the same value
  }
}

TEST_CASE("cuda: unsupported attention shapes are errors", "[cuda]") {
  SKIP_WITHOUT_CUDA();
  Backend& g = *backends().gpu;
  AttnShape s;
  s.nq = s.nk = 16;
  s.hq = s.hk = 1;
  s.d = 96;  // the tensor-core kernels are built for 64 and 128 only
  const Positions p = Positions::contiguous(0, 16);
  for (DType t : kHalfTypes) {
    Tensor q = g.alloc({1, 16, 1, 96}, t, MemKind::activations);
    Tensor l = g.alloc({1, 1, 16}, DType::f32, MemKind::activations);
    CHECK_THROWS_AS(g.attn_fwd(s, q, q, q, p, p, q, l), std::invalid_argument);
  }
  // Two head dims (MLA) are the fp32 and decode kernels' only: the tensor-core kernels refuse them.
  s.d = 64;
  s.d_v = 32;
  for (DType t : kHalfTypes) {
    Tensor q = g.alloc({1, 16, 1, 64}, t, MemKind::activations), v = g.alloc({1, 16, 1, 32}, t, MemKind::activations);
    Tensor l = g.alloc({1, 1, 16}, DType::f32, MemKind::activations);
    CHECK_THROWS_WITH(g.attn_fwd(s, q, q, v, p, p, v, l), Catch::Contains("d_v = 32") && Catch::Contains("tensor-core"));
  }
}

TEST_CASE("cuda: replay mode, compute log and events", "[cuda]") {
  SKIP_WITHOUT_CUDA();
  Backend& g = *backends().gpu;
  const DType t = DType::bf16;
  Tensor A = up(g, rnd(64 * 64, 50, t), {64, 64}, t);
  Tensor C = up(g, std::vector<float>(64 * 64, 3.0f), {64, 64}, t);
  g.synchronize();
  g.compute_log().clear();
  g.set_compute_enabled(false);
  g.gemm(false, false, 64, 64, 64, 1.0f, A, 64, A, 64, 0.0f, C, 64);  // skipped
  Tensor D = g.alloc({64, 64}, t, MemKind::activations);
  g.copy_2d(D, 64, C, 64, 64, 64);  // layout still runs
  g.set_compute_enabled(true);
  g.synchronize();
  for (float v : g.download(D)) CHECK(v == 3.0f);
  CHECK(g.compute_log().empty());

  g.set_phase(1);
  Event e0 = g.record_event();
  g.gemm(false, false, 64, 64, 64, 1.0f, A, 64, A, 64, 0.0f, C, 64);
  g.add(C, C, A);
  Event e1 = g.record_event();
  g.synchronize();
  g.set_phase(2);
  CHECK(g.elapsed_ms(e0, e1) >= 0.0);
  REQUIRE(g.compute_log().size() == 2);
  CHECK(g.compute_log()[0].name == "gemm");
  CHECK(g.compute_log()[1].name == "add");
  for (const ComputeRecord& r : g.compute_log()) {
    CHECK(r.phase == 1);
    CHECK(r.t1_ms >= r.t0_ms);
    CHECK(r.t0_ms <= now_ms());
  }
  CHECK(g.compute_log()[1].t0_ms >= g.compute_log()[0].t0_ms);
  CHECK(g.compute_busy_ms() > 0.0);
  g.compute_log().clear();
}

// Needs no device (no SKIP_WITHOUT_CUDA): the deadline of the backend's host waits.
TEST_CASE("cuda: host waits end at their deadline, naming the call", "[cuda]") {
  int calls = 0;
  // Ready on the third poll: returns.
  cuda::wait_bounded([&] { return ++calls < 3 ? cudaErrorNotReady : cudaSuccess; }, 5.0, "download");
  CHECK(calls == 3);
  // Never ready: gives up past the bound, naming the call and the bound.
  calls = 0;
  try {
    cuda::wait_bounded([&] { ++calls; return cudaErrorNotReady; }, 0.05, "elapsed_ms");
    FAIL("wait_bounded returned on a query that never completes");
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    INFO(m);
    CHECK(m.find("cuda elapsed_ms: the device did not finish within 0.05 s (CPBENCH_NCCL_TIMEOUT_S") == 0);
    CHECK(calls > 1);
  }
  // Another error is an error at once.
  try {
    cuda::wait_bounded([] { return cudaErrorInvalidValue; }, 5.0, "compute_busy_ms");
    FAIL("wait_bounded returned on an error");
  } catch (const std::runtime_error& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find("cudaErrorInvalidValue") != std::string::npos);
  }
  // The bound: CPBENCH_NCCL_TIMEOUT_S (what --timeout sets), default 600, bad values refused.
  const char* saved = std::getenv("CPBENCH_NCCL_TIMEOUT_S");
  const std::string keep = saved ? saved : "";
  unsetenv("CPBENCH_NCCL_TIMEOUT_S");
  CHECK(cuda::host_wait_timeout_s() == 600.0);
  setenv("CPBENCH_NCCL_TIMEOUT_S", "7.5", 1);
  CHECK(cuda::host_wait_timeout_s() == 7.5);
  setenv("CPBENCH_NCCL_TIMEOUT_S", "-1", 1);
  CHECK_THROWS_WITH(cuda::host_wait_timeout_s(),
                    "CPBENCH_NCCL_TIMEOUT_S must be a number of seconds >= 0, got '-1'");
  if (saved) setenv("CPBENCH_NCCL_TIMEOUT_S", keep.c_str(), 1);
  else unsetenv("CPBENCH_NCCL_TIMEOUT_S");
}
