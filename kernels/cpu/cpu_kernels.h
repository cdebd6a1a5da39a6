// The CPU backend's fp32 kernels (internal to kernels/cpu). Callers (CpuBackend) have checked
// shapes with the check_* functions of backend.cpp; these functions trust them.
// Layouts as in backend.h: q/o/dq [B, nq, hq, d], k/v/dk/dv [B, nk, hk, d], lse/delta [B, hq, nq].
#pragma once
#include <cstdint>

#include "kernels/backend.h"

namespace cpbench::cpu {

// Tile sizes of the attention kernels (rows of queries x columns of keys per GEMM tile).
// Large query tiles amortise OpenBLAS's packing of each K/V tile over more rows. Tuned at d=128,
// N=1k-16k on a 2-core AVX-512 (Zen 4) VM with OpenBLAS 0.3.21 (the Cooperlake kernels); 384-512
// forward rows were within noise of each other, 128x128 tiles ~10% slower.
// CPBENCH_ATTN_TILES="fq,fk,bq,bk" overrides them for tuning experiments.
struct AttnTiles {
  int fwd_q = 512, fwd_k = 256;
  int bwd_q = 256, bwd_k = 256;
  // Partially masked tiles are computed in bands of this many query rows, each band trimmed to
  // its own last visible key, so the causal diagonal wastes at most ~band/2 columns per row.
  int band = 64;
  // Backward: query rows are processed in chunks whose per-thread dQ buffer [rows, hq, d] holds
  // at most this many floats (at least one query tile).
  int64_t bwd_dq_floats = int64_t(1) << 20;
};
const AttnTiles& attn_tiles();
// Replaces the tile sizes (tiles in [16, 4096], band in [8, 4096]); for tests and tuning, not
// thread-safe.
void set_attn_tiles(const AttnTiles& t);

// While alive, OpenBLAS runs single-threaded (each OpenMP thread calls sgemm on its own tiles);
// restores the previous OpenBLAS thread count after.
class BlasSingleThreaded {
 public:
  BlasSingleThreaded();
  ~BlasSingleThreaded();
  BlasSingleThreaded(const BlasSingleThreaded&) = delete;
  BlasSingleThreaded& operator=(const BlasSingleThreaded&) = delete;

 private:
  int saved_;
};
void blas_set_threads(int n);
int blas_threads();
const char* blas_core_name();

// ---- GEMM (attention.cpp) -----------------------------------------------------------------------
// Row-major C = alpha op(A) op(B) + beta C on `threads` OpenMP threads, each running a
// single-threaded OpenBLAS sgemm on its block of rows (or columns, when n > m) of C. The backend
// never uses OpenBLAS's own thread pool: its idle workers spin for ~0.1 s after each call and
// would compete with the OpenMP threads of the next kernel. Each element of C comes from one
// sgemm over the full k, but OpenBLAS picks kernels by block shape, so results for different
// thread counts agree to rounding, not bit for bit.
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc, int threads);

// ---- attention (attention.cpp) ------------------------------------------------------------------
void attn_fwd(const AttnShape& s, const float* q, const float* k, const float* v,
              const Positions& qpos, const Positions& kpos, float* o, float* lse, int threads);
// Accumulates into dq, dk, dv.
void attn_bwd(const AttnShape& s, const float* q, const float* k, const float* v,
              const float* dout, const float* lse, const float* delta, const Positions& qpos,
              const Positions& kpos, float* dq, float* dk, float* dv, int threads);
void attn_merge(const AttnShape& s, float* o_acc, float* lse_acc, const float* o_blk,
                const float* lse_blk, int threads);
void attn_bwd_delta(const AttnShape& s, const float* o, const float* dout, float* delta,
                    int threads);

// ---- element-wise (elementwise.cpp) -------------------------------------------------------------
void rmsnorm_fwd(const float* x, const float* w, float eps, int64_t rows, int64_t D, float* y,
                 float* rstd, int threads);
// dx = d/dx (overwritten); dw += sum over rows.
void rmsnorm_bwd(const float* x, const float* w, const float* rstd, const float* dy, int64_t rows,
                 int64_t D, float* dx, float* dw, int threads);
// Token t's angle position is pos.at(t), minus its document's start when docs is given.
void rope(float* x, int64_t B, int64_t T, int heads, int d, int64_t pitch, const Positions& pos,
          const DocStarts& docs, double theta, bool inverse, int threads);
void add(float* out, const float* a, const float* b, int64_t n, int threads);
// SwiGLU (DESIGN's MLP): g = silu(a) * b; backward da, db from dg (Backend::swiglu_bwd).
void swiglu_fwd(const float* a, const float* b, float* g, int64_t n, int threads);
void swiglu_bwd(const float* a, const float* b, const float* dg, float* da, float* db, int64_t n, int threads);
void fill(float* x, int64_t n, float value, int threads);
void copy_2d(float* dst, int64_t dst_pitch, const float* src, int64_t src_pitch, int64_t rows,
             int64_t cols, int threads);

}  // namespace cpbench::cpu
