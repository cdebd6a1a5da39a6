// fp8 e4m3 (the OCP 8-bit format FlashAttention-3 and TransformerEngine run attention's forward
// in) as bit patterns, its conversions from and to fp32, and the quantization of a tensor with
// power-of-two scales (--dtype fp8, DESIGN "Rounding points", fp8 bullet).
//
// e4m3 ("fn": finite only): 1 sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinities;
// S.1111.111 is NaN; the largest finite value 448 (1.75 * 2^8); normals down to 2^-6, subnormals
// in units of 2^-9. Narrowing rounds to nearest, ties to even, and SATURATES (a finite value or
// an infinity beyond 448 becomes +-448: CUDA's __nv_cvt_float_to_fp8 with __NV_SATFINITE, what
// the fp8 casts before attention use); NaN stays NaN.
//
// Scales are powers of two, so a value rounded to e4m3 and scaled back is held EXACTLY by a bf16
// tensor (at most 4 significant bits, an exponent well inside bf16's range): the run stores the
// dequantized values in its bf16 tensors, and a kernel's fp32 products of them equal an fp8
// GEMM's products times its descale factors bit for bit. Two granularities:
//   tensor: one multiplier 2^k per tensor, the largest with amax * 2^k <= 448 (current scaling
//           with power-of-two scales, the amax taken over the tensor this rank holds);
//   block:  one per 32 consecutive elements of a row (the OCP Microscaling MXFP8 format: a shared
//           E8M0 scale X = 2^(floor(log2 amax) - 8), elements x / X saturated to e4m3).
// Non-finite elements take no part in an amax (a poisoned, unwritten row stays NaN).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace cpbench {

constexpr float kE4m3Max = 448.0f;
constexpr int kMxBlock = 32;  // elements per MXFP8 scale block

inline float e4m3_to_f32(uint8_t c) {
  const bool neg = (c & 0x80u) != 0;
  const int exp = (c >> 3) & 0xf, man = c & 0x7;
  float v;
  if (exp == 0xf && man == 0x7) v = std::nanf("");
  else if (exp == 0) v = std::ldexp(float(man), -9);               // subnormal: man * 2^-9
  else v = std::ldexp(float(8 + man), exp - 7 - 3);                // (1 + man/8) * 2^(exp-7)
  return neg ? -v : v;
}

inline uint8_t f32_to_e4m3(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);  // NaN
  if (a >= 0x43e00000u) return static_cast<uint8_t>(sign | 0x7eu);  // >= 448 (and inf): saturate
  if (a < 0x3c800000u) {  // below the smallest normal 2^-6: units of 2^-9, ties to even
    float v;
    std::memcpy(&v, &a, 4);
    v *= 512.0f;  // exact: a power-of-two scale
    const int r0 = static_cast<int>(v);
    const float frac = v - float(r0);
    const int r = frac > 0.5f || (frac == 0.5f && (r0 & 1)) ? r0 + 1 : r0;  // 8 carries into exp 1
    return static_cast<uint8_t>(sign | r);
  }
  // Normal: rebias the exponent 127 -> 7, keep 3 mantissa bits, round the 20 dropped bits.
  uint32_t h = (a - (120u << 23)) >> 20;
  const uint32_t rest = a & 0xfffffu;
  if (rest > 0x80000u || (rest == 0x80000u && (h & 1u))) ++h;  // below 448: never reaches NaN
  return static_cast<uint8_t>(sign | h);
}

inline float round_e4m3(float x) { return e4m3_to_f32(f32_to_e4m3(x)); }

// FlashAttention-3's fp8 forward rounds P to e4m3 offset by 2^8 (its Max_offset: P = exp2(s - m + 8)
// in [0, 256], the row sum taken in fp32 and divided by 2^8 again), which keeps small
// probabilities out of e4m3's subnormals; the power-of-two offset cancels exactly.
inline float round_p_e4m3(float p) { return round_e4m3(p * 256.0f) * (1.0f / 256.0f); }

enum class Fp8Scaling { tensor, block };

