// ISA variants of the attention inner loops. Each body is written once with GCC/Clang vector
// extensions, templated on the vector width, and instantiated in wrappers carrying target
// attributes, so the compiler emits AVX-512, AVX2+FMA or baseline SSE2 code for the same source. Only the wrappers
// get the target attribute: no inline function shared with other files is compiled for a wider
// ISA (which would break the one-definition rule on older CPUs).
#include "kernels/cpu/vec_ops.h"

#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

// The vector types never cross a non-inlined call, so the ABI notes do not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace cpbench::cpu {
namespace {

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define CPB_X86 1
#else
#define CPB_X86 0
#endif

#define CPB_INLINE static inline __attribute__((always_inline))

// Vectors of W floats: W = 16 (zmm) for AVX-512, 8 (ymm) for AVX2, 4 (xmm) for baseline SSE2.
// Wider types than the ISA's registers would be split through the stack, so each level uses its
// own width.
template <int W>
struct Vec;
template <>
struct Vec<16> {
  typedef float F __attribute__((vector_size(64)));
  typedef int32_t I __attribute__((vector_size(64)));
};
template <>
struct Vec<8> {
  typedef float F __attribute__((vector_size(32)));
  typedef int32_t I __attribute__((vector_size(32)));
};
template <>
struct Vec<4> {
  typedef float F __attribute__((vector_size(16)));
  typedef int32_t I __attribute__((vector_size(16)));
};

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

template <int W>
CPB_INLINE typename Vec<W>::F load(const float* p) {
  typename Vec<W>::F x;
  __builtin_memcpy(&x, p, sizeof(x));
  return x;
}
template <int W>
CPB_INLINE typename Vec<W>::I loadi(const int32_t* p) {
  typename Vec<W>::I x;
  __builtin_memcpy(&x, p, sizeof(x));
  return x;
}
template <int W>
CPB_INLINE void store(float* p, typename Vec<W>::F x) {
  __builtin_memcpy(p, &x, sizeof(x));
}
template <int W>
CPB_INLINE typename Vec<W>::F splat(float a) {
  return typename Vec<W>::F{} + a;
}

// 2^x for x <= 0 (and -inf -> 0): round to nearest integer n, 2^(x-n) by its Taylor polynomial
// of degree 7 on [-1/2, 1/2] (truncation error < 1e-8, below fp32 rounding), times 2^n built
// in the exponent field. Inputs below -127 give 0; NaN stays NaN.
template <int W>
CPB_INLINE typename Vec<W>::F exp2v(typename Vec<W>::F x) {
  using F = typename Vec<W>::F;
  using I = typename Vec<W>::I;
  const F lo = splat<W>(-127.0f);
  x = x < lo ? lo : x;
  const F magic = splat<W>(12582912.0f);  // 1.5 * 2^23: (x + magic) - magic rounds to integer
  const F n = (x + magic) - magic;
  const F f = x - n;
  F p = splat<W>(1.5252734e-5f);
  p = p * f + 1.5403530e-4f;
  p = p * f + 1.3333558e-3f;
  p = p * f + 9.6181291e-3f;
  p = p * f + 5.5504109e-2f;
  p = p * f + 2.4022651e-1f;
  p = p * f + 6.9314718e-1f;
  p = p * f + 1.0f;
  const I e = (__builtin_convertvector(n, I) + 127) << 23;
  return p * (F)e;  // GCC vector cast: reinterprets the bits
}

CPB_INLINE float exp2s(float x) {  // the scalar twin, for row tails
  if (x < -127.0f) x = -127.0f;
  const float n = (x + 12582912.0f) - 12582912.0f;
  const float f = x - n;
  float p = 1.5252734e-5f;
  p = p * f + 1.5403530e-4f;
  p = p * f + 1.3333558e-3f;
  p = p * f + 9.6181291e-3f;
  p = p * f + 5.5504109e-2f;
  p = p * f + 2.4022651e-1f;
  p = p * f + 6.9314718e-1f;
  p = p * f + 1.0f;
  if (x != x) return x;
  const int32_t e = (static_cast<int32_t>(n) + 127) << 23;
  float s;
  __builtin_memcpy(&s, &e, sizeof(s));
  return p * s;
}

template <int W>
CPB_INLINE float hmax(typename Vec<W>::F v) {
  float m = v[0];
  for (int i = 1; i < W; ++i) m = v[i] > m ? v[i] : m;
  return m;
}
template <int W>
CPB_INLINE float hsum(typename Vec<W>::F v) {
  // Pairwise, fixed order.
  float a[W];
  __builtin_memcpy(a, &v, sizeof(a));
  for (int w = W / 2; w > 0; w /= 2)
    for (int i = 0; i < w; ++i) a[i] += a[i + w];
  return a[0];
}

template <int W>
CPB_INLINE void mask_body(float* S, int64_t ld, int rows, int cols, const int32_t* lo,
                          const int32_t* hi, const int32_t* kp) {
  using F = typename Vec<W>::F;
  using I = typename Vec<W>::I;
  const F ninf = splat<W>(kNegInf);
  for (int i = 0; i < rows; ++i) {
    float* s = S + i * ld;
    const int32_t a = lo[i], b = hi[i];
    const I av = I{} + a, bv = I{} + b;
    int j = 0;
    for (; j + W <= cols; j += W) {
      const I k = loadi<W>(kp + j);
      store<W>(s + j, (k < av) | (k > bv) ? ninf : load<W>(s + j));
    }
    for (; j < cols; ++j)
      if (kp[j] < a || kp[j] > b) s[j] = kNegInf;
  }
}

template <int W>
CPB_INLINE void softmax_body(float* S, int64_t ld, int rows, int cols, float* m, float* l,
                             float* O, int64_t ldo, int d) {
  using F = typename Vec<W>::F;
  for (int i = 0; i < rows; ++i) {
    float* s = S + i * ld;
    // Row maximum.
    F mv = splat<W>(kNegInf);
    int j = 0;
    for (; j + W <= cols; j += W) {
      const F x = load<W>(s + j);
      mv = x > mv ? x : mv;
    }
    float mx = hmax<W>(mv);
    for (; j < cols; ++j) mx = s[j] > mx ? s[j] : mx;
    const float m_old = m[i];
    const float m_new = mx > m_old ? mx : m_old;
    if (m_new == kNegInf) {  // nothing visible yet in this row: P = 0, state unchanged
      for (j = 0; j < cols; ++j) s[j] = 0.0f;
      continue;
    }
    // P = exp2(S - m_new) and its row sum.
    const F mnv = splat<W>(m_new);
    F acc = splat<W>(0.0f);
    j = 0;
    for (; j + W <= cols; j += W) {
      const F p = exp2v<W>(load<W>(s + j) - mnv);
      store<W>(s + j, p);
      acc += p;
    }
    float sum = hsum<W>(acc);
    for (; j < cols; ++j) {
      s[j] = exp2s(s[j] - m_new);
      sum += s[j];
    }
    const float alpha = exp2s(m_old - m_new);  // 0 when m_old = -inf
    l[i] = l[i] * alpha + sum;
    m[i] = m_new;
    if (alpha != 1.0f) {
      float* o = O + i * ldo;
      const F av = splat<W>(alpha);
      int c = 0;
      for (; c + W <= d; c += W) store<W>(o + c, load<W>(o + c) * av);
      for (; c < d; ++c) o[c] *= alpha;
    }
  }
}

template <int W>
CPB_INLINE void prob_body(float* S, int64_t ld, int rows, int cols, const float* lse2) {
  using F = typename Vec<W>::F;
  for (int i = 0; i < rows; ++i) {
    float* s = S + i * ld;
    const float L = lse2[i];
    if (L == kNegInf) {  // the row sees no key anywhere
      for (int j = 0; j < cols; ++j) s[j] = 0.0f;
      continue;
    }
    const F lv = splat<W>(L);
    int j = 0;
    for (; j + W <= cols; j += W) store<W>(s + j, exp2v<W>(load<W>(s + j) - lv));
    for (; j < cols; ++j) s[j] = exp2s(s[j] - L);
  }
}

template <int W>
CPB_INLINE void dsoftmax_body(const float* P, float* dP, int64_t ld, int rows, int cols,
                              const float* delta) {
  using F = typename Vec<W>::F;
  for (int i = 0; i < rows; ++i) {
    const float* p = P + i * ld;
    float* dp = dP + i * ld;
    const float dl = delta[i];
    const F dv = splat<W>(dl);
    int j = 0;
    for (; j + W <= cols; j += W) store<W>(dp + j, load<W>(p + j) * (load<W>(dp + j) - dv));
    for (; j < cols; ++j) dp[j] = p[j] * (dp[j] - dl);
  }
}

// One set of wrappers per ISA level.
#define CPB_DEFINE_VARIANT(SUFFIX, W, ATTR)                                                       \
  ATTR void mask_##SUFFIX(float* S, int64_t ld, int rows, int cols, const int32_t* lo,            \
                          const int32_t* hi, const int32_t* kp) {                                 \
    mask_body<W>(S, ld, rows, cols, lo, hi, kp);                                                  \
  }                                                                                               \
  ATTR void softmax_##SUFFIX(float* S, int64_t ld, int rows, int cols, float* m, float* l,        \
                             float* O, int64_t ldo, int d) {                                      \
    softmax_body<W>(S, ld, rows, cols, m, l, O, ldo, d);                                          \
  }                                                                                               \
  ATTR void prob_##SUFFIX(float* S, int64_t ld, int rows, int cols, const float* lse2) {          \
    prob_body<W>(S, ld, rows, cols, lse2);                                                        \
  }                                                                                               \
  ATTR void dsoftmax_##SUFFIX(const float* P, float* dP, int64_t ld, int rows, int cols,          \
                              const float* delta) {                                               \
    dsoftmax_body<W>(P, dP, ld, rows, cols, delta);                                               \
  }                                                                                               \
  const VecOps ops_##SUFFIX = {#SUFFIX, mask_##SUFFIX, softmax_##SUFFIX, prob_##SUFFIX,           \
                               dsoftmax_##SUFFIX};

