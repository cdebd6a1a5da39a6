// The CPU backend's bf16 and fp16 tensors (DESIGN "Rounding points"): the conversions (round to
// nearest even, NaN/Inf, overflow, fp16 subnormals), the element-wise ops and GEMMs against the
// fp32 kernels on the widened inputs rounded once, and the attention emulation against the scalar
// reference of tests/unit/test_lowp_ref.h BIT FOR BIT (forward, decode, delta, backward, merge;
// causal and not, GQA, layouts and masks; 1 and 3 threads), plus a float64 sanity bound so that
// kernel and reference cannot share a gross error. Outputs are poisoned with NaN before each
// kernel runs; backward accumulators start from non-zero data.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/float16.h"
#include "tests/unit/test_kernels_ref.h"
#include "tests/unit/test_lowp_ref.h"

using namespace cpbench;
using cpbench::test::randn;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// One 16-bit format: its dtype, conversions, and unit roundoff (half an ulp at 1: 2^-8, 2^-11).
struct Fmt {
  DType dt;
  const char* name;
  uint16_t (*narrow)(float);
  float (*widen)(uint16_t);
  test::lowp::Round rnd;
  uint16_t max_finite, inf;
  double u;
};
const Fmt kBf16{DType::bf16, "bf16", f32_to_bf16, bf16_to_f32, test::lowp::round_bf16, 0x7f7f, 0x7f80, 1.0 / 256};
const Fmt kFp16{DType::f16, "fp16", f32_to_f16, f16_to_f32, test::lowp::round_fp16, 0x7bff, 0x7c00, 1.0 / 2048};
const Fmt kFormats[] = {kBf16, kFp16};

bool is_nan16(const Fmt& f, uint16_t h) { return (h & 0x7fffu) > f.inf; }

std::vector<float> rounded(const Fmt& f, std::vector<float> v) {
  for (float& x : v) x = f.rnd(x);
  return v;
}

// Bit-for-bit equality of two float vectors; the message names the first difference.
std::string bit_diff(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return "sizes " + std::to_string(got.size()) + " vs " + std::to_string(want.size());
  int64_t n = 0, first = -1;
  for (size_t i = 0; i < got.size(); ++i)
    if (f32_bits(got[i]) != f32_bits(want[i])) {
      if (first < 0) first = int64_t(i);
      ++n;
    }
  if (n == 0) return "";
  std::ostringstream os;
  os.precision(9);
  os << n << " of " << got.size() << " differ; first [" << first << "] got " << got[size_t(first)] << " want "
     << want[size_t(first)];
  return os.str();
}
#define CHECK_BITS(got, want)                     \
  do {                                            \
    const std::string d_ = bit_diff(got, want);   \
    INFO(#got << ": " << d_);                     \
    CHECK(d_.empty());                            \
  } while (0)

Tensor make(Backend& be, DType dt, std::vector<int64_t> shape) { return be.alloc(std::move(shape), dt, MemKind::activations); }
Tensor upload(Backend& be, DType dt, const std::vector<float>& h, std::vector<int64_t> shape) {
  Tensor t = make(be, dt, std::move(shape));
  be.upload(h, t);
  return t;
}

}  // namespace

// ---- conversions ----------------------------------------------------------------------------------

