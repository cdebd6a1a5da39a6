// GEMMs on bf16/fp16 tensors: what a tensor core computes, on the fp32 GEMM. The product of two
// bf16 (8-bit mantissa) or fp16 (11-bit) values is exact in fp32 (24 bits), so widening A and B
// to fp32 and running sgemm is "products in fp32, sums in fp32" (in OpenBLAS's summation order,
// not a GPU's); a bf16/fp16 C is rounded once, after alpha and beta are applied (cuBLAS with
// CUBLAS_COMPUTE_32F does the same). A float C (weight gradients) is written by sgemm directly.
//
// The widened copies live in host scratch owned by the backend, grown on the first call of a size
// and kept (no allocation once warm, like the attention kernels' tiles); they are not tracked
// memory: the tracked bytes are the tensors', at 2 bytes per element as on a GPU.
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"

namespace cpbench::cpu {

namespace {

// A stored rows x cols matrix of pitch ld, widened into a compact fp32 one (pitch cols).
template <class T>
const float* widen(const T* src, int64_t rows, int64_t cols, int64_t ld, std::vector<float>& buf,
                   int threads) {
  const size_t n = size_t(rows) * size_t(cols);
  if (buf.size() < n) buf.resize(n);
  float* dst = buf.data();
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] = to_f32(src[r * ld + c]);
  return dst;
}

}  // namespace

template <class T, class C>
void gemm_lowp(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const T* A, int64_t lda, const T* B, int64_t ldb, float beta, C* Cm, int64_t ldc,
               GemmScratch& sc, int threads) {
  const int64_t a_rows = trans_a ? k : m, a_cols = trans_a ? m : k;
  const int64_t b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;
  const float* Aw = widen(A, a_rows, a_cols, lda, sc.a, threads);
  const float* Bw = widen(B, b_rows, b_cols, ldb, sc.b, threads);
  // BLAS wants pitches >= 1 even for empty matrices.
  const int64_t lda_w = a_cols > 0 ? a_cols : 1, ldb_w = b_cols > 0 ? b_cols : 1;
  if constexpr (std::is_same_v<C, float>) {
    gemm(trans_a, trans_b, m, n, k, alpha, Aw, lda_w, Bw, ldb_w, beta, Cm, ldc, threads);
  } else {
    const size_t cn = size_t(m) * size_t(n);
    if (sc.c.size() < cn) sc.c.resize(cn);
    float* Cw = sc.c.data();
    if (beta != 0.0f) widen(Cm, m, n, ldc, sc.c, threads);  // beta = 0 never reads C (BLAS)
    gemm(trans_a, trans_b, m, n, k, alpha, Aw, lda_w, Bw, ldb_w, beta, Cw, n > 0 ? n : 1, threads);
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < n; ++c) Cm[r * ldc + c] = from_f32<C>(Cw[r * n + c]);
  }
}

template void gemm_lowp<bf16_t, bf16_t>(bool, bool, int64_t, int64_t, int64_t, float, const bf16_t*, int64_t,
                                        const bf16_t*, int64_t, float, bf16_t*, int64_t, GemmScratch&, int);
template void gemm_lowp<bf16_t, float>(bool, bool, int64_t, int64_t, int64_t, float, const bf16_t*, int64_t,
                                       const bf16_t*, int64_t, float, float*, int64_t, GemmScratch&, int);
template void gemm_lowp<fp16_t, fp16_t>(bool, bool, int64_t, int64_t, int64_t, float, const fp16_t*, int64_t,
                                        const fp16_t*, int64_t, float, fp16_t*, int64_t, GemmScratch&, int);
template void gemm_lowp<fp16_t, float>(bool, bool, int64_t, int64_t, int64_t, float, const fp16_t*, int64_t,
                                       const fp16_t*, int64_t, float, float*, int64_t, GemmScratch&, int);

}  // namespace cpbench::cpu
