// Element-wise, normalisation and rotary kernels of the CUDA backend. Memory-bound: each tensor
// is read through the dtype-generic ld_any/st_any (a warp-uniform branch), arithmetic in fp32
// (RoPE angles in fp64, as the CPU reference).
#include <climits>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_common.cuh"

namespace cpbench::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void fill_kernel(void* x, int t, int64_t n, float v) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    st_any(x, t, i, v);
}

__global__ void convert_kernel(void* dst, int dt, const void* src, int st, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    st_any(dst, dt, i, ld_any(src, st, i));
}

// out may alias a or b: each element is read and written by the same thread.
__global__ void add_kernel(void* out, int ot, const void* a, int at, const void* b, int bt,
                           int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    st_any(out, ot, i, ld_any(a, at, i) + ld_any(b, bt, i));
}

__global__ void scale_2d_kernel(void* C, int t, int64_t m, int64_t n, int64_t ldc, float beta) {
  const int64_t total = m * n;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t idx = (i / n) * ldc + i % n;
    st_any(C, t, idx, beta == 0.0f ? 0.0f : beta * ld_any(C, t, idx));
  }
}

// One block per row: rstd = 1/sqrt(mean(x^2) + eps), y = x * rstd * w. y may alias x.
__global__ void rmsnorm_fwd_kernel(const void* x, const void* w, int t, float eps, int64_t D,
                                   void* y, float* rstd) {
  const int64_t base = int64_t(blockIdx.x) * D;
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < D; c += blockDim.x) {
    const float v = ld_any(x, t, base + c);
    ss += v * v;
  }
  ss = block_sum(ss);
  const float r = rsqrtf(ss / float(D) + eps);
  if (threadIdx.x == 0) rstd[blockIdx.x] = r;
  for (int64_t c = threadIdx.x; c < D; c += blockDim.x)
    st_any(y, t, base + c, ld_any(x, t, base + c) * r * ld_any(w, t, c));
}

// dw[c] += sum over a chunk of rows of dy * x * rstd (one atomic per column and chunk).
__global__ void rmsnorm_dw_kernel(const void* x, const float* rstd, const void* dy, int t,
                                  int64_t rows, int64_t D, int64_t rows_per_chunk, float* dw) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= D) return;
  const int64_t r0 = int64_t(blockIdx.y) * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  float acc = 0.0f;
  for (int64_t r = r0; r < r1; ++r) acc += ld_any(dy, t, r * D + c) * ld_any(x, t, r * D + c) * rstd[r];
  atomicAdd(dw + c, acc);
}

// One block per row: dx = r * (w*dy - x * r^2 / D * sum(w*dy*x)), r = rstd. dx may alias x or dy
// (each element is read, after the reduction, by the thread that writes it).
__global__ void rmsnorm_dx_kernel(const void* x, const void* w, int t, const float* rstd,
                                  const void* dy, int64_t D, void* dx) {
  const int64_t base = int64_t(blockIdx.x) * D;
  const float r = rstd[blockIdx.x];
  float s = 0.0f;
  for (int64_t c = threadIdx.x; c < D; c += blockDim.x)
    s += ld_any(dy, t, base + c) * ld_any(w, t, c) * ld_any(x, t, base + c);
  s = block_sum(s);
  const float coef = r * r * r * s / float(D);
  for (int64_t c = threadIdx.x; c < D; c += blockDim.x)
    st_any(dx, t, base + c,
           r * ld_any(w, t, c) * ld_any(dy, t, base + c) - coef * ld_any(x, t, base + c));
}

// Rotate-half RoPE, one thread per (token row, head, pair i < d/2); see backend.h.
struct InvFreq {
  double v[128];  // theta^(-2i/d), i < d/2 (d <= 256)
};
__global__ void rope_kernel(void* x, int t, int64_t rows, int64_t T, int heads, int d,
                            int64_t pitch, PosArg pos, InvFreq f, int inverse) {
  const int half = d / 2;
  const int64_t total = rows * heads * half;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int i = int(idx % half);
    const int64_t rest = idx / half;
    const int h = int(rest % heads);
    const int64_t row = rest / heads;  // b * T + token
    const int tok = int(row % T);
    const double a = double(pos_at(pos, tok)) * f.v[i];
    double sn, cs;
    sincos(a, &sn, &cs);
    const float c = float(cs), s = inverse ? -float(sn) : float(sn);
    const int64_t e = row * pitch + int64_t(h) * d + i;
    const float x1 = ld_any(x, t, e), x2 = ld_any(x, t, e + half);
    st_any(x, t, e, x1 * c - x2 * s);
    st_any(x, t, e + half, x2 * c + x1 * s);
  }
}

}  // namespace

