// CPU attention kernels against the float64 direct-softmax reference: forward (o, lse), delta,
// backward (dq, dk, dv), merge of key blocks, the vector inner loops of every ISA level.
// Outputs are poisoned with NaN before each kernel runs; accumulators start from non-zero data.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/vec_ops.h"
#include "tests/unit/test_kernels_ref.h"

using namespace cpbench;
using cpbench::test::compare;
using cpbench::test::randn;
using cpbench::test::to_double;

namespace {

constexpr double kTol = 1e-5;  // fp32 vs float64, relative L2 (DESIGN's verify bound)
constexpr float kInf = std::numeric_limits<float>::infinity();

struct Case {
  std::string name;
  AttnShape s;
  Positions qpos, kpos;
  float input_scale = 1.0f;  // std of q and k: larger spreads the scores (online-softmax rescales)
};

DocStarts docs(std::vector<int64_t> starts) {
  return std::make_shared<const std::vector<int64_t>>(std::move(starts));
}

using test::attn_case_shape;

// Sliding windows, packed documents and both, causal and not, on segment lists of 1 to 4
// segments (sorted and not), with rows that see no key and shapes that are not multiples of the
// tiles (the CUDA emulator test has its own list at its tile sizes).
std::vector<Case> mask_cases() {
  std::vector<Case> v;
  using P = Positions;
  const auto segs = [](std::vector<PosSeg> g) { return P::segments(g); };
  v.push_back({"window causal", attn_case_shape(1, 300, 300, 2, 1, 32, true, 37, nullptr), P::contiguous(0, 300), P::contiguous(0, 300)});
  v.push_back({"window non-causal", attn_case_shape(1, 300, 300, 2, 2, 32, false, 50, nullptr), P::contiguous(0, 300), P::contiguous(0, 300)});
  v.push_back({"window 1 causal: own position only", attn_case_shape(1, 100, 100, 2, 2, 16, true, 1, nullptr), P::contiguous(0, 100), P::contiguous(50, 100)});
  v.push_back({"docs causal (one of length 1)", attn_case_shape(1, 300, 300, 2, 2, 32, true, 0, docs({0, 70, 71, 200})), P::contiguous(0, 300), P::contiguous(0, 300)});
  v.push_back({"docs non-causal", attn_case_shape(2, 300, 300, 4, 2, 32, false, 0, docs({0, 70, 71, 200})), P::contiguous(0, 300), P::contiguous(0, 300)});
  v.push_back({"docs + window causal", attn_case_shape(1, 260, 260, 2, 2, 40, true, 30, docs({0, 100, 180})), P::contiguous(0, 260), P::contiguous(0, 260)});
  v.push_back({"docs + window non-causal", attn_case_shape(1, 260, 260, 2, 2, 40, false, 20, docs({0, 100, 180})), P::contiguous(0, 260), P::contiguous(0, 260)});
  v.push_back({"zigzag cross block, docs + window", attn_case_shape(1, 150, 150, 2, 2, 64, true, 64, docs({0, 60, 160, 240})),
               P::two(0, 75, 225, 75), P::two(75, 75, 150, 75)});
  v.push_back({"zigzag self, docs, non-causal", attn_case_shape(1, 150, 150, 2, 1, 32, false, 0, docs({0, 60, 160, 240})),
               P::two(0, 75, 225, 75), P::two(0, 75, 225, 75)});
  v.push_back({"3 segments, unsorted keys, docs causal", attn_case_shape(1, 90, 90, 2, 2, 32, true, 0, docs({0, 120, 260})),
               segs({{0, 1, 40}, {100, 1, 30}, {250, 2, 20}}), segs({{10, 1, 50}, {200, 3, 30}, {95, 1, 10}})});
  v.push_back({"3 segments, unsorted keys, window non-causal", attn_case_shape(1, 90, 90, 2, 2, 32, false, 45, docs({0, 120, 260})),
               segs({{0, 1, 40}, {100, 1, 30}, {250, 2, 20}}), segs({{10, 1, 50}, {200, 3, 30}, {95, 1, 10}})});
  v.push_back({"4 segments, GQA 8/2, B2, window causal", attn_case_shape(2, 130, 120, 8, 2, 16, true, 25, nullptr),
               segs({{0, 4, 30}, {121, 1, 40}, {300, 3, 30}, {170, 2, 30}}), segs({{1, 4, 30}, {100, 1, 50}, {290, 2, 40}})});
  v.push_back({"4 segments, docs + window non-causal", attn_case_shape(1, 130, 120, 4, 1, 24, false, 33, docs({0, 50, 161, 250})),
               segs({{0, 4, 30}, {121, 1, 40}, {300, 3, 30}, {170, 2, 30}}), segs({{1, 4, 30}, {100, 1, 50}, {290, 2, 40}})});
  // No row sees any key (the window ends before the keys begin): o = 0, lse = -inf, no gradient.
  v.push_back({"window: no row sees a key", attn_case_shape(1, 64, 80, 2, 2, 32, false, 50, nullptr), P::contiguous(0, 64), P::contiguous(200, 80)});
  // Rows of the first document see nothing: its keys are outside the block.
  v.push_back({"docs: first document's rows see nothing", attn_case_shape(1, 100, 100, 2, 2, 32, true, 0, docs({0, 40, 120})),
               P::contiguous(0, 100), P::contiguous(50, 100)});
  return v;
}

std::vector<Case> cases() {
  std::vector<Case> v;
  using P = Positions;
  v.push_back({"contiguous causal MHA", attn_case_shape(1, 300, 300, 2, 2, 64, true), P::contiguous(0, 300), P::contiguous(0, 300)});
  v.push_back({"contiguous non-causal MHA", attn_case_shape(1, 300, 300, 2, 2, 64, false), P::contiguous(0, 300), P::contiguous(0, 300)});
  v.push_back({"contiguous causal, wide scores", attn_case_shape(1, 200, 260, 2, 1, 32, true), P::contiguous(60, 200), P::contiguous(0, 260), 3.0f});
  // Zigzag, P = 2 ranks, chunks of 75: rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2.
  v.push_back({"zigzag self block", attn_case_shape(1, 150, 150, 2, 2, 64, true), P::two(0, 75, 225, 75), P::two(0, 75, 225, 75)});
  v.push_back({"zigzag cross block", attn_case_shape(1, 150, 150, 2, 2, 64, true), P::two(0, 75, 225, 75), P::two(75, 75, 150, 75)});
  v.push_back({"zigzag cross block reversed", attn_case_shape(1, 150, 150, 2, 2, 64, true), P::two(75, 75, 150, 75), P::two(0, 75, 225, 75)});
  // Striped, stride 4: queries of rank 1, keys of rank 2 (and of rank 0).
  v.push_back({"striped", attn_case_shape(1, 100, 90, 2, 2, 32, true), P::strided(1, 4, 100), P::strided(2, 4, 90)});
  v.push_back({"striped self", attn_case_shape(1, 100, 100, 2, 1, 32, true), P::strided(3, 4, 100), P::strided(3, 4, 100)});
  v.push_back({"query block before key block", attn_case_shape(1, 64, 80, 2, 2, 32, true), P::contiguous(0, 64), P::contiguous(500, 80)});
  v.push_back({"query block after key block", attn_case_shape(1, 64, 80, 2, 2, 32, true), P::contiguous(500, 64), P::contiguous(0, 80)});
  // A key tile whose first key is the last query of a query tile (one visible pair).
  v.push_back({"key tile starts at a tile's last query", attn_case_shape(1, 160, 100, 2, 2, 32, true), P::contiguous(0, 160), P::contiguous(127, 100)});
  v.push_back({"partly masked rows", attn_case_shape(1, 90, 70, 2, 2, 32, true), P::contiguous(0, 90), P::contiguous(40, 70)});
  v.push_back({"GQA H8 G2 B2", attn_case_shape(2, 160, 160, 8, 2, 32, true), P::contiguous(0, 160), P::contiguous(0, 160)});
  v.push_back({"GQA H8 G2 B2 non-causal", attn_case_shape(2, 96, 130, 8, 2, 16, false), P::contiguous(0, 96), P::contiguous(0, 130)});
  // --uneven-heads: 5 query heads starting 1 into a group of 3 (kv heads serve 2 and 3 of them;
  // the default map hq / hk would give heads 0-1, 2-3, 4 to kv heads 0, 1, 2)
  v.push_back({"head slice off the groups", attn_case_shape(1, 70, 70, 5, 2, 16, true, 0, nullptr, 3, 1),
               P::contiguous(0, 70), P::contiguous(0, 70)});
  v.push_back({"MQA odd sizes d24", attn_case_shape(1, 37, 53, 4, 1, 24, true), P::contiguous(16, 37), P::contiguous(0, 53)});
  v.push_back({"MQA odd sizes d24 non-causal", attn_case_shape(2, 37, 53, 4, 1, 24, false), P::contiguous(0, 37), P::contiguous(0, 53)});
  v.push_back({"d256 odd sizes", attn_case_shape(1, 37, 53, 2, 1, 256, true), P::contiguous(20, 37), P::contiguous(0, 53)});
  v.push_back({"d256 non-causal", attn_case_shape(2, 37, 53, 2, 2, 256, false), P::contiguous(0, 37), P::contiguous(0, 53)});
  v.push_back({"single query row", attn_case_shape(1, 1, 200, 2, 2, 64, true), P::contiguous(150, 1), P::contiguous(0, 200)});
  v.push_back({"d not a multiple of 16", attn_case_shape(1, 70, 90, 3, 3, 40, true), P::contiguous(30, 70), P::contiguous(0, 90)});
  // Two head dims (MLA): scores over d_qk, values and outputs d_v wide; expanded heads (d_v < d),
  // the absorbed decode's MQA over a latent (d_v close to d, one KV head) and d_v > d.
  v.push_back({"d_v 32 < d 48, causal", attn_case_shape(1, 90, 110, 2, 2, 48, true, 0, nullptr, 0, 0, 32),
               P::contiguous(20, 90), P::contiguous(0, 110)});
  v.push_back({"d_v 40 > d 24, GQA, docs + window", attn_case_shape(2, 70, 70, 4, 2, 24, true, 20, docs({0, 30}), 0, 0, 40),
               P::contiguous(0, 70), P::contiguous(0, 70)});
  v.push_back({"absorbed MQA d 72 d_v 64, one row", attn_case_shape(2, 1, 150, 4, 1, 72, true, 0, nullptr, 0, 0, 64),
               P::contiguous(149, 1), P::contiguous(0, 150)});
  v.push_back({"explicit scale", [&] { auto s = attn_case_shape(1, 50, 60, 2, 2, 32, true); s.scale = 0.3f; return s; }(),
               P::contiguous(20, 50), P::contiguous(0, 60)});
  for (const Case& c : mask_cases()) v.push_back(c);
  return v;
}

std::vector<int64_t> qshape(const AttnShape& s) { return {s.B, s.nq, s.hq, s.d}; }
std::vector<int64_t> kshape(const AttnShape& s) { return {s.B, s.nk, s.hk, s.d}; }
std::vector<int64_t> oshape(const AttnShape& s) { return {s.B, s.nq, s.hq, s.vdim()}; }  // o, dout
std::vector<int64_t> vshape(const AttnShape& s) { return {s.B, s.nk, s.hk, s.vdim()}; }  // v, dv
std::vector<int64_t> lshape(const AttnShape& s) { return {s.B, s.hq, s.nq}; }

Tensor upload(Backend& be, const std::vector<float>& h, std::vector<int64_t> shape) {
  Tensor t = be.alloc(std::move(shape), DType::f32, MemKind::activations);
  be.upload(h, t);
  return t;
}

struct Inputs {
  std::vector<float> q, k, v, dout;
};
Inputs make_inputs(const Case& c, uint64_t seed) {
  const AttnShape& s = c.s;
  Inputs in;
  in.q = randn(size_t(s.B * s.nq * s.hq * s.d), seed + 1, c.input_scale);
  in.k = randn(size_t(s.B * s.nk * s.hk * s.d), seed + 2, c.input_scale);
  in.v = randn(size_t(s.B * s.nk * s.hk * s.vdim()), seed + 3);
  in.dout = randn(size_t(s.B * s.nq * s.hq * s.vdim()), seed + 4);
  return in;
}

// Runs forward, delta and backward of one case and checks everything against the reference.
void check_case(Backend& be, const Case& c, uint64_t seed) {
  const AttnShape& s = c.s;
  const Inputs in = make_inputs(c, seed);
  const test::AttnRef ref = test::attn_reference(s, to_double(in.q), to_double(in.k), to_double(in.v),
                                                 to_double(in.dout), c.qpos, c.kpos, true);
  be.set_poison(true);
  Tensor q = upload(be, in.q, qshape(s)), k = upload(be, in.k, kshape(s)), v = upload(be, in.v, vshape(s));
  Tensor dout = upload(be, in.dout, oshape(s));
  Tensor o = be.alloc(oshape(s), DType::f32, MemKind::activations);
  Tensor lse = be.alloc(lshape(s), DType::f32, MemKind::activations);
  be.attn_fwd(s, q, k, v, c.qpos, c.kpos, o, lse);
  const std::vector<float> o_h = be.download(o), lse_h = be.download(lse);
  const auto co = compare(o_h, ref.o), cl = compare(lse_h, ref.lse);
  INFO("o: " << co.str() << "  lse: " << cl.str());
  CHECK(co.ok(kTol));
  CHECK(cl.ok(kTol));

  // delta = rowsum(dout * o), against the reference o.
  Tensor delta = be.alloc(lshape(s), DType::f32, MemKind::activations);
  be.attn_bwd_delta(s, o, dout, delta);
  std::vector<double> delta_ref(size_t(s.B * s.hq * s.nq));
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t i = 0; i < s.nq; ++i)
      for (int h = 0; h < s.hq; ++h) {
        double t = 0;
        for (int e = 0; e < s.vdim(); ++e) {
          const size_t x = size_t(((b * s.nq + i) * s.hq + h) * s.vdim() + e);
          t += ref.o[x] * double(in.dout[x]);
        }
        delta_ref[size_t((b * s.hq + h) * s.nq + i)] = t;
      }
  const auto cd = compare(be.download(delta), delta_ref);
  INFO("delta: " << cd.str());
  CHECK(cd.ok(kTol));