// The largest power of two m <= 2^127 with amax * m <= 448 (amax > 0 finite); 1 otherwise.
inline float e4m3_tensor_multiplier(float amax) {
  if (!(amax > 0.0f) || !std::isfinite(amax)) return 1.0f;
  int k = std::ilogb(kE4m3Max) - std::ilogb(amax);  // within one of the answer
  while (std::ldexp(amax, k) > kE4m3Max) --k;
  while (std::ldexp(amax, k + 1) <= kE4m3Max) ++k;
  return std::ldexp(1.0f, k < 127 ? k : 127);  // (E8M0's range: a tiny amax keeps 2^127)
}

// MXFP8's multiplier 1/X = 2^(8 - floor(log2 amax)), at most 2^127 (amax > 0 finite); 1 otherwise.
inline float e4m3_block_multiplier(float amax) {
  if (!(amax > 0.0f) || !std::isfinite(amax)) return 1.0f;
  const int k = 8 - std::ilogb(amax);
  return std::ldexp(1.0f, k < 127 ? k : 127);  // E8M0 holds 2^-127 .. 2^127
}

inline float finite_amax(const float* x, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i)
    if (std::isfinite(x[i])) m = std::fabs(x[i]) > m ? std::fabs(x[i]) : m;
  return m;
}

// The encoded form of n values (a block in transit under --comm-dtype fp8): n e4m3 codes, then one
// scale byte per scale block (block: ceil(n / 32); tensor: one, none for n = 0), each the E8M0
// exponent e + 127 of the scale X = 2^e = 1 / multiplier (OCP MX's E8M0: 2^-127 .. 2^127).
inline int64_t e4m3_scale_bytes(int64_t n, Fp8Scaling scaling) {
  if (n == 0) return 0;
  return scaling == Fp8Scaling::block ? (n + kMxBlock - 1) / kMxBlock : 1;
}
inline int64_t e4m3_encoded_bytes(int64_t n, Fp8Scaling scaling) { return n + e4m3_scale_bytes(n, scaling); }

inline void encode_e4m3(const float* x, int64_t n, Fp8Scaling scaling, uint8_t* out) {
  const int64_t blk = scaling == Fp8Scaling::block ? kMxBlock : n;
  uint8_t* scales = out + n;
  for (int64_t b0 = 0; b0 < n; b0 += blk) {
    const int64_t len = n - b0 < blk ? n - b0 : blk;
    const float amax = finite_amax(x + b0, len);
    const float m = scaling == Fp8Scaling::block ? e4m3_block_multiplier(amax) : e4m3_tensor_multiplier(amax);
    for (int64_t i = b0; i < b0 + len; ++i) out[i] = f32_to_e4m3(x[i] * m);
    *scales++ = static_cast<uint8_t>(127 - std::ilogb(m));  // X = 1/m = 2^-ilogb(m)
  }
}

inline void decode_e4m3(const uint8_t* in, int64_t n, Fp8Scaling scaling, float* x) {
  const int64_t blk = scaling == Fp8Scaling::block ? kMxBlock : n;
  const uint8_t* scales = in + n;
  for (int64_t b0 = 0; b0 < n; b0 += blk) {
    const int64_t len = n - b0 < blk ? n - b0 : blk;
    const float X = std::ldexp(1.0f, int(*scales++) - 127);
    for (int64_t i = b0; i < b0 + len; ++i) x[i] = e4m3_to_f32(in[i]) * X;
  }
}

// x[i] <- round_e4m3(x[i] * m) / m in place, m per tensor or per block of kMxBlock elements
// (block: blocks of consecutive elements of the innermost dimension, a multiple of kMxBlock):
// exactly decode_e4m3(encode_e4m3(x)), the one formula both use.
inline void quantize_e4m3(float* x, int64_t n, Fp8Scaling scaling) {
  std::vector<uint8_t> enc(static_cast<size_t>(e4m3_encoded_bytes(n, scaling)));
  encode_e4m3(x, n, scaling, enc.data());
  decode_e4m3(enc.data(), n, scaling, x);
}

}  // namespace cpbench