PosArg to_pos_arg(const Positions& p) {
  PosArg a;
  const int64_t n = p.count();
  if (n > INT32_MAX) throw std::invalid_argument("cuda: more than 2^31-1 positions");
  a.n = int32_t(n);
  if (p.nseg >= 1) {
    a.s0 = int32_t(p.seg[0].start);
    a.st0 = int32_t(p.seg[0].stride);
    a.c0 = int32_t(p.seg[0].count);
  }
  if (p.nseg >= 2) {
    a.s1 = int32_t(p.seg[1].start);
    a.st1 = int32_t(p.seg[1].stride);
  } else {
    a.s1 = a.s0;  // unused: every row is in segment 0
    a.st1 = a.st0;
  }
  return a;
}

void fill(void* x, DType t, int64_t n, float value, cudaStream_t s) {
  if (n <= 0) return;
  if (value == 0.0f && !std::signbit(value)) {  // +0 is all-zero bits in every dtype
    CUDA_CHECK(cudaMemsetAsync(x, 0, size_t(n) * dtype_size(t), s));
    return;
  }
  fill_kernel<<<grid_for(n), kThreads, 0, s>>>(x, int(t), n, value);
  CUDA_CHECK_LAUNCH();
}

void convert(void* dst, DType dt, const void* src, DType st, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  if (dt == st) {
    if (dst != src)
      CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(n) * dtype_size(dt), cudaMemcpyDeviceToDevice, s));
    return;
  }
  convert_kernel<<<grid_for(n), kThreads, 0, s>>>(dst, int(dt), src, int(st), n);
  CUDA_CHECK_LAUNCH();
}

void add(void* out, DType ot, const void* a, DType at, const void* b, DType bt, int64_t n,
         cudaStream_t s) {
  if (n <= 0) return;
  add_kernel<<<grid_for(n), kThreads, 0, s>>>(out, int(ot), a, int(at), b, int(bt), n);
  CUDA_CHECK_LAUNCH();
}

void scale_2d(void* C, DType t, int64_t m, int64_t n, int64_t ldc, float beta, cudaStream_t s) {
  if (m <= 0 || n <= 0) return;
  scale_2d_kernel<<<grid_for(m * n), kThreads, 0, s>>>(C, int(t), m, n, ldc, beta);
  CUDA_CHECK_LAUNCH();
}

void rmsnorm_fwd(const void* x, const void* w, DType t, float eps, int64_t rows, int64_t D,
                 void* y, float* rstd, cudaStream_t s) {
  if (rows <= 0) return;
  if (rows > INT32_MAX) throw std::invalid_argument("cuda rmsnorm_fwd: more than 2^31-1 rows");
  rmsnorm_fwd_kernel<<<unsigned(rows), kThreads, 0, s>>>(x, w, int(t), eps, D, y, rstd);
  CUDA_CHECK_LAUNCH();
}

void rmsnorm_bwd(const void* x, const void* w, DType t, const float* rstd, const void* dy,
                 int64_t rows, int64_t D, void* dx, float* dw, cudaStream_t s) {
  if (rows <= 0) return;
  if (rows > INT32_MAX) throw std::invalid_argument("cuda rmsnorm_bwd: more than 2^31-1 rows");
  // dw first: dx may overwrite x or dy.
  int64_t per = 64;
  if ((rows + per - 1) / per > 65535) per = (rows + 65534) / 65535;
  const dim3 grid(unsigned((D + kThreads - 1) / kThreads), unsigned((rows + per - 1) / per));
  rmsnorm_dw_kernel<<<grid, kThreads, 0, s>>>(x, rstd, dy, int(t), rows, D, per, dw);
  CUDA_CHECK_LAUNCH();
  rmsnorm_dx_kernel<<<unsigned(rows), kThreads, 0, s>>>(x, w, int(t), rstd, dy, D, dx);
  CUDA_CHECK_LAUNCH();
}

void rope(void* x, DType t, int64_t B, int64_t T, int heads, int d, int64_t pitch,
          const PosArg& pos, double theta, bool inverse, cudaStream_t s) {
  if (B * T <= 0) return;
  if (d > 256 || d % 2) throw std::invalid_argument("cuda rope: head dim " + std::to_string(d) + " (need even d <= 256)");
  InvFreq f{};
  for (int i = 0; i < d / 2; ++i) f.v[i] = std::pow(theta, -2.0 * i / d);
  const int64_t total = B * T * heads * (d / 2);
  rope_kernel<<<grid_for(total), kThreads, 0, s>>>(x, int(t), B * T, T, heads, d, pitch, pos, f,
                                                   inverse ? 1 : 0);
  CUDA_CHECK_LAUNCH();
}

}  // namespace cpbench::cuda
