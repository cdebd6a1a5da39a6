// Launchers of the merge, delta and sink kernels (attention_misc_kernel.cuh).
#include <climits>
#include <stdexcept>

#include "kernels/cuda/attention_misc_kernel.cuh"
#include "kernels/cuda/cuda_check.h"

namespace cpbench::cuda {
namespace {

using namespace kern;

unsigned blocks_for_rows(int64_t rows) {
  const int64_t b = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (b > INT32_MAX) throw std::invalid_argument("cuda attention: too many rows");
  return unsigned(b);
}

}  // namespace

void attn_merge(DType t, void* o_acc, float* lse_acc, const void* o_blk, const float* lse_blk,
                int64_t B, int64_t nq, int hq, int dv, cudaStream_t s) {
  const int64_t rows = B * nq * hq;
  if (rows == 0) return;
  merge_kernel<<<blocks_for_rows(rows), 32 * kWarpsPerBlock, 0, s>>>(o_acc, int(t), lse_acc, o_blk,
                                                                     lse_blk, rows, nq, hq, dv);
  CUDA_CHECK_LAUNCH();
}

void attn_bwd_delta(DType t, const void* o, const void* dout, float* delta, int64_t B, int64_t nq,
                    int hq, int dv, cudaStream_t s) {
  const int64_t rows = B * nq * hq;
  if (rows == 0) return;
  delta_kernel<<<blocks_for_rows(rows), 32 * kWarpsPerBlock, 0, s>>>(o, dout, int(t), delta, rows,
                                                                     nq, hq, dv);
  CUDA_CHECK_LAUNCH();
}

void attn_sink_fwd(DType t, const float* sinks, void* o, float* lse, int64_t B, int64_t nq, int hq, int dv,
                   cudaStream_t s) {
  const int64_t rows = B * nq * hq;
  if (rows == 0) return;
  sink_fwd_kernel<<<blocks_for_rows(rows), 32 * kWarpsPerBlock, 0, s>>>(sinks, o, int(t), lse, rows, nq, hq, dv);
  CUDA_CHECK_LAUNCH();
}

void attn_sink_bwd(DType t, const float* sinks, const void* o, const void* dout, const float* lse, float* dsinks,
                   int64_t B, int64_t nq, int hq, int dv, cudaStream_t s) {
  if (hq == 0 || B * nq == 0) return;
  sink_bwd_kernel<<<unsigned(hq), 256, 0, s>>>(sinks, o, dout, int(t), lse, dsinks, B, nq, hq, dv);
  CUDA_CHECK_LAUNCH();
}

}  // namespace cpbench::cuda
