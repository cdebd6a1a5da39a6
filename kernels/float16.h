// The two 16-bit float formats of the run dtypes, as bit patterns, and their conversions to and
// from fp32: widening is exact; narrowing rounds to nearest, ties to even (what the GPU's
// __float2bfloat16_rn / __float2half_rn do), overflows to +-inf, keeps NaN a (quiet) NaN of the
// same sign, and gives fp16's subnormals. One copy for every host-side user: the CPU backend's
// bf16/fp16 storage and the MPI communicator's float32 reduce_scatter of 16-bit buffers.
#pragma once
#include <cstdint>
#include <cstring>

namespace cpbench {

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// bf16 is the upper half of an fp32: 8 exponent bits, 7 mantissa bits.
inline float bf16_to_f32(uint16_t h) { return bits_f32(uint32_t(h) << 16); }
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round the 16 dropped bits to nearest even; may carry to inf
  return static_cast<uint16_t>(u >> 16);
}

// fp16: 5 exponent bits (bias 15), 10 mantissa bits, subnormals below 2^-14 in units of 2^-24.
inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (man << 13));  // inf / nan
  if (exp == 0) {
    if (man == 0) return bits_f32(sign);
    const float v = static_cast<float>(man) * (1.0f / 16777216.0f);  // subnormal: man * 2^-24, exact
    return sign ? -v : v;
  }
  return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

inline uint16_t f32_to_f16(float f) {
  const uint32_t u = f32_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // nan
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: rounds to inf
  if (a < 0x38800000u) {  // below the smallest normal 2^-14: subnormal or zero
    // Round |f| * 2^24 (exact: a power-of-two scale) to the nearest integer, ties to even.
    const float v = bits_f32(a) * 16777216.0f;
    float r = static_cast<float>(static_cast<int>(v));
    const float frac = v - r;
    if (frac > 0.5f || (frac == 0.5f && (static_cast<int>(r) & 1))) r += 1.0f;
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(r));  // 1024 carries into the exponent
  }
  // Normal: rebias the exponent 127 -> 15, keep 10 mantissa bits, round the 13 dropped bits.
  uint32_t h = ((a - 0x38000000u) >> 13);
  const uint32_t rest = a & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // may carry into the exponent: fine
  return static_cast<uint16_t>(sign | h);
}

}  // namespace cpbench