TEST_CASE("bf16/fp16: every value round-trips, NaN stays NaN of its sign", "[lowp][convert]") {
  for (const Fmt& f : kFormats) {
    INFO(f.name);
    int64_t bad = 0;
    for (uint32_t h = 0; h < 65536; ++h) {
      const float x = f.widen(uint16_t(h));
      const uint16_t back = f.narrow(x);
      if (is_nan16(f, uint16_t(h)))
        bad += !(std::isnan(x) && is_nan16(f, back) && (back & 0x8000u) == (h & 0x8000u));
      else
        bad += back != h;
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("bf16/fp16: round to nearest, ties to even, at every midpoint (subnormals included)", "[lowp][convert]") {
  for (const Fmt& f : kFormats) {
    INFO(f.name);
    int64_t bad = 0;
    for (uint32_t sign = 0; sign < 2; ++sign)
      for (uint32_t mag = 0; mag < f.max_finite; ++mag) {  // mag and mag + 1 both finite
        const uint16_t a = uint16_t(sign << 15 | mag), b = uint16_t(sign << 15 | (mag + 1));
        const float xa = f.widen(a), xb = f.widen(b);
        const float mid = xa + (xb - xa) / 2;  // exact: one more bit than the format holds (no overflow)
        const uint16_t even = (mag & 1u) ? b : a;
        bad += f.narrow(mid) != even;
        bad += f.narrow(std::nextafter(mid, xa)) != a;
        bad += f.narrow(std::nextafter(mid, xb)) != b;
      }
    CHECK(bad == 0);
  }
}

TEST_CASE("bf16/fp16: infinities, overflow to inf, hand-checked values", "[lowp][convert]") {
  for (const Fmt& f : kFormats) {
    INFO(f.name);
    const float mx = f.widen(f.max_finite);
    const float half_ulp = mx - f.widen(uint16_t(f.max_finite - 1));  // the top binade's ulp ...
    const float tie = mx + half_ulp / 2;                            // ... half of it: rounds to inf (max is odd)
    CHECK(f.narrow(tie) == f.inf);
    CHECK(f.narrow(std::nextafter(tie, 0.0f)) == f.max_finite);
    CHECK(f.narrow(-tie) == (f.inf | 0x8000u));
    CHECK(f.narrow(std::numeric_limits<float>::max()) == f.inf);
    CHECK(f.narrow(kInf) == f.inf);
    CHECK(f.narrow(-kInf) == (f.inf | 0x8000u));
    CHECK(std::isinf(f.widen(f.inf)));
    CHECK(f.narrow(0.0f) == 0);
    CHECK(f.narrow(-0.0f) == 0x8000u);
    CHECK(f.narrow(1.0f) == (f.dt == DType::bf16 ? 0x3f80u : 0x3c00u));
  }
  CHECK(f32_to_f16(65504.0f) == 0x7bff);
  CHECK(f32_to_f16(65519.0f) == 0x7bff);
  CHECK(f32_to_f16(65520.0f) == 0x7c00);
  CHECK(f32_to_bf16(1.0f + 1.0f / 256) == 0x3f80);           // tie: to even (1.0)
  CHECK(f32_to_bf16(1.0f + 3.0f / 256) == 0x3f82);           // tie: to even (1 + 2/128)
  // fp16 subnormals: units of 2^-24; 2^-25 is a tie between 0 and the smallest subnormal.
  CHECK(f32_to_f16(std::ldexp(1.0f, -24)) == 0x0001);
  CHECK(f32_to_f16(std::ldexp(1.0f, -25)) == 0x0000);
  CHECK(f32_to_f16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)) == 0x0001);
  CHECK(f32_to_f16(std::ldexp(3.0f, -25)) == 0x0002);
  CHECK(f32_to_f16(std::ldexp(1023.5f, -24)) == 0x0400);     // rounds up into the smallest normal
  CHECK(f16_to_f32(0x03ff) == std::ldexp(1023.0f, -24));
  CHECK(f32_to_f16(std::ldexp(1.0f, -30)) == 0x0000);
  CHECK(f32_to_f16(-std::ldexp(1.0f, -24)) == 0x8001);
}

#if defined(__FLT16_MANT_DIG__)
TEST_CASE("fp16: the conversion agrees with the compiler's _Float16 on random floats", "[lowp][convert]") {
  // An independent implementation (GCC/Clang software conversion), over the fp16 range and beyond.
  std::mt19937_64 g(5);
  std::uniform_real_distribution<float> e(-30.0f, 17.0f);
  int64_t bad = 0;
  for (int i = 0; i < 200000; ++i) {
    const float x = std::ldexp(1.0f + float(g() % 8388608) / 8388608.0f, int(std::floor(e(g)))) * ((g() & 1) ? -1.0f : 1.0f);
    const _Float16 h = static_cast<_Float16>(x);
    uint16_t hb;
    std::memcpy(&hb, &h, 2);
    bad += hb != f32_to_f16(x);
  }
  CHECK(bad == 0);
}
#endif

// ---- tensors and element-wise ops ---------------------------------------------------------------

TEST_CASE("cpu bf16/fp16 tensors: 2 bytes per element, upload rounds, download widens", "[lowp][cpu]") {
  for (const Fmt& f : kFormats) {
    INFO(f.name);
    CpuBackend be(2);
    be.set_poison(true);
    Tensor t = make(be, f.dt, {7, 9});
    CHECK(t.bytes() == 7 * 9 * 2);
    CHECK(be.mem().stats().live[1] == 7 * 9 * 2);
    const auto dl = be.download(t);
    CHECK(std::all_of(dl.begin(), dl.end(), [](float x) { return std::isnan(x); }));  // poisoned
    std::vector<float> h = randn(63, 4, 3.0f);
    h[0] = 1e30f;  // overflows fp16, not bf16
    h[1] = -kInf;
    h[2] = std::numeric_limits<float>::quiet_NaN();
    h[3] = 1e-6f;  // an fp16 subnormal
    be.upload(h, t);
    const auto back = be.download(t);
    for (size_t i = 0; i < h.size(); ++i) {
      if (std::isnan(h[i])) CHECK(std::isnan(back[i]));
      else CHECK(f32_bits(back[i]) == f32_bits(f.rnd(h[i])));
    }
  }
}

TEST_CASE("cpu bf16/fp16 element-wise ops = the fp32 kernel on the stored values, rounded once", "[lowp][cpu]") {
  for (const Fmt& f : kFormats) {
    INFO(f.name);
    CpuBackend be(3);
    be.set_poison(true);
    const int64_t rows = 37, D = 48;
    const auto a_h = rounded(f, randn(size_t(rows * D), 11)), b_h = rounded(f, randn(size_t(rows * D), 12)),
               w_h = rounded(f, randn(size_t(D), 13, 0.3f)), g_h = rounded(f, randn(size_t(rows * D), 14));
    // The same values in an fp32 and a 16-bit tensor.
    auto both = [&](const std::vector<float>& h) {
      return std::make_pair(upload(be, DType::f32, h, {rows, D}), upload(be, f.dt, h, {rows, D}));
    };
    auto [a32, a16] = both(a_h);
    auto [b32, b16] = both(b_h);
    auto [g32, g16] = both(g_h);
    Tensor w32 = upload(be, DType::f32, w_h, {D}), w16 = upload(be, f.dt, w_h, {D});
    auto out = [&](DType dt) { return make(be, dt, {rows, D}); };
    auto expect_rounded = [&](const Tensor& t16, const Tensor& t32) {
      return bit_diff(be.download(t16), rounded(f, be.download(t32)));
    };

    Tensor o32 = out(DType::f32), o16 = out(f.dt);
    be.add(o32, a32, b32);
    be.add(o16, a16, b16);
    CHECK(expect_rounded(o16, o32).empty());
    CHECK_THROWS_WITH(be.add(o16, a16, b32), Catch::Contains("add") && Catch::Contains("dtype"));

    be.swiglu_fwd(a32, b32, o32);
    be.swiglu_fwd(a16, b16, o16);
    CHECK(expect_rounded(o16, o32).empty());
    Tensor da32 = out(DType::f32), db32 = out(DType::f32), da16 = out(f.dt), db16 = out(f.dt);
    be.swiglu_bwd(a32, b32, g32, da32, db32);
    be.swiglu_bwd(a16, b16, g16, da16, db16);
    CHECK(expect_rounded(da16, da32).empty());
    CHECK(expect_rounded(db16, db32).empty());

    Tensor r32 = make(be, DType::f32, {rows}), r16 = make(be, DType::f32, {rows});
    be.rmsnorm_fwd(a32, w32, 1e-5f, o32, r32);
    be.rmsnorm_fwd(a16, w16, 1e-5f, o16, r16);
    CHECK(expect_rounded(o16, o32).empty());
    CHECK(bit_diff(be.download(r16), be.download(r32)).empty());  // rstd stays fp32
    Tensor dw32 = make(be, DType::f32, {D}), dw16 = make(be, DType::f32, {D});
    be.upload(randn(size_t(D), 15), dw32);
    be.upload(be.download(dw32), dw16);
    be.rmsnorm_bwd(a32, w32, r32, g32, da32, dw32);
    be.rmsnorm_bwd(a16, w16, r16, g16, da16, dw16);
    CHECK(expect_rounded(da16, da32).empty());
    CHECK(bit_diff(be.download(dw16), be.download(dw32)).empty());  // dw accumulates in fp32

    // RoPE in place on 2 heads of d = 16 inside rows of pitch 48, then its inverse.
    const Positions pos = Positions::two(5, 20, 300, 17);
    for (bool inverse : {false, true}) {
      be.rope(a32, 1, rows, 2, 16, D, pos, 10000.0, inverse);
      be.rope(a16, 1, rows, 2, 16, D, pos, 10000.0, inverse);
      CHECK(expect_rounded(a16, a32).empty());
      be.upload(be.download(a16), a32);  // continue from the same stored values
    }

    be.fill(o16, 0.1f);
    CHECK(bit_diff(be.download(o16), std::vector<float>(size_t(rows * D), f.rnd(0.1f))).empty());
    // convert: fp32 -> 16 bit rounds, 16 bit -> fp32 is exact, 16 bit -> the other 16-bit format.
    const auto wide = randn(size_t(rows * D), 16, 5.0f);
    be.upload(wide, o32);
    be.convert(o16, o32);
    CHECK(bit_diff(be.download(o16), rounded(f, wide)).empty());
    be.convert(o32, o16);
    CHECK(bit_diff(be.download(o32), rounded(f, wide)).empty());
    const Fmt& other = f.dt == DType::bf16 ? kFp16 : kBf16;
    Tensor x16 = make(be, other.dt, {rows, D});
    be.convert(x16, o16);
    CHECK(bit_diff(be.download(x16), rounded(other, rounded(f, wide))).empty());
    // copy_2d moves 2-byte elements with pitches.
    Tensor c16 = make(be, f.dt, {4, 5});
    be.copy_2d(c16, 5, a16, D, 4, 3);
    const auto ch = be.download(c16), ah = be.download(a16);
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 5; ++c) {
        if (c < 3) CHECK(f32_bits(ch[size_t(r * 5 + c)]) == f32_bits(ah[size_t(r * D + c)]));
        else CHECK(std::isnan(ch[size_t(r * 5 + c)]));
      }
  }
}