  // Backward from zero accumulators: the gradients themselves.
  Tensor dq = be.alloc(qshape(s), DType::f32, MemKind::activations);
  Tensor dk = be.alloc(kshape(s), DType::f32, MemKind::activations);
  Tensor dv = be.alloc(vshape(s), DType::f32, MemKind::activations);
  be.fill(dq, 0.0f);
  be.fill(dk, 0.0f);
  be.fill(dv, 0.0f);
  be.attn_bwd(s, q, k, v, dout, lse, delta, c.qpos, c.kpos, dq, dk, dv);
  const std::vector<float> dq_h = be.download(dq), dk_h = be.download(dk), dv_h = be.download(dv);
  const auto cq = compare(dq_h, ref.dq), ck = compare(dk_h, ref.dk), cv = compare(dv_h, ref.dv);
  INFO("dq: " << cq.str() << "  dk: " << ck.str() << "  dv: " << cv.str());
  // A fully masked block has zero gradients: compare exactly.
  REQUIRE(count_visible_pairs(c.qpos, c.kpos, s.mask()) == test::ref_visible_pairs(s, c.qpos, c.kpos));
  if (count_visible_pairs(c.qpos, c.kpos, s.mask()) == 0) {
    CHECK(std::all_of(dq_h.begin(), dq_h.end(), [](float x) { return x == 0.0f; }));
    CHECK(std::all_of(dk_h.begin(), dk_h.end(), [](float x) { return x == 0.0f; }));
    CHECK(std::all_of(dv_h.begin(), dv_h.end(), [](float x) { return x == 0.0f; }));
  } else {
    CHECK(cq.ok(kTol));
    CHECK(ck.ok(kTol));
    CHECK(cv.ok(kTol));
  }

