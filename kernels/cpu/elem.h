// The element types of the CPU backend's tensors, for kernels written once as templates: fp32
// (float) and the 16-bit storage types bf16_t, fp16_t. A kernel loads every element to fp32
// (to_f32, exact), computes in fp32 and stores with from_f32<T> (round to nearest even,
// kernels/float16.h); for float both are the identity, so a float instantiation compiles to the
// same code as a kernel written on float alone.
#pragma once
#include <cstdint>
#include <stdexcept>

#include "kernels/float16.h"
#include "kernels/tensor.h"

namespace cpbench::cpu {

struct bf16_t {
  uint16_t bits;
};
struct fp16_t {
  uint16_t bits;
};
static_assert(sizeof(bf16_t) == 2 && sizeof(fp16_t) == 2, "16-bit storage");

inline float to_f32(float x) { return x; }
inline float to_f32(bf16_t x) { return bf16_to_f32(x.bits); }
inline float to_f32(fp16_t x) { return f16_to_f32(x.bits); }

template <class T>
T from_f32(float x);
template <>
inline float from_f32<float>(float x) {
  return x;
}
template <>
inline bf16_t from_f32<bf16_t>(float x) {
  return bf16_t{f32_to_bf16(x)};
}
template <>
inline fp16_t from_f32<fp16_t>(float x) {
  return fp16_t{f32_to_f16(x)};
}

// The value an element of T holds after x is stored in it.
template <class T>
float round_to(float x) {
  return to_f32(from_f32<T>(x));
}

// Calls f(T{}) with T the element type of dtype t (float, bf16_t, fp16_t).
template <class F>
decltype(auto) with_elem(DType t, F&& f) {
  switch (t) {
    case DType::bf16: return f(bf16_t{});
    case DType::f16: return f(fp16_t{});
    case DType::f32: break;
    case DType::u8: throw std::invalid_argument("cpu: u8 holds raw bytes (an encoded fp8 block), no element type");
  }
  return f(float{});
}

}  // namespace cpbench::cpu