TEST_CASE("cpu bf16/fp16 gemm = the fp32 gemm of the stored values, rounded once", "[lowp][cpu][gemm]") {
  for (const Fmt& f : kFormats) {
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (int c32 = 0; c32 < 2; ++c32)
          for (float beta : {0.0f, 0.5f}) {
            const int64_t m = 37, n = 29, k = 53, pad = 3;
            INFO(f.name << " trans_a=" << ta << " trans_b=" << tb << " C fp32=" << c32 << " beta=" << beta);
            CpuBackend be(2);
            be.set_poison(true);
            const int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
            const int64_t lda = ac + pad, ldb = bc + pad, ldc = n + pad;
            const auto A = rounded(f, randn(size_t(ar * lda), 21)), B = rounded(f, randn(size_t(br * ldb), 22));
            const DType cdt = c32 ? DType::f32 : f.dt;
            auto C0 = randn(size_t(m * ldc), 23);
            if (!c32) C0 = rounded(f, C0);
            Tensor A16 = upload(be, f.dt, A, {ar, lda}), B16 = upload(be, f.dt, B, {br, ldb});
            Tensor A32 = upload(be, DType::f32, A, {ar, lda}), B32 = upload(be, DType::f32, B, {br, ldb});
            Tensor C = upload(be, cdt, C0, {m, ldc}), Cref = upload(be, DType::f32, C0, {m, ldc});
            be.gemm(ta, tb, m, n, k, 0.7f, A16, lda, B16, ldb, beta, C, ldc);
            be.gemm(ta, tb, m, n, k, 0.7f, A32, lda, B32, ldb, beta, Cref, ldc);
            auto want = be.download(Cref);
            if (!c32) want = rounded(f, want);
            // Pitch padding of C is not touched: want holds C0 there too.
            CHECK_BITS(be.download(C), want);
          }
  }
}

