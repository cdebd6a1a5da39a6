// fp32 element-wise kernels of the CPU backend: RMSNorm, rotary embedding, add, SwiGLU, fill, copies.
// Reductions accumulate in double (memory-bound kernels: the cost is hidden by the loads).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"

namespace cpbench::cpu {

namespace {
// sum_i a[i] * b[i] in double, in 8 independent lanes (vectorisable without -ffast-math; the
// summation order is fixed, so results are deterministic).
double dot(const float* a, const float* b, int64_t n) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += double(a[i + l]) * double(b[i + l]);
  double t = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; ++i) t += double(a[i]) * double(b[i]);
  return t;
}
}  // namespace

void rmsnorm_fwd(const float* x, const float* w, float eps, int64_t rows, int64_t D, float* y,
                 float* rstd, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * D;
    float* yr = y + r * D;
    const double ss = dot(xr, xr, D);
    const float rs = static_cast<float>(1.0 / std::sqrt(ss / double(D) + double(eps)));
    rstd[r] = rs;
    for (int64_t c = 0; c < D; ++c) yr[c] = xr[c] * rs * w[c];
  }
}

// y = x * r * w with r = (mean(x^2) + eps)^(-1/2):
//   dx_c = r * w_c * dy_c - x_c * r^3 / D * sum_k dy_k w_k x_k
//   dw_c += sum over rows of dy_c * x_c * r
void rmsnorm_bwd(const float* x, const float* w, const float* rstd, const float* dy, int64_t rows,
                 int64_t D, float* dx, float* dw, int threads) {
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
      const float* xr = x + r * D;
      const float* gr = dy + r * D;
      float* dxr = dx + r * D;
      const double rs = rstd[r];
      for (int64_t c = 0; c < D; ++c) gx[size_t(c)] = gr[c] * w[c];
      const double gw_x = dot(gx.data(), xr, D);  // sum_k dy_k w_k x_k
      const double coef = rs * rs * rs * gw_x / double(D);
      for (int64_t c = 0; c < D; ++c) {
        dxr[c] = static_cast<float>(rs * double(w[c]) * double(gr[c]) - double(xr[c]) * coef);
        pw[c] += double(gr[c]) * double(xr[c]) * rs;
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
void rope(float* x, int64_t B, int64_t T, int heads, int d, int64_t pitch, const Positions& pos,
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
        float* row = x + (b * T + t) * pitch;
        for (int h = 0; h < heads; ++h) {
          float* x1 = row + int64_t(h) * d;
          float* x2 = x1 + half;
          for (int i = 0; i < half; ++i) {
            const float a1 = x1[i], a2 = x2[i];
            x1[i] = a1 * cs[i] - a2 * sn[i];
            x2[i] = a2 * cs[i] + a1 * sn[i];
          }
        }
      }
    }
  }
}

void add(float* out, const float* a, const float* b, int64_t n, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void swiglu_fwd(const float* a, const float* b, float* g, int64_t n, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t i = 0; i < n; ++i) {
    const float s = 1.0f / (1.0f + std::exp(-a[i]));
    g[i] = a[i] * s * b[i];
  }
}

void swiglu_bwd(const float* a, const float* b, const float* dg, float* da, float* db, int64_t n, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t i = 0; i < n; ++i) {
    const float x = a[i], s = 1.0f / (1.0f + std::exp(-x)), y = b[i], d = dg[i];
    da[i] = d * y * s * (1.0f + x * (1.0f - s));  // d silu/da = s + a s (1 - s)
    db[i] = d * x * s;
  }
}

void fill(float* x, int64_t n, float value, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t i = 0; i < n; ++i) x[i] = value;
}

void copy_2d(float* dst, int64_t dst_pitch, const float* src, int64_t src_pitch, int64_t rows,
             int64_t cols, int threads) {
  if (rows == 0 || cols == 0) return;
  if (dst_pitch == cols && src_pitch == cols) {  // one contiguous block
    const int64_t n = rows * cols;
    const int64_t per = std::max<int64_t>(int64_t(1) << 16, (n + threads - 1) / threads);
    const int64_t parts = (n + per - 1) / per;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t c = 0; c < parts; ++c) {
      const int64_t e0 = c * per, e1 = std::min(n, e0 + per);
      std::memcpy(dst + e0, src + e0, sizeof(float) * size_t(e1 - e0));
    }
    return;
  }
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(dst + r * dst_pitch, src + r * src_pitch, sizeof(float) * size_t(cols));
}

}  // namespace cpbench::cpu