  // Backward accumulates: start from random values X, expect X + (the gradients above).
  const std::vector<float> xq = randn(dq_h.size(), seed + 7), xk = randn(dk_h.size(), seed + 8),
                           xv = randn(dv_h.size(), seed + 9);
  be.upload(xq, dq);
  be.upload(xk, dk);
  be.upload(xv, dv);
  be.attn_bwd(s, q, k, v, dout, lse, delta, c.qpos, c.kpos, dq, dk, dv);
  auto plus = [](const std::vector<float>& a, const std::vector<float>& b) {
    std::vector<double> r(a.size());
    for (size_t i = 0; i < a.size(); ++i) r[i] = double(a[i]) + double(b[i]);
    return r;
  };
  const auto aq = compare(be.download(dq), plus(xq, dq_h)), ak = compare(be.download(dk), plus(xk, dk_h)),
             av = compare(be.download(dv), plus(xv, dv_h));
  INFO("accumulate dq: " << aq.str() << "  dk: " << ak.str() << "  dv: " << av.str());
  CHECK(aq.ok(1e-6));  // one fp32 addition of rounding apart
  CHECK(ak.ok(1e-6));
  CHECK(av.ok(1e-6));
}

struct TileGuard {  // restores the default tiles when a test ends
  cpu::AttnTiles saved = cpu::attn_tiles();
  ~TileGuard() { cpu::set_attn_tiles(saved); }
};

}  // namespace

TEST_CASE("attention fwd/bwd match the float64 reference", "[attention]") {
  TileGuard guard;
  // Default tiles, and small tiles so every case crosses many tile boundaries (diagonal, skipped,
  // trimmed and mask-free tiles, several online-softmax rescales per row).
  // Small dQ chunks too: the backward runs several query chunks per batch row.
  const cpu::AttnTiles small{16, 32, 32, 16, 8, 4096};
  const auto all = cases();
  for (int tiles = 0; tiles < 2; ++tiles) {
    cpu::set_attn_tiles(tiles == 0 ? guard.saved : small);
    for (size_t i = 0; i < all.size(); ++i) {
      DYNAMIC_SECTION((tiles ? "small tiles: " : "default tiles: ") << all[i].name) {
        CpuBackend be(2);
        check_case(be, all[i], 1000 + 17 * i);
      }
    }
  }
}

TEST_CASE("the float64 reference gradient matches finite differences", "[attention][reference]") {
  // Guards the reference itself: loss = sum(o * dout), central differences in float64.
  AttnShape s;
  s.B = 1;
  s.nq = 5;
  s.nk = 7;
  s.hq = 2;
  s.hk = 1;
  s.d = 4;
  s.causal = true;
  const Positions qp = Positions::contiguous(2, 5), kp = Positions::contiguous(0, 7);
  auto q = to_double(randn(size_t(s.nq * s.hq * s.d), 11)), k = to_double(randn(size_t(s.nk * s.hk * s.d), 12)),
       v = to_double(randn(size_t(s.nk * s.hk * s.d), 13)), dout = to_double(randn(size_t(s.nq * s.hq * s.d), 14));
  const auto ref = test::attn_reference(s, q, k, v, dout, qp, kp, true);
  auto loss = [&]() {
    const auto r = test::attn_reference(s, q, k, v, dout, qp, kp, false);
    double t = 0;
    for (size_t i = 0; i < r.o.size(); ++i) t += r.o[i] * dout[i];
    return t;
  };
  auto fd_check = [&](std::vector<double>& x, const std::vector<double>& g, const char* name) {
    double err = 0, nrm = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double h = 1e-6, x0 = x[i];
      x[i] = x0 + h;
      const double lp = loss();
      x[i] = x0 - h;
      const double lm = loss();
      x[i] = x0;
      const double fd = (lp - lm) / (2 * h);
      err += (fd - g[i]) * (fd - g[i]);
      nrm += g[i] * g[i];
    }
    INFO(name << " rel err " << std::sqrt(err / nrm));
    CHECK(std::sqrt(err / nrm) < 1e-7);
  };
  fd_check(q, ref.dq, "dq");
  fd_check(k, ref.dk, "dk");
  fd_check(v, ref.dv, "dv");
}