// ---- attention ------------------------------------------------------------------------------------

namespace {

struct Case {
  std::string name;
  AttnShape s;
  Positions qpos, kpos;
};

DocStarts docs(std::vector<int64_t> starts) {
  return std::make_shared<const std::vector<int64_t>>(std::move(starts));
}

using test::attn_case_shape;

// Shapes that are not multiples of the tiles (64 keys, 64 query rows), several tiles per row.
std::vector<Case> cases() {
  using P = Positions;
  std::vector<Case> v;
  v.push_back({"causal MHA", attn_case_shape(1, 150, 150, 2, 2, 64, true), P::contiguous(0, 150), P::contiguous(0, 150)});
  v.push_back({"non-causal MHA", attn_case_shape(1, 130, 150, 2, 2, 32, false), P::contiguous(0, 130), P::contiguous(0, 150)});
  v.push_back({"GQA 8/2 B2 causal", attn_case_shape(2, 100, 100, 8, 2, 32, true), P::contiguous(0, 100), P::contiguous(0, 100)});
  v.push_back({"MQA non-causal d24", attn_case_shape(2, 37, 140, 4, 1, 24, false), P::contiguous(0, 37), P::contiguous(0, 140)});
  v.push_back({"zigzag cross block", attn_case_shape(1, 150, 150, 2, 2, 64, true), P::two(0, 75, 225, 75), P::two(75, 75, 150, 75)});
  v.push_back({"striped", attn_case_shape(1, 100, 90, 2, 1, 32, true), P::strided(1, 4, 100), P::strided(2, 4, 90)});
  v.push_back({"window + docs causal", attn_case_shape(1, 200, 200, 2, 2, 40, true, 30, docs({0, 70, 71, 150})),
               P::contiguous(0, 200), P::contiguous(0, 200)});
  v.push_back({"docs non-causal, first document's rows see nothing", attn_case_shape(1, 100, 100, 2, 2, 32, false, 0, docs({0, 40, 120})),
               P::contiguous(0, 100), P::contiguous(50, 100)});
  v.push_back({"no row sees a key", attn_case_shape(1, 64, 80, 2, 2, 32, true), P::contiguous(0, 64), P::contiguous(500, 80)});
  v.push_back({"decode step: one query row, GQA", attn_case_shape(2, 1, 300, 4, 2, 64, true), P::contiguous(299, 1), P::contiguous(0, 300)});
  // --uneven-heads: 5 query heads starting 1 into a group of 4 (kv heads serve 3 and 2 of them)
  v.push_back({"head slice off the groups", attn_case_shape(1, 60, 60, 5, 2, 32, true, 0, nullptr, 4, 1),
               P::contiguous(0, 60), P::contiguous(0, 60)});
  v.push_back({"decode step on a head slice", attn_case_shape(1, 1, 90, 3, 2, 32, true, 0, nullptr, 2, 1),
               P::contiguous(89, 1), P::contiguous(0, 90)});
  v.push_back({"decode step past a window", attn_case_shape(1, 1, 200, 2, 2, 32, true, 90), P::contiguous(250, 1), P::contiguous(0, 200)});
  // Two head dims (MLA): expanded heads (d_v < d) and the absorbed decode step (MQA, d_v < d).
  v.push_back({"d_v 32 < d 48, window", attn_case_shape(1, 100, 120, 2, 2, 48, true, 70, nullptr, 0, 0, 32),
               P::contiguous(20, 100), P::contiguous(0, 120)});
  v.push_back({"absorbed decode step: MQA d 72 d_v 64", attn_case_shape(2, 1, 130, 4, 1, 72, true, 0, nullptr, 0, 0, 64),
               P::contiguous(129, 1), P::contiguous(0, 130)});
  v.push_back({"explicit scale, d256", [] { auto s = attn_case_shape(1, 40, 70, 2, 1, 256, true); s.scale = 0.3f; return s; }(),
               P::contiguous(30, 40), P::contiguous(0, 70)});
  return v;
}

std::vector<int64_t> qshape(const AttnShape& s) { return {s.B, s.nq, s.hq, s.d}; }
std::vector<int64_t> kshape(const AttnShape& s) { return {s.B, s.nk, s.hk, s.d}; }
std::vector<int64_t> oshape(const AttnShape& s) { return {s.B, s.nq, s.hq, s.vdim()}; }  // o, dout
std::vector<int64_t> vshape(const AttnShape& s) { return {s.B, s.nk, s.hk, s.vdim()}; }  // v, dv
std::vector<int64_t> lshape(const AttnShape& s) { return {s.B, s.hq, s.nq}; }

// Forward, delta and backward of one case at one format and thread count, against the scalar
// emulation reference bit for bit, and against the float64 reference within the rounding's size.
void check_case(const Fmt& f, const Case& c, int threads, uint64_t seed) {
  const AttnShape& s = c.s;
  CpuBackend be(threads);
  be.set_poison(true);
  const auto q = rounded(f, randn(size_t(s.B * s.nq * s.hq * s.d), seed + 1, 1.5f));
  const auto k = rounded(f, randn(size_t(s.B * s.nk * s.hk * s.d), seed + 2, 1.5f));
  const auto v = rounded(f, randn(size_t(s.B * s.nk * s.hk * s.vdim()), seed + 3));
  const auto dout = rounded(f, randn(size_t(s.B * s.nq * s.hq * s.vdim()), seed + 4));
  Tensor tq = upload(be, f.dt, q, qshape(s)), tk = upload(be, f.dt, k, kshape(s)), tv = upload(be, f.dt, v, vshape(s));
  Tensor tdo = upload(be, f.dt, dout, oshape(s));
  Tensor o = make(be, f.dt, oshape(s)), lse = make(be, DType::f32, lshape(s));
  be.attn_fwd(s, tq, tk, tv, c.qpos, c.kpos, o, lse);
  const auto ref = test::lowp::attn_fwd(s, q, k, v, c.qpos, c.kpos, f.rnd, cpu::kLowpKeyTile);
  const auto o_h = be.download(o), lse_h = be.download(lse);
  CHECK_BITS(o_h, ref.o);
  CHECK_BITS(lse_h, ref.lse);

  Tensor delta = make(be, DType::f32, lshape(s));
  be.attn_bwd_delta(s, o, tdo, delta);
  const auto delta_h = be.download(delta);
  CHECK_BITS(delta_h, test::lowp::attn_bwd_delta(s, ref.o, dout));

  // Accumulators start from random fp32 values.
  auto dq_h = randn(q.size(), seed + 5), dk_h = randn(k.size(), seed + 6), dv_h = randn(v.size(), seed + 7);
  Tensor dq = upload(be, DType::f32, dq_h, qshape(s)), dk = upload(be, DType::f32, dk_h, kshape(s)),
         dv = upload(be, DType::f32, dv_h, vshape(s));
  const auto dq0 = dq_h, dk0 = dk_h, dv0 = dv_h;
  be.attn_bwd(s, tq, tk, tv, tdo, lse, delta, c.qpos, c.kpos, dq, dk, dv);
  test::lowp::attn_bwd(s, q, k, v, dout, ref.lse, delta_h, c.qpos, c.kpos, f.rnd, dq_h, dk_h, dv_h);
  const auto dq_g = be.download(dq), dk_g = be.download(dk), dv_g = be.download(dv);
  CHECK_BITS(dq_g, dq_h);
  CHECK_BITS(dk_g, dk_h);
  CHECK_BITS(dv_g, dv_h);

  // Sanity against float64 attention on the same stored inputs: o within its rounding (P ~ u/2
  // relative, o ~ u/2), the gradients within a few u (the rounded P and dS); lse is unrounded.
  const auto r64 = test::attn_reference(s, test::to_double(q), test::to_double(k), test::to_double(v),
                                        test::to_double(dout), c.qpos, c.kpos, true);
  auto minus = [](const std::vector<float>& a, const std::vector<float>& b) {
    std::vector<double> r(a.size());
    for (size_t i = 0; i < a.size(); ++i) r[i] = double(a[i]) - double(b[i]);
    return r;
  };
  const auto co = test::compare(o_h, r64.o), cl = test::compare(lse_h, r64.lse);
  const auto cq = test::compare(minus(dq_g, dq0), r64.dq), ck = test::compare(minus(dk_g, dk0), r64.dk),
             cv = test::compare(minus(dv_g, dv0), r64.dv);
  INFO("vs float64: o " << co.str() << " lse " << cl.str() << " dq " << cq.str() << " dk " << ck.str() << " dv "
                        << cv.str());
  CHECK(co.ok(2 * f.u));
  CHECK(cl.ok(1e-5));
  CHECK(cq.ok(4 * f.u));
  CHECK(ck.ok(4 * f.u));
  CHECK(cv.ok(2 * f.u));
}

}  // namespace

