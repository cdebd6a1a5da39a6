// fp8 e4m3 (kernels/float8.h) against references written from the format's definition, not from
// the bit tricks: the 254 finite values enumerated from sign, exponent and mantissa; narrowing as
// "the nearest of them, ties to the even code, saturated at 448" searched by brute force over
// random floats, every midpoint and the edges; and the power-of-two scales by their definitions
// (largest 2^k with amax * 2^k <= 448; MXFP8's 2^(8 - floor(log2 amax))).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "kernels/float16.h"
#include "kernels/float8.h"

using namespace cpbench;

namespace {

// The value of code c from the definition: (-1)^s * 2^(e-7) * (1 + m/8), subnormal 2^-6 * m/8.
double defined_value(int c) {
  const int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s ? -mag : mag;
}
bool is_nan_code(int c) { return (c & 0x7f) == 0x7f; }

// Nearest finite code by search; ties to the even code (mantissa LSB 0); beyond 448 saturates.
int nearest_code(float x) {
  if (std::isnan(x)) return -1;
  const bool neg = std::signbit(x);
  const double a = std::fabs(double(x));
  if (a >= 448.0) return (neg ? 0x80 : 0) | 0x7e;
  int best = 0;
  double bd = a;
  for (int c = 1; c <= 0x7e; ++c) {
    const double dd = std::fabs(defined_value(c) - a);
    if (dd < bd || (dd == bd && (c & 1) == 0 && (best & 1) == 1)) {
      best = c;
      bd = dd;
    }
  }
  return (neg ? 0x80 : 0) | best;
}

}  // namespace

TEST_CASE("e4m3: every code decodes to its defined value and round-trips", "[fp8][convert]") {
  for (int c = 0; c < 256; ++c) {
    INFO("code " << c);
    const float v = e4m3_to_f32(uint8_t(c));
    if (is_nan_code(c)) {
      CHECK(std::isnan(v));
      CHECK(is_nan_code(f32_to_e4m3(v)));
      continue;
    }
    CHECK(double(v) == defined_value(c));
    CHECK(int(f32_to_e4m3(v)) == c);  // -0 keeps its sign bit
  }
  CHECK(e4m3_to_f32(0x7e) == 448.0f);
  CHECK(e4m3_to_f32(0x01) == std::ldexp(1.0f, -9));
  CHECK(e4m3_to_f32(0x08) == std::ldexp(1.0f, -6));
}

TEST_CASE("e4m3: narrowing = the nearest value, ties to even, saturating", "[fp8][convert]") {
  std::vector<float> xs;
  for (int c = 0; c < 0x7e; ++c) {  // every midpoint and its neighbours, both signs
    const float mid = float((defined_value(c) + defined_value(c + 1)) / 2);
    for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1000.0f)}) {
      xs.push_back(x);
      xs.push_back(-x);
    }
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> ex(-14.0f, 10.0f);
  for (int i = 0; i < 20000; ++i) xs.push_back((i & 1 ? -1.0f : 1.0f) * std::exp2(ex(rng)));
  for (float x : {0.0f, -0.0f, 447.9f, 448.0f, 464.0f, 1e6f, std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(), std::ldexp(1.0f, -10), std::ldexp(1.0f, -30)})
    xs.push_back(x);
  int bad = 0;
  for (float x : xs) {
    const int got = f32_to_e4m3(x), want = nearest_code(x);
    if (got != want && ++bad <= 5) FAIL_CHECK("x=" << x << " got code " << got << " want " << want);
  }
  CHECK(bad == 0);
  CHECK(is_nan_code(f32_to_e4m3(std::nanf(""))));
  CHECK(round_p_e4m3(1.0f) == 1.0f);  // 2^8 is exact
  CHECK(round_p_e4m3(std::ldexp(1.0f, -17)) == std::ldexp(1.0f, -17));  // 2^-9 after the offset: kept
  CHECK(round_p_e4m3(std::ldexp(1.0f, -19)) == 0.0f);  // below half of 2^-9 after the offset: gone
}