TEST_CASE("attention over two key blocks: merge and accumulated backward equal the whole", "[attention][merge]") {
  TileGuard guard;
  cpu::set_attn_tiles({16, 32, 32, 16, 8, 4096});
  // Queries 0..99 (causal). Key block 1 = positions 10..59, block 2 = 60..109: query rows 0..9
  // see no key at all, rows 10..59 only block 1, later rows both.
  AttnShape s;
  s.B = 2;
  s.nq = 100;
  s.hq = 4;
  s.hk = 2;
  s.d = 32;
  s.causal = true;
  const Positions qp = Positions::contiguous(0, 100);
  const Positions k1p = Positions::contiguous(10, 50), k2p = Positions::contiguous(60, 50);
  const Positions kall = Positions::contiguous(10, 100);
  AttnShape whole = s, half = s;
  whole.nk = 100;
  half.nk = 50;

  const auto q = randn(size_t(s.B * s.nq * s.hq * s.d), 21), k = randn(size_t(s.B * 100 * s.hk * s.d), 22),
             v = randn(size_t(s.B * 100 * s.hk * s.d), 23), dout = randn(size_t(s.B * s.nq * s.hq * s.d), 24);
  const auto ref = test::attn_reference(whole, to_double(q), to_double(k), to_double(v), to_double(dout), qp, kall, true);
  // Split k, v [B, 100, hk, d] into the two blocks along the token axis.
  auto split = [&](const std::vector<float>& x, int part) {
    std::vector<float> r;
    const int64_t row = s.hk * s.d;
    for (int64_t b = 0; b < s.B; ++b)
      r.insert(r.end(), x.begin() + (b * 100 + part * 50) * row, x.begin() + (b * 100 + part * 50 + 50) * row);
    return r;
  };
  CpuBackend be(2);
  be.set_poison(true);
  Tensor tq = upload(be, q, qshape(s)), tdo = upload(be, dout, qshape(s));
  Tensor tk1 = upload(be, split(k, 0), kshape(half)), tv1 = upload(be, split(v, 0), kshape(half));
  Tensor tk2 = upload(be, split(k, 1), kshape(half)), tv2 = upload(be, split(v, 1), kshape(half));
  Tensor o1 = be.alloc(qshape(s), DType::f32, MemKind::activations), l1 = be.alloc(lshape(s), DType::f32, MemKind::activations);
  Tensor o2 = be.alloc(qshape(s), DType::f32, MemKind::activations), l2 = be.alloc(lshape(s), DType::f32, MemKind::activations);
  be.attn_fwd(half, tq, tk1, tv1, qp, k1p, o1, l1);
  be.attn_fwd(half, tq, tk2, tv2, qp, k2p, o2, l2);

  SECTION("merge in either order") {
    for (int order = 0; order < 2; ++order) {
      Tensor oa = be.alloc(qshape(s), DType::f32, MemKind::activations), la = be.alloc(lshape(s), DType::f32, MemKind::activations);
      be.copy_2d(oa, oa.numel(), order ? o2 : o1, oa.numel(), 1, oa.numel());
      be.copy_2d(la, la.numel(), order ? l2 : l1, la.numel(), 1, la.numel());
      be.attn_merge(s, oa, la, order ? o1 : o2, order ? l1 : l2);
      const auto co = compare(be.download(oa), ref.o), cl = compare(be.download(la), ref.lse);
      INFO("order " << order << " o: " << co.str() << " lse: " << cl.str());
      CHECK(co.ok(kTol));
      CHECK(cl.ok(kTol));
    }
  }
  SECTION("merge ignores the o of an empty side (lse = -inf), even NaN") {
    Tensor oa = be.alloc(qshape(s), DType::f32, MemKind::activations), la = be.alloc(lshape(s), DType::f32, MemKind::activations);
    be.fill(la, -kInf);  // o_acc stays poisoned (NaN)
    be.attn_merge(s, oa, la, o1, l1);
    CHECK(be.download(oa) == be.download(o1));
    CHECK(be.download(la) == be.download(l1));
    Tensor ob = be.alloc(qshape(s), DType::f32, MemKind::activations), lb = be.alloc(lshape(s), DType::f32, MemKind::activations);
    be.fill(lb, -kInf);
    be.attn_merge(s, oa, la, ob, lb);  // merging an empty block changes nothing
    CHECK(be.download(oa) == be.download(o1));
  }
  SECTION("backward per block with the final lse and delta") {
    Tensor o = be.alloc(qshape(s), DType::f32, MemKind::activations), l = be.alloc(lshape(s), DType::f32, MemKind::activations);
    be.copy_2d(o, o.numel(), o1, o.numel(), 1, o.numel());
    be.copy_2d(l, l.numel(), l1, l.numel(), 1, l.numel());
    be.attn_merge(s, o, l, o2, l2);
    Tensor delta = be.alloc(lshape(s), DType::f32, MemKind::activations);
    be.attn_bwd_delta(s, o, tdo, delta);
    Tensor dq = be.alloc(qshape(s), DType::f32, MemKind::activations);
    Tensor dk1 = be.alloc(kshape(half), DType::f32, MemKind::activations), dv1 = be.alloc(kshape(half), DType::f32, MemKind::activations);
    Tensor dk2 = be.alloc(kshape(half), DType::f32, MemKind::activations), dv2 = be.alloc(kshape(half), DType::f32, MemKind::activations);
    for (Tensor* t : {&dq, &dk1, &dv1, &dk2, &dv2}) be.fill(*t, 0.0f);
    be.attn_bwd(half, tq, tk1, tv1, tdo, l, delta, qp, k1p, dq, dk1, dv1);
    be.attn_bwd(half, tq, tk2, tv2, tdo, l, delta, qp, k2p, dq, dk2, dv2);
    // Reassemble dk, dv in token order.
    auto join = [&](const Tensor& a, const Tensor& b) {
      const auto ha = be.download(a), hb = be.download(b);
      std::vector<float> r;
      const int64_t blk = 50 * s.hk * s.d;
      for (int64_t bb = 0; bb < s.B; ++bb) {
        r.insert(r.end(), ha.begin() + bb * blk, ha.begin() + (bb + 1) * blk);
        r.insert(r.end(), hb.begin() + bb * blk, hb.begin() + (bb + 1) * blk);
      }
      return r;
    };
    const auto cq = compare(be.download(dq), ref.dq), ck = compare(join(dk1, dk2), ref.dk),
               cv = compare(join(dv1, dv2), ref.dv);
    INFO("dq: " << cq.str() << " dk: " << ck.str() << " dv: " << cv.str());
    CHECK(cq.ok(kTol));
    CHECK(ck.ok(kTol));
    CHECK(cv.ok(kTol));
  }
}