TEST_CASE("cpu bf16/fp16 attention = the emulation reference, bit for bit", "[lowp][attention]") {
  const auto all = cases();
  for (const Fmt& f : kFormats)
    for (int threads : {1, 3})
      for (size_t i = 0; i < all.size(); ++i)
        DYNAMIC_SECTION(f.name << " threads " << threads << ": " << all[i].name) {
          check_case(f, all[i], threads, 500 + 13 * i);
        }
}

// --dtype fp8 (the forward only): inputs quantized to e4m3 (block scales where d and d_v are
// multiples of 32, else a tensor scale) in bf16 tensors, P rounded to e4m3 with the 2^8 offset at
// every nq: bit for bit against the reference, within e4m3's rounding of float64 attention on the
// same quantized inputs, and attn_bwd refused.
TEST_CASE("cpu fp8 attention forward = the emulation reference, bit for bit", "[lowp][attention][fp8]") {
  const auto all = cases();
  for (int threads : {1, 3})
    for (size_t i = 0; i < all.size(); ++i)
      DYNAMIC_SECTION("threads " << threads << ": " << all[i].name) {
        const AttnShape& s = all[i].s;
        CpuBackend be(threads);
        be.set_poison(true);
        be.set_fp8_attention(true);
        const uint64_t seed = 900 + 7 * i;
        auto q = randn(size_t(s.B * s.nq * s.hq * s.d), seed + 1, 1.5f);
        auto k = randn(size_t(s.B * s.nk * s.hk * s.d), seed + 2, 1.5f);
        auto v = randn(size_t(s.B * s.nk * s.hk * s.vdim()), seed + 3);
        Tensor tq = upload(be, DType::bf16, q, qshape(s)), tk = upload(be, DType::bf16, k, kshape(s)),
               tv = upload(be, DType::bf16, v, vshape(s));
        const bool block = s.d % kMxBlock == 0 && s.vdim() % kMxBlock == 0;
        const Fp8Scaling sc = block ? Fp8Scaling::block : Fp8Scaling::tensor;
        for (Tensor* t : {&tq, &tk, &tv}) be.quantize_fp8(*t, sc);
        // the backend's op = the header's function on the stored (bf16) values
        for (auto [t, h] : {std::pair{&tq, &q}, std::pair{&tk, &k}, std::pair{&tv, &v}}) {
          *h = rounded(kBf16, *h);
          quantize_e4m3(h->data(), int64_t(h->size()), sc);
          CHECK_BITS(be.download(*t), *h);
        }
        Tensor o = make(be, DType::bf16, oshape(s)), lse = make(be, DType::f32, lshape(s));
        be.attn_fwd(s, tq, tk, tv, all[i].qpos, all[i].kpos, o, lse);
        AttnShape s8 = s;
        s8.p_e4m3 = true;
        const auto ref = test::lowp::attn_fwd(s8, q, k, v, all[i].qpos, all[i].kpos, kBf16.rnd, cpu::kLowpKeyTile);
        const auto o_h = be.download(o), lse_h = be.download(lse);
        CHECK_BITS(o_h, ref.o);
        CHECK_BITS(lse_h, ref.lse);
        // Against float64 on the same quantized inputs: P's e4m3 rounding (u = 2^-4) dominates.
        const auto r64 = test::attn_reference(s, test::to_double(q), test::to_double(k), test::to_double(v),
                                              test::to_double(std::vector<float>(o_h.size(), 0.0f)), all[i].qpos,
                                              all[i].kpos, false);
        const auto co = test::compare(o_h, r64.o), cl = test::compare(lse_h, r64.lse);
        INFO("vs float64: o " << co.str() << " lse " << cl.str());
        CHECK(co.ok(1.0 / 16));
        CHECK(cl.ok(1e-5));
        Tensor delta = make(be, DType::f32, lshape(s)), dq = make(be, DType::f32, qshape(s)),
               dk = make(be, DType::f32, kshape(s)), dv = make(be, DType::f32, vshape(s));
        CHECK_THROWS_WITH(be.attn_bwd(s, tq, tk, tv, o, lse, delta, all[i].qpos, all[i].kpos, dq, dk, dv),
                          Catch::Contains("forward only"));
      }
  CpuBackend be(1);
  Tensor f = make(be, DType::f32, {2, 64}), b = make(be, DType::bf16, {2, 48});
  CHECK_THROWS_WITH(be.quantize_fp8(f, Fp8Scaling::tensor), Catch::Contains("bf16") && Catch::Contains("fp32"));
  CHECK_THROWS_WITH(be.quantize_fp8(b, Fp8Scaling::block), Catch::Contains("multiple") && Catch::Contains("48"));
}

