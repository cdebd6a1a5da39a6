// Element-wise kernels of the CPU backend: RMSNorm, rotary embedding, add, SwiGLU, fill, convert,
// copies. Written once for every element type (elem.h): each element is loaded to fp32, the math
// is the fp32 kernel's, and results are stored rounded to the tensor's type (bf16/fp16: once per
// element, DESIGN "Rounding points"). Reductions accumulate in double (memory-bound kernels: the
// cost is hidden by the loads).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/elem.h"

namespace cpbench::cpu {

namespace {
// sum_i a[i] * b[i] in double, in 8 independent lanes (vectorisable without -ffast-math; the
// summation order is fixed, so results are deterministic).
template <class A, class B>
double dot(const A* a, const B* b, int64_t n) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += double(to_f32(a[i + l])) * double(to_f32(b[i + l]));
  double t = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; ++i) t += double(to_f32(a[i])) * double(to_f32(b[i]));
  return t;
}
}  // namespace

template <class T>
void rmsnorm_fwd(const T* x, const T* w, float eps, int64_t rows, int64_t D, T* y, float* rstd,
                 int threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * D;
    T* yr = y + r * D;
    const double ss = dot(xr, xr, D);
    const float rs = static_cast<float>(1.0 / std::sqrt(ss / double(D) + double(eps)));
    rstd[r] = rs;
    for (int64_t c = 0; c < D; ++c) yr[c] = from_f32<T>(to_f32(xr[c]) * rs * to_f32(w[c]));
  }
}

// y = x * r * w with r = (mean(x^2) + eps)^(-1/2):
//   dx_c = r * w_c * dy_c - x_c * r^3 / D * sum_k dy_k w_k x_k
//   dw_c += sum over rows of dy_c * x_c * r
template <class E>
void rmsnorm_bwd(const E* x, const E* w, const float* rstd, const E* dy, int64_t rows, int64_t D,
                 E* dx, float* dw, int threads) {
  const int T = std::max(1, threads);
  // Per-thread dw partials over contiguous row ranges, summed in thread order (deterministic).
  std::vector<double> part(size_t(T) * D, 0.0);
  const int64_t per = (rows + T - 1) / T;
#pragma omp parallel for schedule(static, 1) num_threads(T)
  for (int t = 0; t < T; ++t) {
    double* pw = part.data() + size_t(t) * D;
    std::vector<float> gx(static_cast<size_t>(D));
    const int64_t r0 = std::min(rows, per * t), r1 = std::min(rows, r0 + per);
    for (int64_t r = r0; r < r1; ++r) {
      const E* xr = x + r * D;
      const E* gr = dy + r * D;
      E* dxr = dx + r * D;
      const double rs = rstd[r];
      for (int64_t c = 0; c < D; ++c) gx[size_t(c)] = to_f32(gr[c]) * to_f32(w[c]);
      const double gw_x = dot(gx.data(), xr, D);  // sum_k dy_k w_k x_k
      const double coef = rs * rs * rs * gw_x / double(D);
      for (int64_t c = 0; c < D; ++c) {
        const double xc = to_f32(xr[c]), gc = to_f32(gr[c]);
        dxr[c] = from_f32<E>(static_cast<float>(rs * double(to_f32(w[c])) * gc - xc * coef));
        pw[c] += gc * xc * rs;
      }
    }
  }
  for (int64_t c = 0; c < D; ++c) {
    double acc = 0;
    for (int t = 0; t < T; ++t) acc += part[size_t(t) * D + c];
    dw[c] += static_cast<float>(acc);
  }
}

// Rotate-half: for i < d/2, angle = pos * theta^(-2i/d),
//   forward: (x_i, x_{i+d/2}) <- (x_i cos - x_{i+d/2} sin, x_{i+d/2} cos + x_i sin)
//   inverse: the transpose (sin -> -sin).
// Angles and their sines are computed in double (positions reach 10^6 radians) once per token
// and shared by all batch rows and heads.
template <class E>
void rope(E* x, int64_t B, int64_t T, int heads, int d, int64_t pitch, const Positions& pos,
          const DocStarts& docs, double theta, bool inverse, int threads) {
  const int half = d / 2;
  std::vector<double> inv_freq(half);
  for (int i = 0; i < half; ++i) inv_freq[i] = std::pow(theta, -2.0 * i / d);
  std::vector<int64_t> p = pos.list();
  if (docs) {
    const AttnMask doc_mask{true, 0, docs};
    for (int64_t& x_pos : p) x_pos -= doc_mask.doc_start(x_pos);
  }
  const double sign = inverse ? -1.0 : 1.0;
#pragma omp parallel num_threads(threads)
  {
    std::vector<float> cs(half), sn(half);
#pragma omp for schedule(static)
    for (int64_t t = 0; t < T; ++t) {
      for (int i = 0; i < half; ++i) {
        const double a = double(p[t]) * inv_freq[i];
        cs[i] = static_cast<float>(std::cos(a));
        sn[i] = static_cast<float>(sign * std::sin(a));
      }
      for (int64_t b = 0; b < B; ++b) {
        E* row = x + (b * T + t) * pitch;
        for (int h = 0; h < heads; ++h) {
          E* x1 = row + int64_t(h) * d;
          E* x2 = x1 + half;
          for (int i = 0; i < half; ++i) {
            const float a1 = to_f32(x1[i]), a2 = to_f32(x2[i]);
            x1[i] = from_f32<E>(a1 * cs[i] - a2 * sn[i]);
            x2[i] = from_f32<E>(a2 * cs[i] + a1 * sn[i]);
          }
        }
      }
    }
  }
}