TEST_CASE("attention results do not depend on the schedule", "[attention]") {
  const Case c{"zigzag", [] {
                 AttnShape s;
                 s.B = 1; s.nq = 384; s.nk = 384; s.hq = 4; s.hk = 2; s.d = 64; s.causal = true;
                 return s;
               }(),
               Positions::two(0, 192, 576, 192), Positions::two(0, 192, 576, 192)};
  const Inputs in = make_inputs(c, 77);
  const AttnShape& s = c.s;
  auto run = [&](int threads) {
    CpuBackend be(threads);
    Tensor q = upload(be, in.q, qshape(s)), k = upload(be, in.k, kshape(s)), v = upload(be, in.v, kshape(s));
    Tensor dout = upload(be, in.dout, qshape(s));
    Tensor o = be.alloc(qshape(s), DType::f32, MemKind::activations), lse = be.alloc(lshape(s), DType::f32, MemKind::activations);
    Tensor delta = be.alloc(lshape(s), DType::f32, MemKind::activations);
    Tensor dq = be.alloc(qshape(s), DType::f32, MemKind::activations), dk = be.alloc(kshape(s), DType::f32, MemKind::activations),
           dv = be.alloc(kshape(s), DType::f32, MemKind::activations);
    for (Tensor* t : {&dq, &dk, &dv}) be.fill(*t, 0.0f);
    be.attn_fwd(s, q, k, v, c.qpos, c.kpos, o, lse);
    be.attn_bwd_delta(s, o, dout, delta);
    be.attn_bwd(s, q, k, v, dout, lse, delta, c.qpos, c.kpos, dq, dk, dv);
    return std::vector<std::vector<float>>{be.download(o), be.download(lse), be.download(dq), be.download(dk), be.download(dv)};
  };
  const auto a = run(2), b = run(2), one = run(1);
  CHECK(a == b);          // bitwise repeatable at a given thread count
  CHECK(a[0] == one[0]);  // forward: each row is computed by one thread in a fixed order
  CHECK(a[1] == one[1]);
  CHECK(a[3] == one[3]);  // dk, dv tiles are owned by one item
  CHECK(a[4] == one[4]);
  CHECK(compare(a[2], to_double(one[2])).ok(1e-6));  // dq: per-thread partial sums
}

TEST_CASE("attention counts FLOPs and logs compute and replay mode skips it", "[attention]") {
  AttnShape s;
  s.B = 1; s.nq = 64; s.nk = 64; s.hq = 2; s.hk = 2; s.d = 16; s.causal = true;
  CpuBackend be(2);
  be.set_poison(true);
  Tensor q = upload(be, randn(64 * 2 * 16, 1), qshape(s)), k = upload(be, randn(64 * 2 * 16, 2), kshape(s));
  Tensor o = be.alloc(qshape(s), DType::f32, MemKind::activations), lse = be.alloc(lshape(s), DType::f32, MemKind::activations);
  const Positions p = Positions::contiguous(0, 64);
  be.set_phase(0);
  be.attn_fwd(s, q, k, k, p, p, o, lse);
  REQUIRE(be.compute_log().size() == 1);
  CHECK(be.compute_log()[0].name == "attn_fwd");
  CHECK(be.compute_log()[0].phase == 0);
  CHECK(be.compute_log()[0].t1_ms >= be.compute_log()[0].t0_ms);
  CHECK(be.model_flops() == Approx(4.0 * 16 * 2 * (64 * 65 / 2)));
  be.set_compute_enabled(false);
  Tensor o2 = be.alloc(qshape(s), DType::f32, MemKind::activations), l2 = be.alloc(lshape(s), DType::f32, MemKind::activations);
  be.attn_fwd(s, q, k, k, p, p, o2, l2);
  CHECK(be.compute_log().size() == 1);
  const auto oh = be.download(o2);
  CHECK(std::all_of(oh.begin(), oh.end(), [](float x) { return std::isnan(x); }));
  be.set_compute_enabled(true);
  {  // two head dims: QK^T over d = 16, PV over d_v = 8
    AttnShape s2 = s;
    s2.d_v = 8;
    Tensor v8 = upload(be, randn(64 * 2 * 8, 3), vshape(s2));
    Tensor o8 = be.alloc(oshape(s2), DType::f32, MemKind::activations);
    be.reset_flops();
    be.attn_fwd(s2, q, k, v8, p, p, o8, lse);
    CHECK(be.model_flops() == Approx(2.0 * (16 + 8) * 2 * (64 * 65 / 2)));
  }
}

TEST_CASE("attention rejects bad shapes with clear errors", "[attention]") {
  CpuBackend be(1);
  AttnShape s;
  s.B = 1; s.nq = 8; s.nk = 8; s.hq = 3; s.hk = 2; s.d = 16;
  Tensor q = be.alloc({1, 8, 3, 16}, DType::f32, MemKind::activations), k = be.alloc({1, 8, 2, 16}, DType::f32, MemKind::activations);
  Tensor o = be.alloc({1, 8, 3, 16}, DType::f32, MemKind::activations), lse = be.alloc({1, 3, 8}, DType::f32, MemKind::activations);
  const Positions p = Positions::contiguous(0, 8);
  CHECK_THROWS_WITH(be.attn_fwd(s, q, k, k, p, p, o, lse), Catch::Contains("hq=3") && Catch::Contains("hk=2"));
  s.hq = 4;
  s.hk = 4;
  s.d = 1500;
  CHECK_THROWS_WITH(be.attn_fwd(s, q, k, k, p, p, o, lse), Catch::Contains("d=1500") && Catch::Contains("1 <= d <= 1024"));
  s.d = 16;
  s.d_v = -1;
  CHECK_THROWS_WITH(be.attn_fwd(s, q, k, k, p, p, o, lse), Catch::Contains("d_v=-1"));
  s.d_v = 24;  // v and o are d_v wide: a 16-wide v is refused by name
  Tensor q4 = be.alloc({1, 8, 4, 16}, DType::f32, MemKind::activations);
  CHECK_THROWS_WITH(be.attn_fwd(s, q4, q4, q4, p, p, q4, lse), Catch::Contains("v has 512 elements") && Catch::Contains("[1, 8, 4, 24]"));
  s.d_v = 0;
  s.d = 16;
  s.hq = 3;
  s.hk = 1;
  CHECK_THROWS_WITH(be.attn_fwd(s, q, k, k, p, p, o, lse), Catch::Contains("k has 256 elements"));
  Tensor k1 = be.alloc({1, 8, 1, 16}, DType::f32, MemKind::activations);
  CHECK_THROWS_WITH(be.attn_fwd(s, q, k1, k1, Positions::contiguous(0, 7), p, o, lse), Catch::Contains("qpos"));
  CHECK_NOTHROW(be.attn_fwd(s, q, k1, k1, p, p, o, lse));
  // A head slice's map: 3 heads starting 2 into a group of 3 span 2 kv heads, not 1.
  s.rep = 3;
  s.head0 = 2;
  CHECK_THROWS_WITH(be.attn_fwd(s, q, k1, k1, p, p, o, lse),
                    Catch::Contains("hk = ceil((head0 + hq) / rep)") && Catch::Contains("hk=1") && Catch::Contains("head0=2"));
  s.head0 = 3;
  s.hk = 2;
  CHECK_THROWS_WITH(be.attn_fwd(s, q, k, k, p, p, o, lse), Catch::Contains("0 <= head0 < rep"));
  s.head0 = 2;
  CHECK_NOTHROW(be.attn_fwd(s, q, k, k, p, p, o, lse));
}

