// The CUDA SwiGLU kernels of DESIGN's MLP sub-layer (kernels/cuda/elementwise_mlp_kernels.cuh, the
// source the GPU build compiles) on the host emulator of cuda_emu.h, against a float64 reference
// of g = silu(a) * b and its backward, for bf16, fp16 and fp32 storage (fp32 math). Outputs start
// as a poison value inside guard zones: an element not written, or written out of bounds, fails.
// The backward is also run in place (da, db in a's and b's memory), as the block runs it.
#define CPB_CUDA_EMULATION 1
// (#pragma unroll in the kernels: -Wno-unknown-pragmas in tests/unit/cuda.cmake)

#include "tests/unit/cuda_emu.h"
// (the emulator must come first)
#include "kernels/cuda/elementwise_mlp_kernels.cuh"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

using namespace cpbench::cuda;

namespace {

constexpr size_t kGuard = 64;

// A host buffer with guard zones filled with `poison`; data() is what the kernel gets.
template <typename E>
struct Guarded {
  std::vector<E> buf;
  size_t n;
  E poison;
  Guarded(size_t count, E p) : buf(count + 2 * kGuard, p), n(count), poison(p) {}
  E* data() { return buf.data() + kGuard; }
  bool guards_intact() const {
    for (size_t i = 0; i < kGuard; ++i)
      if (std::memcmp(&buf[i], &poison, sizeof(E)) != 0 || std::memcmp(&buf[kGuard + n + i], &poison, sizeof(E)) != 0)
        return false;
    return true;
  }
};

template <typename E>
E to_e(float x) {
  if constexpr (std::is_same_v<E, __nv_bfloat16>) return __float2bfloat16_rn(x);
  else if constexpr (std::is_same_v<E, __half>) return __float2half_rn(x);
  else return x;
}
template <typename E>
float from_e(E x) {
  if constexpr (std::is_same_v<E, __nv_bfloat16>) return __bfloat162float(x);
  else if constexpr (std::is_same_v<E, __half>) return __half2float(x);
  else return x;
}
template <typename E>
int dtype_code() {  // the kernels' int dtype (DType's order: f32, bf16, f16)
  if constexpr (std::is_same_v<E, __nv_bfloat16>) return 1;
  else if constexpr (std::is_same_v<E, __half>) return 2;
  else return 0;
}
// Storage rounding of one value, and the bound on a stored result: half an ulp of the dtype
// (relative) plus the fp32 math's error; fp32 storage: the math alone.
template <typename E>
double rel_bound() {
  if constexpr (std::is_same_v<E, __nv_bfloat16>) return 1.0 / 256 + 1e-5;
  else if constexpr (std::is_same_v<E, __half>) return 1.0 / 2048 + 1e-5;
  else return 2e-6;
}

// Half the smallest subnormal of the storage dtype: what rounding a tiny result may lose
// (silu(-30) * b underflows fp16 to 0; bf16 and fp32 have fp32's range).
template <typename E>
double abs_floor() {
  if constexpr (std::is_same_v<E, __half>) return std::ldexp(1.0, -25);
  else return std::ldexp(1.0, -150);
}

// Values in the run dtype (exactly representable), including large |a| where sigmoid saturates.
template <typename E>
std::vector<E> values(size_t n, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<E> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = to_e<E>(i % 97 == 0 ? (i % 2 ? 30.0f : -30.0f) : nd(rng));
  return v;
}

double sigmoid64(double x) { return 1.0 / (1.0 + std::exp(-x)); }

template <typename E>
void check_close(E got, double want, double scale_ref, const char* what, size_t i) {
  const double g = from_e(got), tol = rel_bound<E>() * (std::abs(want) + scale_ref) + abs_floor<E>();
  INFO(what << "[" << i << "] = " << g << ", float64 reference " << want);
  CHECK(std::isfinite(g));
  CHECK(std::abs(g - want) <= tol);
}

template <typename E>
void run_swiglu_case(uint64_t seed) {
  const int64_t n = 1000;  // 3 blocks of 256 threads on a grid of 2: the grid-stride loop wraps
  const cpb_emu::Idx3 grid{2, 1, 1};
  const int t = dtype_code<E>();
  const std::vector<E> a = values<E>(size_t(n), seed, 2.0f), b = values<E>(size_t(n), seed + 1, 1.0f),
                       dg = values<E>(size_t(n), seed + 2, 1.0f);
  const E poison = to_e<E>(NAN);

  Guarded<E> g(size_t(n), poison);
  cpb_emu::launch(&kern::swiglu_fwd_kernel, grid, 256, 0, static_cast<const void*>(a.data()),
                  static_cast<const void*>(b.data()), t, static_cast<void*>(g.data()), n);
  CHECK(g.guards_intact());
  for (size_t i = 0; i < size_t(n); ++i) {
    const double x = from_e(a[i]), y = from_e(b[i]);
    check_close(g.data()[i], x * sigmoid64(x) * y, 0.0, "g", i);
  }

  // Separate outputs, then in place (da over a, db over b): the same values.
  Guarded<E> da(size_t(n), poison), db(size_t(n), poison);
  cpb_emu::launch(&kern::swiglu_bwd_kernel, grid, 256, 0, static_cast<const void*>(a.data()),
                  static_cast<const void*>(b.data()), static_cast<const void*>(dg.data()), t,
                  static_cast<void*>(da.data()), static_cast<void*>(db.data()), n);
  CHECK(da.guards_intact());
  CHECK(db.guards_intact());
  std::vector<E> a2 = a, b2 = b;
  cpb_emu::launch(&kern::swiglu_bwd_kernel, grid, 256, 0, static_cast<const void*>(a2.data()),
                  static_cast<const void*>(b2.data()), static_cast<const void*>(dg.data()), t,
                  static_cast<void*>(a2.data()), static_cast<void*>(b2.data()), n);
  for (size_t i = 0; i < size_t(n); ++i) {
    const double x = from_e(a[i]), y = from_e(b[i]), d = from_e(dg[i]), s = sigmoid64(x);
    // The terms' scale bounds the fp32 cancellation in 1 + x(1 - s) near its zero.
    const double da_want = d * y * s * (1.0 + x * (1.0 - s)), da_scale = std::abs(d * y * s) * (1.0 + std::abs(x));
    check_close(da.data()[i], da_want, da_scale, "da", i);
    check_close(db.data()[i], d * x * s, 0.0, "db", i);
    CHECK(std::memcmp(&a2[i], &da.data()[i], sizeof(E)) == 0);
    CHECK(std::memcmp(&b2[i], &db.data()[i], sizeof(E)) == 0);
  }
}

}  // namespace

TEST_CASE("cuda emulated: swiglu forward and backward, bf16", "[cuda][emu][mlp]") { run_swiglu_case<__nv_bfloat16>(11); }
TEST_CASE("cuda emulated: swiglu forward and backward, fp16", "[cuda][emu][mlp]") { run_swiglu_case<__half>(21); }
TEST_CASE("cuda emulated: swiglu forward and backward, fp32", "[cuda][emu][mlp]") { run_swiglu_case<float>(31); }