template <class T>
void add(T* out, const T* a, const T* b, int64_t n, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t i = 0; i < n; ++i) out[i] = from_f32<T>(to_f32(a[i]) + to_f32(b[i]));
}

template <class T>
void swiglu_fwd(const T* a, const T* b, T* g, int64_t n, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t i = 0; i < n; ++i) {
    const float x = to_f32(a[i]);
    const float s = 1.0f / (1.0f + std::exp(-x));
    g[i] = from_f32<T>(x * s * to_f32(b[i]));
  }
}

template <class T>
void swiglu_bwd(const T* a, const T* b, const T* dg, T* da, T* db, int64_t n, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t i = 0; i < n; ++i) {
    const float x = to_f32(a[i]), s = 1.0f / (1.0f + std::exp(-x)), y = to_f32(b[i]), d = to_f32(dg[i]);
    da[i] = from_f32<T>(d * y * s * (1.0f + x * (1.0f - s)));  // d silu/da = s + a s (1 - s)
    db[i] = from_f32<T>(d * x * s);
  }
}

template <class T>
void fill(T* x, int64_t n, float value, int threads) {
  const T v = from_f32<T>(value);  // rounded once
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t i = 0; i < n; ++i) x[i] = v;
}

template <class D, class S>
void convert(D* dst, const S* src, int64_t n, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t i = 0; i < n; ++i) dst[i] = from_f32<D>(to_f32(src[i]));
}

void copy_2d(void* dst_v, int64_t dst_pitch, const void* src_v, int64_t src_pitch, int64_t rows,
             int64_t cols, size_t elem, int threads) {
  if (rows == 0 || cols == 0) return;
  char* dst = static_cast<char*>(dst_v);
  const char* src = static_cast<const char*>(src_v);
  if (dst_pitch == cols && src_pitch == cols) {  // one contiguous block
    const int64_t n = rows * cols * int64_t(elem);  // bytes
    const int64_t per = std::max<int64_t>(int64_t(1) << 18, (n + threads - 1) / threads);
    const int64_t parts = (n + per - 1) / per;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t c = 0; c < parts; ++c) {
      const int64_t e0 = c * per, e1 = std::min(n, e0 + per);
      std::memcpy(dst + e0, src + e0, size_t(e1 - e0));
    }
    return;
  }
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(dst + r * dst_pitch * int64_t(elem), src + r * src_pitch * int64_t(elem), elem * size_t(cols));
}

// The instantiations the backend dispatches to (elem.h's with_elem).
#define CPB_ELEMENTWISE(T)                                                                          \
  template void rmsnorm_fwd<T>(const T*, const T*, float, int64_t, int64_t, T*, float*, int);      \
  template void rmsnorm_bwd<T>(const T*, const T*, const float*, const T*, int64_t, int64_t, T*,   \
                               float*, int);                                                       \
  template void rope<T>(T*, int64_t, int64_t, int, int, int64_t, const Positions&,                 \
                        const DocStarts&, double, bool, int);                                      \
  template void add<T>(T*, const T*, const T*, int64_t, int);                                      \
  template void swiglu_fwd<T>(const T*, const T*, T*, int64_t, int);                               \
  template void swiglu_bwd<T>(const T*, const T*, const T*, T*, T*, int64_t, int);                 \
  template void fill<T>(T*, int64_t, float, int);                                                  \
  template void convert<T, float>(T*, const float*, int64_t, int);                                 \
  template void convert<T, bf16_t>(T*, const bf16_t*, int64_t, int);                               \
  template void convert<T, fp16_t>(T*, const fp16_t*, int64_t, int);
CPB_ELEMENTWISE(float)
CPB_ELEMENTWISE(bf16_t)
CPB_ELEMENTWISE(fp16_t)
#undef CPB_ELEMENTWISE

}  // namespace cpbench::cpu