// ---- the vector inner loops, every ISA level this CPU runs --------------------------------------
TEST_CASE("vector loops: every ISA variant matches float64", "[attention][isa]") {
  const cpu::VecOps* vars[4];
  const int nv = cpu::vec_ops_variants(vars, 4);
  REQUIRE(nv >= 1);
  CHECK(std::string(vars[nv - 1]->isa) == "generic");
  for (int vi = 0; vi < nv; ++vi) {
    const cpu::VecOps& ops = *vars[vi];
    DYNAMIC_SECTION("isa " << ops.isa) {
      const int rows = 7, cols = 45, ld = 48, d = 37;
      SECTION("exp2 accuracy over [-126, 0], -inf -> 0, NaN stays NaN") {
        std::vector<float> S(size_t(rows) * ld), lse2(rows, 0.0f);
        std::vector<double> want(S.size());
        double worst = 0;
        for (int i = 0; i < rows; ++i)
          for (int j = 0; j < cols; ++j) {
            const float x = -126.0f * float(i * cols + j) / float(rows * cols - 1);
            S[size_t(i) * ld + j] = x;
            want[size_t(i) * ld + j] = std::exp2(double(x));
          }
        ops.prob_tile(S.data(), ld, rows, cols, lse2.data());
        for (int i = 0; i < rows; ++i)
          for (int j = 0; j < cols; ++j) {
            const double w = want[size_t(i) * ld + j];
            worst = std::max(worst, std::abs(S[size_t(i) * ld + j] - w) / w);
          }
        INFO("worst relative error " << worst);
        CHECK(worst < 3e-7);
        float special[3] = {-kInf, std::numeric_limits<float>::quiet_NaN(), 0.0f};
        float zero = 0.0f;
        for (float& x : special) {
          float t[1] = {x};
          ops.prob_tile(t, 1, 1, 1, &zero);
          x = t[0];
        }
        CHECK(special[0] == 0.0f);
        CHECK(std::isnan(special[1]));
        CHECK(special[2] == 1.0f);
      }
      SECTION("mask, online softmax step, dsoftmax") {
        std::vector<float> S = randn(size_t(rows) * ld, 5, 2.0f), O = randn(size_t(rows) * d, 6);
        // Row i sees keys at positions [lo, hi]: a causal-like upper end and a window-like lower
        // end, so both sides of the test are exercised (row 0 sees [0, 10]).
        std::vector<int32_t> lo(rows), hi(rows), kp(cols);
        for (int i = 0; i < rows; ++i) {
          lo[i] = 3 * i;
          hi[i] = 10 + 5 * i;
        }
        for (int j = 0; j < cols; ++j) kp[j] = j;
        auto vis = [&](int i, int j) { return kp[j] >= lo[i] && kp[j] <= hi[i]; };
        // Running state: row 0 has seen nothing (m = -inf), the others a finite max.
        std::vector<float> m(rows), l(rows);
        for (int i = 0; i < rows; ++i) {
          m[i] = i == 0 ? -kInf : 0.5f * float(i) - 1.0f;
          l[i] = i == 0 ? 0.0f : 1.5f + float(i);
        }
        const std::vector<float> S0 = S, O0 = O;
        ops.mask_tile(S.data(), ld, rows, cols, lo.data(), hi.data(), kp.data());
        for (int i = 0; i < rows; ++i)
          for (int j = 0; j < cols; ++j)
            CHECK(S[size_t(i) * ld + j] == (!vis(i, j) ? -kInf : S0[size_t(i) * ld + j]));
        std::vector<float> m1 = m, l1 = l;
        ops.softmax_tile(S.data(), ld, rows, cols, m1.data(), l1.data(), O.data(), d, d);
        for (int i = 0; i < rows; ++i) {
          double mx = m[i];
          for (int j = 0; j < cols; ++j)
            if (vis(i, j)) mx = std::max(mx, double(S0[size_t(i) * ld + j]));
          double sum = 0;
          for (int j = 0; j < cols; ++j) {
            // The argument as the kernel forms it (one fp32 subtraction), then exp2 in double.
            const float arg = S0[size_t(i) * ld + j] - float(mx);
            const double p = vis(i, j) ? std::exp2(double(arg)) : 0.0;
            sum += p;
            CHECK(std::abs(S[size_t(i) * ld + j] - p) <= 3e-7 * std::max(p, 1e-30) + 1e-37);
          }
          const double alpha = std::exp2(double(m[i]) - mx);
          CHECK(m1[i] == float(mx));
          CHECK(std::abs(l1[i] - (l[i] * alpha + sum)) <= 1e-6 * (l[i] * alpha + sum));
          for (int c = 0; c < d; ++c)
            CHECK(std::abs(O[size_t(i) * d + c] - O0[size_t(i) * d + c] * alpha) <= 1e-6 * std::abs(O0[size_t(i) * d + c]) + 1e-30);
        }
        // dS = P (dP - delta)
        std::vector<float> dP = randn(S.size(), 9), delta = randn(rows, 10);
        const std::vector<float> dP0 = dP;
        ops.dsoftmax_tile(S.data(), dP.data(), ld, rows, cols, delta.data());
        for (int i = 0; i < rows; ++i)
          for (int j = 0; j < cols; ++j) {
            const double w = double(S[size_t(i) * ld + j]) * (double(dP0[size_t(i) * ld + j]) - delta[i]);
            CHECK(std::abs(dP[size_t(i) * ld + j] - w) <= 1e-6 * std::abs(w) + 1e-30);
          }
      }
    }
  }
}

