// The SwiGLU kernels of DESIGN's MLP sub-layer (--block full), launched from elementwise.cu and
// run on the host emulator by tests/unit/test_cuda_emu_mlp.cpp. A header of their own: each
// file that includes a kernel header must launch every kernel in it (internal linkage, -Werror).
#pragma once
#include "kernels/cuda/device_common.cuh"

namespace cpbench::cuda::kern {
namespace {

// SwiGLU (DESIGN's MLP), element-wise in fp32 with t-typed storage: g = silu(a) * b with
// silu(a) = a * sigmoid(a). Backward, with s = sigmoid(a): da = dg * b * s * (1 + a * (1 - s)),
// db = dg * a * s. da, db may alias a, b (the block reuses their memory): each element is read
// and then written by the same thread.
__device__ __forceinline__ float sigmoid_f32(float x) { return 1.0f / (1.0f + expf(-x)); }

__global__ void swiglu_fwd_kernel(const void* a, const void* b, int t, void* g, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float x = ld_any(a, t, i);
    st_any(g, t, i, x * sigmoid_f32(x) * ld_any(b, t, i));
  }
}

__global__ void swiglu_bwd_kernel(const void* a, const void* b, const void* dg, int t, void* da, void* db,
                                  int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float x = ld_any(a, t, i), y = ld_any(b, t, i), d = ld_any(dg, t, i), s = sigmoid_f32(x);
    st_any(da, t, i, d * y * s * (1.0f + x * (1.0f - s)));
    st_any(db, t, i, d * x * s);
  }
}

}  // namespace
}  // namespace cpbench::cuda::kern