CPB_DEFINE_VARIANT(generic, 4, )
#if CPB_X86
CPB_DEFINE_VARIANT(avx2, 8, __attribute__((target("avx2,fma"))))
CPB_DEFINE_VARIANT(avx512, 16, __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx2,fma"))))
#endif

int supported(const VecOps** out, int max) {
  int n = 0;
#if CPB_X86
  __builtin_cpu_init();
  if (n < max && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw"))
    out[n++] = &ops_avx512;
  if (n < max && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    out[n++] = &ops_avx2;
#endif
  if (n < max) out[n++] = &ops_generic;
  return n;
}

const VecOps* choose() {
  const VecOps* all[3];
  const int n = supported(all, 3);
  const char* force = std::getenv("CPBENCH_ISA");
  if (!force || !*force) return all[0];
  std::string have;
  for (int i = 0; i < n; ++i) {
    if (std::string(force) == all[i]->isa) return all[i];
    have += std::string(i ? ", " : "") + all[i]->isa;
  }
  throw std::invalid_argument(std::string("CPBENCH_ISA=") + force +
                              " is not a level this CPU runs (available: " + have + ")");
}

}  // namespace

const VecOps& vec_ops() {
  static const VecOps* chosen = choose();
  return *chosen;
}

int vec_ops_variants(const VecOps** out, int max) { return supported(out, max); }

}  // namespace cpbench::cpu
