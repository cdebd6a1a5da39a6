// The CPU backend's kernels (internal to kernels/cpu): fp32, and bf16/fp16 storage with fp32 math. Callers (CpuBackend) have checked
// shapes with the check_* functions of backend.cpp; these functions trust them.
// Layouts as in backend.h: q/o/dq [B, nq, hq, d], k/v/dk/dv [B, nk, hk, d], lse/delta [B, hq, nq].
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/elem.h"

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
// The merge and delta of every element type (attention_rows.h; fp32 instantiated in
// attention.cpp, bf16/fp16 in attention_lowp.cpp).
template <class T>
void attn_merge(const AttnShape& s, T* o_acc, float* lse_acc, const T* o_blk, const float* lse_blk,
                int threads);
template <class T>
void attn_bwd_delta(const AttnShape& s, const T* o, const T* dout, float* delta, int threads);
template <class T>
void attn_sink_fwd(const AttnShape& s, const float* sinks, T* o, float* lse, int threads);
template <class T>
void attn_sink_bwd(const AttnShape& s, const float* sinks, const T* o, const T* dout, const float* lse,
                   float* dsinks, int threads);

// ---- bf16/fp16 attention (attention_lowp.cpp) -----------------------------------------------------
// The emulation of the GPU kernels' rounding points (DESIGN "Rounding points") in a fixed order of
// fp32 operations that tests/unit/test_lowp_ref.h repeats bit for bit; T is bf16_t or fp16_t.
// The forward's online softmax updates its running max once per key tile of this many
// consecutive key indices, so the tile is part of the documented order (the result depends on it).
inline constexpr int kLowpKeyTile = 64;
template <class T>
void attn_fwd_lowp(const AttnShape& s, const T* q, const T* k, const T* v, const Positions& qpos,
                   const Positions& kpos, T* o, float* lse, int threads);
// Accumulates into the fp32 dq, dk, dv.
template <class T>
void attn_bwd_lowp(const AttnShape& s, const T* q, const T* k, const T* v, const T* dout,
                   const float* lse, const float* delta, const Positions& qpos,
                   const Positions& kpos, float* dq, float* dk, float* dv, int threads);

// ---- bf16/fp16 GEMM (gemm_lowp.cpp) ----------------------------------------------------------------
// C = alpha op(A) op(B) + beta C with A, B of type T and C of type T or float: A and B (and C when
// beta != 0 and C is T) are widened into fp32 scratch (exact), multiplied by gemm() above (products
// of 16-bit values are exact in fp32, sums in fp32), and a T result is rounded once. `scratch`
// holds three buffers grown on demand and kept between calls.
struct GemmScratch {
  std::vector<float> a, b, c;
};
template <class T, class C>
void gemm_lowp(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const T* A, int64_t lda, const T* B, int64_t ldb, float beta, C* Cm, int64_t ldc,
               GemmScratch& scratch, int threads);

// ---- element-wise (elementwise.cpp) -------------------------------------------------------------
// Templates on the element type T (float, bf16_t, fp16_t; elem.h): loads to fp32, fp32 math,
// stores rounded to T. Instantiated for the three types in elementwise.cpp.
template <class T>
void rmsnorm_fwd(const T* x, const T* w, float eps, int64_t rows, int64_t D, T* y, float* rstd,
                 int threads);
// dx = d/dx (overwritten); dw += sum over rows.
template <class T>
void rmsnorm_bwd(const T* x, const T* w, const float* rstd, const T* dy, int64_t rows, int64_t D,
                 T* dx, float* dw, int threads);
// Token t's angle position is pos.at(t), minus its document's start when docs is given.
template <class T>
void rope(T* x, int64_t B, int64_t Tn, int heads, int d, int64_t pitch, const Positions& pos,
          const DocStarts& docs, double theta, bool inverse, int threads);
template <class T>
void add(T* out, const T* a, const T* b, int64_t n, int threads);
// SwiGLU (DESIGN's MLP): g = silu(a) * b; backward da, db from dg (Backend::swiglu_bwd).
template <class T>
void swiglu_fwd(const T* a, const T* b, T* g, int64_t n, int threads);
template <class T>
void swiglu_bwd(const T* a, const T* b, const T* dg, T* da, T* db, int64_t n, int threads);
// x[i] = value rounded to T (once).
template <class T>
void fill(T* x, int64_t n, float value, int threads);
// dst[i] = src[i] rounded to D.
template <class D, class S>
void convert(D* dst, const S* src, int64_t n, int threads);
// Rows of `cols` elements of `elem` bytes; pitches in elements.
void copy_2d(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch, int64_t rows,
             int64_t cols, size_t elem, int threads);

}  // namespace cpbench::cpu
