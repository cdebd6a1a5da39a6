// Element-wise, normalisation and rotary kernels of the CUDA backend (launched from
// elementwise.cu; also run on the host emulator by tests/unit/test_cuda_emu.cpp). Memory-bound:
// each tensor is read through the dtype-generic ld_any/st_any (a warp-uniform branch), arithmetic
// in fp32 (RoPE angles in fp64, as the CPU reference).
#pragma once
#include "kernels/cuda/device_common.cuh"

// Internal linkage (anonymous namespace): each translation unit that includes this header (the
// launcher, the emulator test) gets its own copy, so host stubs and emulated kernels never clash.
namespace cpbench::cuda::kern {
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
// Angle position of token tok: its global position, minus its document's start (docs given).
__global__ void rope_kernel(void* x, int t, int64_t rows, int64_t T, int heads, int d,
                            int64_t pitch, PosArg pos, MaskArg docs, InvFreq f, int inverse) {
  const int half = d / 2;
  const int64_t total = rows * heads * half;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int i = int(idx % half);
    const int64_t rest = idx / half;
    const int h = int(rest % heads);
    const int64_t row = rest / heads;  // b * T + token
    const int tok = int(row % T);
    const int p = pos_at(pos, tok);
    int ds, de;
    doc_bounds(docs, p, ds, de);
    const double a = double(p - ds) * f.v[i];
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
}  // namespace cpbench::cuda::kern