// The sinks (Backend::attn_sink_fwd / attn_sink_bwd) on the CPU backend, every storage dtype,
// against float64 from the same (rounded) inputs; rows with lse = -inf take o = 0, lse = sink.
// Then the gradient against a central difference of L(sink) = sum(dout * o'(sink)) in float64
// over the backend's fp32 forward: the formula is the derivative, not just a copy of it.
TEST_CASE("attention sinks: forward and gradient against float64, every dtype", "[attention][sinks]") {
  AttnShape s;
  s.B = 2; s.nq = 37; s.nk = 37; s.hq = 3; s.hk = 1; s.d = 24;
  const size_t no = size_t(s.B * s.nq * s.hq * s.d), nl = size_t(s.B * s.hq * s.nq);
  const std::vector<float> o0 = randn(no, 61), dout = randn(no, 62), sinks = {1.5f, -0.25f, 0.0f};
  std::vector<float> l0 = randn(nl, 63, 2.0f);
  for (size_t i = 0; i < nl; i += 9) l0[i] = -kInf;
  CpuBackend be(2);
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    INFO("dtype " << dtype_name(t));
    Tensor o = be.alloc({s.B, s.nq, s.hq, s.d}, t, MemKind::activations);
    Tensor dt = be.alloc({s.B, s.nq, s.hq, s.d}, t, MemKind::activations);
    Tensor l = be.alloc({s.B, s.hq, s.nq}, DType::f32, MemKind::activations);
    Tensor sk = be.alloc({s.hq}, DType::f32, MemKind::weights);
    Tensor ds = be.alloc({s.hq}, DType::f32, MemKind::weights);
    be.upload(o0, o);
    be.upload(dout, dt);
    be.upload(l0, l);
    be.upload(sinks, sk);
    be.upload({0.5f, 0.5f, 0.5f}, ds);  // accumulates
    const std::vector<float> oin = be.download(o), din = be.download(dt);  // the rounded inputs
    be.attn_sink_fwd(s, sk, o, l);
    const std::vector<float> oout = be.download(o);
    be.attn_sink_bwd(s, sk, o, dt, l, ds);
    std::vector<double> o_ref(no), l_ref(nl), ds_ref(3, 0.5);
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t i = 0; i < s.nq; ++i)
        for (int h = 0; h < s.hq; ++h) {
          const size_t li = size_t((b * s.hq + h) * s.nq + i), base = size_t(((b * s.nq + i) * s.hq + h) * s.d);
          const double a = l0[li], sv = sinks[size_t(h)];
          const double lse = a == -kInf ? sv : std::log(std::exp(a) + std::exp(sv));
          l_ref[li] = lse;
          double dot = 0;
          for (int e = 0; e < s.d; ++e) {
            o_ref[base + size_t(e)] = a == -kInf ? 0.0 : oin[base + size_t(e)] * std::exp(a - lse);
            dot += double(oout[base + size_t(e)]) * din[base + size_t(e)];  // from the stored o'
          }
          ds_ref[size_t(h)] -= std::exp(sv - lse) * dot;
        }
    const double tol = t == DType::f32 ? 1e-6 : t == DType::bf16 ? 8e-3 : 1e-3;  // one rounding of o'
    const test::Cmp co = compare(oout, o_ref), cl = compare(be.download(l), l_ref), cd = compare(be.download(ds), ds_ref);
    INFO("o " << co.str() << "; lse " << cl.str() << "; dsinks " << cd.str());
    CHECK(co.ok(tol));
    CHECK(cl.ok(1e-6));
    CHECK(cd.ok(1e-6));
  }
  {  // the boundary checks name the operation and the tensor
    Tensor o = be.alloc({s.B, s.nq, s.hq, s.d}, DType::f32, MemKind::activations);
    Tensor l = be.alloc({s.B, s.hq, s.nq}, DType::f32, MemKind::activations);
    Tensor sk = be.alloc({s.hq}, DType::f32, MemKind::weights), wrong = be.alloc({s.hq + 1}, DType::f32, MemKind::weights);
    CHECK_THROWS_WITH(be.attn_sink_fwd(s, wrong, o, l), Catch::Contains("attn_sink_fwd") && Catch::Contains("sinks"));
    CHECK_THROWS_WITH(be.attn_sink_bwd(s, sk, o, o, l, wrong), Catch::Contains("attn_sink_bwd") && Catch::Contains("dsinks"));
    CHECK_THROWS_WITH(be.attn_sink_bwd(s, wrong, o, o, l, sk), Catch::Contains("attn_sink_bwd") && Catch::Contains("sinks"));
  }
  // Central difference over the fp32 forward: dL/dsink[h] = (L(sink + e) - L(sink - e)) / 2e.
  auto loss = [&](const std::vector<float>& sv) {
    Tensor o = be.alloc({s.B, s.nq, s.hq, s.d}, DType::f32, MemKind::activations);
    Tensor l = be.alloc({s.B, s.hq, s.nq}, DType::f32, MemKind::activations);
    Tensor sk = be.alloc({s.hq}, DType::f32, MemKind::weights);
    be.upload(o0, o);
    be.upload(l0, l);
    be.upload(sv, sk);
    be.attn_sink_fwd(s, sk, o, l);
    const std::vector<float> oo = be.download(o);
    double sum = 0;
    for (size_t i = 0; i < no; ++i) sum += double(oo[i]) * dout[i];
    return sum;
  };
  Tensor o = be.alloc({s.B, s.nq, s.hq, s.d}, DType::f32, MemKind::activations);
  Tensor dt = be.alloc({s.B, s.nq, s.hq, s.d}, DType::f32, MemKind::activations);
  Tensor l = be.alloc({s.B, s.hq, s.nq}, DType::f32, MemKind::activations);
  Tensor sk = be.alloc({s.hq}, DType::f32, MemKind::weights), ds = be.alloc({s.hq}, DType::f32, MemKind::weights);
  be.upload(o0, o);
  be.upload(dout, dt);
  be.upload(l0, l);
  be.upload(sinks, sk);
  be.fill(ds, 0.0f);
  be.attn_sink_fwd(s, sk, o, l);
  be.attn_sink_bwd(s, sk, o, dt, l, ds);
  const std::vector<float> grad = be.download(ds);
  const float eps = 1e-2f;
  for (int h = 0; h < s.hq; ++h) {
    std::vector<float> up = sinks, dn = sinks;
    up[size_t(h)] += eps;
    dn[size_t(h)] -= eps;
    const double fd = (loss(up) - loss(dn)) / (2.0 * eps);
    INFO("head " << h << ": formula " << grad[size_t(h)] << ", central difference " << fd);
    CHECK(std::abs(grad[size_t(h)] - fd) <= 1e-3 * std::max(1.0, std::abs(fd)));
  }
}