TEST_CASE("cpu bf16/fp16 attention merge = the reference, bit for bit", "[lowp][attention][merge]") {
  AttnShape s = attn_case_shape(2, 30, 30, 4, 2, 24, true);
  const size_t no = size_t(s.B * s.nq * s.hq * s.d), nl = size_t(s.B * s.hq * s.nq);
  for (const Fmt& f : kFormats)
    for (int acc32 = 0; acc32 < 2; ++acc32) {  // a running o in the dtype, or fp32 as the ring keeps it
      INFO(f.name << " o_acc fp32=" << acc32);
      CpuBackend be(2);
      be.set_poison(true);
      const DType dt = acc32 ? DType::f32 : f.dt;
      auto oa = randn(no, 31), ob = randn(no, 32), la = randn(nl, 33, 2.0f), lb = randn(nl, 34, 2.0f);
      if (!acc32) {
        oa = rounded(f, oa);
        ob = rounded(f, ob);
      }
      // Rows with no key on one side or both: every third row's acc, every fifth row's block.
      for (size_t r = 0; r < nl; r += 3) la[r] = -kInf;
      for (size_t r = 0; r < nl; r += 5) lb[r] = -kInf;
      Tensor to_acc = upload(be, dt, oa, qshape(s)), to_blk = upload(be, dt, ob, qshape(s));
      Tensor tl_acc = upload(be, DType::f32, la, lshape(s)), tl_blk = upload(be, DType::f32, lb, lshape(s));
      be.attn_merge(s, to_acc, tl_acc, to_blk, tl_blk);
      test::lowp::attn_merge(s, oa, la, ob, lb, acc32 ? +[](float x) { return x; } : f.rnd);
      CHECK_BITS(be.download(to_acc), oa);
      CHECK_BITS(be.download(tl_acc), la);
    }
}