TEST_CASE("e4m3 quantization: power-of-two scales per tensor and per 32-block", "[fp8][quantize]") {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(256);
  for (size_t i = 0; i < x.size(); ++i) x[i] = nd(rng) * (i < 32 ? 50.0f : i < 64 ? 1e-5f : 1.0f);
  x[70] = std::numeric_limits<float>::quiet_NaN();  // poison: kept, and no part of an amax

  for (Fp8Scaling sc : {Fp8Scaling::tensor, Fp8Scaling::block}) {
    std::vector<float> y = x;
    quantize_e4m3(y.data(), int64_t(y.size()), sc);
    const int64_t blk = sc == Fp8Scaling::block ? kMxBlock : int64_t(x.size());
    for (int64_t b0 = 0; b0 < int64_t(x.size()); b0 += blk) {
      double amax = 0;
      for (int64_t i = b0; i < b0 + blk; ++i)
        if (std::isfinite(x[size_t(i)])) amax = std::max(amax, double(std::fabs(x[size_t(i)])));
      // The definitions: the largest 2^k with amax 2^k <= 448, or 2^(8 - floor(log2 amax)).
      int k = sc == Fp8Scaling::block ? 8 - int(std::floor(std::log2(amax))) : 0;
      if (sc == Fp8Scaling::tensor) {
        k = -200;
        while (amax * std::ldexp(1.0, k + 1) <= 448.0) ++k;
      }
      const double m = std::ldexp(1.0, k);
      for (int64_t i = b0; i < b0 + blk; ++i) {
        const float xi = x[size_t(i)], yi = y[size_t(i)];
        INFO("scaling " << int(sc) << " i " << i << " x " << xi << " y " << yi << " k " << k);
        if (std::isnan(xi)) {
          CHECK(std::isnan(yi));
          continue;
        }
        CHECK(double(yi) == double(e4m3_to_f32(nearest_code(float(xi * m)))) / m);
        CHECK(bf16_to_f32(f32_to_bf16(yi)) == yi);  // bf16 holds it exactly
      }
    }
  }
  // A first block 5e6 times larger than the second leaves the second below e4m3's smallest subnormal
  // under one tensor scale (e4m3 spans 2^-9 .. 448, about 2^17), not under its own block scale.
  std::vector<float> t = x, b = x;
  quantize_e4m3(t.data(), int64_t(t.size()), Fp8Scaling::tensor);
  quantize_e4m3(b.data(), int64_t(b.size()), Fp8Scaling::block);
  double et = 0, eb = 0;
  for (size_t i = 32; i < 64; ++i) {
    et += std::fabs(double(t[i]) - x[i]);
    eb += std::fabs(double(b[i]) - x[i]);
  }
  CHECK(eb < et / 10);
  // Zero and tiny blocks keep their values (multiplier 1; at most 2^127).
  std::vector<float> z(32, 0.0f);
  quantize_e4m3(z.data(), 32, Fp8Scaling::block);
  CHECK(z == std::vector<float>(32, 0.0f));
  CHECK(e4m3_block_multiplier(std::ldexp(1.0f, -140)) == std::ldexp(1.0f, 127));
  CHECK(e4m3_tensor_multiplier(0.0f) == 1.0f);
}

TEST_CASE("e4m3 encoding (--comm-dtype fp8): codes then E8M0 scales, decoded = quantized", "[fp8][codec]") {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (Fp8Scaling sc : {Fp8Scaling::tensor, Fp8Scaling::block})
    for (int64_t n : {int64_t(0), int64_t(1), int64_t(31), int64_t(32), int64_t(96), int64_t(101)}) {
      INFO("scaling " << int(sc) << " n " << n);
      std::vector<float> x(static_cast<size_t>(n));
      for (float& v : x) v = nd(rng) * (sc == Fp8Scaling::block ? 1.0f : 1e-3f);
      const int64_t scales = n == 0 ? 0 : sc == Fp8Scaling::block ? (n + 31) / 32 : 1;
      REQUIRE(e4m3_encoded_bytes(n, sc) == n + scales);
      std::vector<uint8_t> enc(static_cast<size_t>(n + scales), 0xee);
      encode_e4m3(x.data(), n, sc, enc.data());
      std::vector<float> back(x.size()), q = x;
      decode_e4m3(enc.data(), n, sc, back.data());
      quantize_e4m3(q.data(), n, sc);
      CHECK(back == q);
      // each scale byte is the E8M0 exponent of 1/multiplier of its block's amax, by definition
      for (int64_t b = 0; b < scales; ++b) {
        const int64_t b0 = sc == Fp8Scaling::block ? b * 32 : 0, len = sc == Fp8Scaling::block ? std::min<int64_t>(32, n - b0) : n;
        const float m = sc == Fp8Scaling::block ? e4m3_block_multiplier(finite_amax(&x[size_t(b0)], len))
                                                : e4m3_tensor_multiplier(finite_amax(x.data(), len));
        CHECK(std::ldexp(1.0f, int(enc[size_t(n + b)]) - 127) * m == 1.0f);
        for (int64_t i = b0; i < b0 + len; ++i) CHECK(int(enc[size_t(i)]) == nearest_code(x[size_t(i)] * m));
      }
    }
}