// MLA's absorbed decode reads its values as the first d_v columns of each cached latent row
// [c_kv | k_R] (AttnShape::v_in_k): the forward must equal the one over those columns copied out,
// bit for bit, in every dtype, for one query row (decode) and for a block of rows.
TEST_CASE("attention: values inside the key rows (v_in_k) = the same values copied out", "[attention][mla]") {
  CpuBackend be(2);
  for (DType dt : {DType::f32, DType::bf16, DType::f16})
    for (int64_t nq : {1, 37}) {
      AttnShape s;
      s.B = 2; s.nq = nq; s.nk = 90; s.hq = 4; s.hk = 1; s.d = 40; s.d_v = 32; s.causal = true; s.window = 50;
      s.scale = 0.2f;  // MLA's: 1/sqrt(d_nope + d_rope), not 1/sqrt(d)
      INFO(dtype_name(dt) << " nq " << nq);
      const std::vector<float> qh = randn(size_t(s.B * nq * s.hq * s.d), 5), kh = randn(size_t(s.B * s.nk * s.d), 6);
      std::vector<float> vh;  // the first d_v columns of every key row
      for (int64_t r = 0; r < s.B * s.nk; ++r) vh.insert(vh.end(), kh.begin() + r * s.d, kh.begin() + r * s.d + s.d_v);
      auto make = [&](const std::vector<float>& h, std::vector<int64_t> shape) {
        Tensor t = be.alloc(std::move(shape), dt, MemKind::activations);
        be.upload(h, t);
        return t;
      };
      Tensor q = make(qh, qshape(s)), k = make(kh, kshape(s)), v = make(vh, vshape(s));
      const Positions qp = Positions::contiguous(s.nk - nq, nq), kp = Positions::contiguous(0, s.nk);
      Tensor o1 = be.alloc(oshape(s), dt, MemKind::activations), o2 = be.alloc(oshape(s), dt, MemKind::activations);
      Tensor l1 = be.alloc(lshape(s), DType::f32, MemKind::activations), l2 = be.alloc(lshape(s), DType::f32, MemKind::activations);
      be.attn_fwd(s, q, k, v, qp, kp, o1, l1);
      AttnShape si = s;
      si.v_in_k = true;
      be.attn_fwd(si, q, k, k, qp, kp, o2, l2);
      const std::vector<float> a = be.download(o1), b = be.download(o2);
      CHECK(std::all_of(a.begin(), a.end(), [](float x) { return std::isfinite(x); }));
      if (dt == DType::f32) {  // OpenBLAS sgemm reads v at another pitch: no bitwise promise
        CHECK(compare(b, to_double(a)).ok(1e-6));
        CHECK(compare(be.download(l2), to_double(be.download(l1))).ok(1e-6));
      } else {  // the 16-bit emulation's own fixed-order loops: bit for bit
        CHECK(a == b);
        CHECK(be.download(l1) == be.download(l2));
      }
      // Refused: v not k itself, d_v > d, and the backward.
      CHECK_THROWS_WITH(be.attn_fwd(si, q, k, v, qp, kp, o2, l2), Catch::Contains("v must be k itself"));
      AttnShape wide = si;
      wide.d_v = 48;
      Tensor o48 = be.alloc(oshape(wide), dt, MemKind::activations);
      CHECK_THROWS_WITH(be.attn_fwd(wide, q, k, k, qp, kp, o48, l2), Catch::Contains("d_v <= d") && Catch::Contains("d_v=48"));
      Tensor dq = be.alloc(qshape(s), DType::f32, MemKind::activations), dk = be.alloc(kshape(s), DType::f32, MemKind::activations);
      CHECK_THROWS_WITH(be.attn_bwd(si, q, k, k, o1, l1, l1, qp, kp, dq, dk, dk), Catch::Contains("forward only"));
    }
}

// The float64 reference's additions for `verify --numerics` (kernels/attention_reference.h), each
// against an independent statement of what it must equal: a sink logit rescales a row's output by
// e^(lse - lse') with lse' = log(e^lse + e^sink); dsinks is the derivative of sum(o * dout) by
// central differences; the parts of a work split sum to the whole.
TEST_CASE("float64 reference: sinks rescale o, dsinks by central differences, parts sum to the whole") {
  auto docs = std::make_shared<const std::vector<int64_t>>(std::vector<int64_t>{0, 9});
  const AttnShape s = test::attn_case_shape(2, 24, 24, 4, 2, 8, true, 10, docs);
  const Positions pos = Positions::contiguous(0, 24);
  const auto q = test::to_double(test::randn(size_t(2 * 24 * 4 * 8), 11)), k = test::to_double(test::randn(size_t(2 * 24 * 2 * 8), 12)),
             v = test::to_double(test::randn(size_t(2 * 24 * 2 * 8), 13)), dout = test::to_double(test::randn(size_t(2 * 24 * 4 * 8), 14));
  const std::vector<double> sinks = {0.3, -1.0, 2.0, 0.0};
  AttnRefOptions with;
  with.sinks = &sinks;
  const AttnRef plain = attn_reference(s, q, k, v, dout, pos, pos, true);
  const AttnRef sunk = attn_reference(s, q, k, v, dout, pos, pos, true, with);
  for (int64_t b = 0; b < 2; ++b)
    for (int h = 0; h < 4; ++h)
      for (int64_t i = 0; i < 24; ++i) {
        const double l0 = plain.lse[size_t((b * 4 + h) * 24 + i)], l1 = sunk.lse[size_t((b * 4 + h) * 24 + i)];
        REQUIRE(l1 == Approx(std::log(std::exp(l0) + std::exp(sinks[size_t(h)]))).epsilon(1e-12));
        for (int c = 0; c < 8; ++c) {
          const size_t at = size_t(((b * 24 + i) * 4 + h) * 8 + c);
          REQUIRE(sunk.o[at] == Approx(plain.o[at] * std::exp(l0 - l1)).epsilon(1e-12).margin(1e-15));
        }
      }
  auto loss = [&](int h, double by) {
    std::vector<double> moved = sinks;
    moved[size_t(h)] += by;
    AttnRefOptions o;
    o.sinks = &moved;
    const AttnRef r = attn_reference(s, q, k, v, dout, pos, pos, false, o);
    double l = 0;
    for (size_t x = 0; x < r.o.size(); ++x) l += r.o[x] * dout[x];
    return l;
  };
  REQUIRE(sunk.dsinks.size() == 4);
  for (int h = 0; h < 4; ++h) {
    const double fd = (loss(h, 1e-5) - loss(h, -1e-5)) / 2e-5;
    CHECK(sunk.dsinks[size_t(h)] == Approx(fd).epsilon(1e-6).margin(1e-9));
    CHECK(sunk.dsinks[size_t(h)] != 0.0);
  }
  AttnRef sum;
  for (int part = 0; part < 3; ++part) {
    AttnRefOptions o = with;
    o.part = part;
    o.parts = 3;
    const AttnRef r = attn_reference(s, q, k, v, dout, pos, pos, true, o);
    auto add = [](std::vector<double>& a, const std::vector<double>& x) {
      if (a.empty()) a.assign(x.size(), 0.0);
      for (size_t i = 0; i < x.size(); ++i) a[i] += x[i];
    };
    add(sum.o, r.o);
    add(sum.dq, r.dq);
    add(sum.dk, r.dk);
    add(sum.dv, r.dv);
    add(sum.dsinks, r.dsinks);
  }
  CHECK(test::compare(sum.o, sunk.o).ok(1e-14));
  CHECK(test::compare(sum.dq, sunk.dq).ok(1e-14));
  CHECK(test::compare(sum.dk, sunk.dk).ok(1e-14));
  CHECK(test::compare(sum.dv, sunk.dv).ok(1e-14));
  CHECK(test::compare(sum.dsinks, sunk.dsinks).ok(1e-14));
}
