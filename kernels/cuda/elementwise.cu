// Launchers of the element-wise kernels (elementwise_kernels.cuh) and PosArg conversion.
#include <climits>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/elementwise_kernels.cuh"
#include "kernels/cuda/elementwise_mlp_kernels.cuh"

namespace cpbench::cuda {

using namespace kern;

PosArg to_pos_arg(const Positions& p) {
  PosArg a;
  const int64_t n = p.count();
  if (n > INT32_MAX) throw std::invalid_argument("cuda: more than 2^31-1 positions");
  a.n = int32_t(n);
  int64_t rows = 0;
  for (int s = 0; s < p.nseg(); ++s) {
    const PosSeg& g = p.seg(s);
    if (g.count == 0) continue;  // empty segments hold no row
    if (a.nseg == kMaxPosSegs)
      throw std::invalid_argument("cuda kernels: positions " + p.str() + " have more than " +
                                  std::to_string(kMaxPosSegs) + " non-empty segments");
    rows += g.count;
    a.start[a.nseg] = int32_t(g.start);
    a.stride[a.nseg] = int32_t(g.stride);
    a.row_end[a.nseg] = int32_t(rows);
    ++a.nseg;
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

void swiglu_fwd(const void* a, const void* b, DType t, void* g, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  swiglu_fwd_kernel<<<grid_for(n), kThreads, 0, s>>>(a, b, int(t), g, n);
  CUDA_CHECK_LAUNCH();
}

void swiglu_bwd(const void* a, const void* b, const void* dg, DType t, void* da, void* db, int64_t n,
                cudaStream_t s) {
  if (n <= 0) return;
  swiglu_bwd_kernel<<<grid_for(n), kThreads, 0, s>>>(a, b, dg, int(t), da, db, n);
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
          const PosArg& pos, const int32_t* docs, int ndocs, double theta, bool inverse,
          cudaStream_t s) {
  if (B * T <= 0) return;
  if (d > 256 || d % 2) throw std::invalid_argument("cuda rope: head dim " + std::to_string(d) + " (need even d <= 256)");
  InvFreq f{};
  for (int i = 0; i < d / 2; ++i) f.v[i] = std::pow(theta, -2.0 * i / d);
  const int64_t total = B * T * heads * (d / 2);
  MaskArg dm;
  dm.docs = docs;
  dm.ndocs = ndocs;
  rope_kernel<<<grid_for(total), kThreads, 0, s>>>(x, int(t), B * T, T, heads, d, pitch, pos, dm,
                                                   f, inverse ? 1 : 0);
  CUDA_CHECK_LAUNCH();
}

}  // namespace cpbench::cuda
