// Launchers of the CUDA backend's kernels (internal to kernels/cuda). Host-only declarations, so
// cuda_backend.cpp is plain C++. Callers (CudaBackendImpl) have run the check_* boundary checks
// of backend.cpp; these functions trust shapes and only reject what the kernels cannot do
// (unsupported dtype or head dim) with std::invalid_argument.
// Layouts as in backend.h: q/dq [B, nq, hq, d], k/dk [B, nk, hk, d], v/dv [B, nk, hk, dv],
// o/dout [B, nq, hq, dv], lse/delta [B, hq, nq]: d is the head dim of the scores (q . k), dv that
// of the values (MLA: 192 and 128; every GQA model: dv = d).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/tensor.h"

namespace cpbench::cuda {

// Positions as a kernel argument: up to kMaxPosSegs arithmetic segments, int32 (check_positions
// bounds every position by 2^31-1), held by value in the kernel's parameters. Row i >= n is
// clamped to row n-1 (rows past the end are padding rows of a tile and are never stored).
constexpr int kMaxPosSegs = 16;
struct PosArg {
  int32_t nseg = 0;
  int32_t n = 0;                      // total rows
  int32_t start[kMaxPosSegs] = {};    // position of the segment's first row
  int32_t stride[kMaxPosSegs] = {};
  int32_t row_end[kMaxPosSegs] = {};  // one past the segment's last row (cumulative counts)
};
// Throws std::invalid_argument when p has more than kMaxPosSegs non-empty segments.
PosArg to_pos_arg(const Positions& p);

// The mask as a kernel argument (backend.h, AttnMask): row at position p sees keys in
// [lo(p), hi(p)]. docs: document starts in device memory (int32, ascending, docs[0] = 0), or
// null for one document.
struct MaskArg {
  int32_t causal = 1;
  int32_t window = 0;  // 0 = none
  const int32_t* docs = nullptr;
  int32_t ndocs = 0;
};

// ---- element-wise (elementwise.cu); any dtype per tensor, fp32 arithmetic --------------------
void fill(void* x, DType t, int64_t n, float value, cudaStream_t s);
void convert(void* dst, DType dt, const void* src, DType st, int64_t n, cudaStream_t s);
void add(void* out, DType ot, const void* a, DType at, const void* b, DType bt, int64_t n,
         cudaStream_t s);
// SwiGLU of DESIGN's MLP, every tensor in dtype t: g = silu(a) * b; da, db (may alias a, b).
void swiglu_fwd(const void* a, const void* b, DType t, void* g, int64_t n, cudaStream_t s);
void swiglu_bwd(const void* a, const void* b, const void* dg, DType t, void* da, void* db, int64_t n,
                cudaStream_t s);
// C[r*ldc + c] = beta * C[...] for r < m, c < n (beta == 0 writes 0): GEMM with k == 0.
void scale_2d(void* C, DType t, int64_t m, int64_t n, int64_t ldc, float beta, cudaStream_t s);
// x, w, y in dtype t; rstd [rows] fp32.
void rmsnorm_fwd(const void* x, const void* w, DType t, float eps, int64_t rows, int64_t D,
                 void* y, float* rstd, cudaStream_t s);
// dx overwritten (may alias x or dy), dw [D] fp32 accumulated.
void rmsnorm_bwd(const void* x, const void* w, DType t, const float* rstd, const void* dy,
                 int64_t rows, int64_t D, void* dx, float* dw, cudaStream_t s);
// Token t is rotated by angle position pos(t) - (start of its document, when docs is given).
void rope(void* x, DType t, int64_t B, int64_t T, int heads, int d, int64_t pitch,
          const PosArg& pos, const int32_t* docs, int ndocs, double theta, bool inverse,
          cudaStream_t s);

// ---- attention (attention_fwd.cu, attention_bwd.cu, attention_misc.cu) ----------------------
struct AttnArgs {
  DType dtype = DType::bf16;  // of q, k, v, o, dout (tensor cores: bf16 or fp16; else any)
  int B = 1, nq = 0, nk = 0, hq = 0, hk = 0;
  int d = 0;   // head dim of q and k (the scores' dot products; scale = 1/sqrt(d) by default)
  int dv = 0;  // head dim of v, o and dout (AttnShape::vdim(), resolved: never 0)
  int v_row = 0;  // v's elements per (token, kv head): dv, or d when v lies inside k's rows (the
                  // decode kernel only: AttnShape::v_in_k); 0 = dv
  int rep = 1, head0 = 0;  // GQA map: query head h uses kv head (h + head0) / rep (AttnShape)
  MaskArg mask;
  float scale = 0;  // resolved (never 0)
  PosArg qpos, kpos;
  const void* q = nullptr;     // [B, nq, hq, d]
  const void* k = nullptr;     // [B, nk, hk, d]
  const void* v = nullptr;     // [B, nk, hk, dv]
  void* o = nullptr;           // fwd out [B, nq, hq, dv]
  float* lse = nullptr;        // fwd out [B, hq, nq]
  const void* dout = nullptr;  // bwd in  [B, nq, hq, dv]
  const float* lse_in = nullptr;   // bwd in [B, hq, nq] (final)
  const float* delta = nullptr;    // bwd in [B, hq, nq]
  float* dq = nullptr;         // bwd += [B, nq, hq, d]
  float* dk = nullptr;         // bwd += [B, nk, hk, d]
  float* dv_grad = nullptr;    // bwd += [B, nk, hk, dv] (v's gradient; `dv` is the head dim)
};
// bf16/fp16 (nq > 1, and every attn_bwd): the tensor-core kernels, built for these head dims
// with dv == d only.
bool attn_head_dim_supported(int d);
const char* attn_supported_head_dims();  // "64, 128"
void attn_fwd(const AttnArgs& a, cudaStream_t s);
void attn_bwd(const AttnArgs& a, cudaStream_t s);
// fp32: SIMT kernels (attention_f32.cu), any d, dv <= kAttnF32MaxHeadDim; for verification, not
// speed.
constexpr int kAttnF32MaxHeadDim = 1024;
void attn_fwd_f32(const AttnArgs& a, cudaStream_t s);
void attn_bwd_f32(const AttnArgs& a, cudaStream_t s);
// Decode (attention_decode.cu): nq == 1, any dtype (f32, bf16, f16), any d, dv <=
// kAttnDecodeMaxHeadDim (MLA's absorbed decode: d = 576, dv = 512). The keys are split along
// their index (flash decoding) and the partials merged by a second kernel; the partials live in
// `scratch` (device memory, attn_decode_scratch_floats floats at least).
// target_blocks: the blocks that fill the device once (SMs x resident split blocks per SM, from
// attn_decode_target_blocks); it sets the split count (attention_decode_kernel.cuh, decode_plan).
constexpr int kAttnDecodeMaxHeadDim = 1024;
int attn_decode_target_blocks(int device);
// Independent of nk: one buffer of this size serves every decode step of a run. The partials are
// rows of dv floats (the value head dim).
int64_t attn_decode_scratch_floats(int64_t B, int hq, int dv, int target_blocks);
void attn_decode(const AttnArgs& a, float* scratch, int64_t scratch_floats, int target_blocks,
                 cudaStream_t s);
// The row kernels on o-shaped tensors: rows = B*nq*hq of dv elements (the value head dim), o_acc,
// o_blk, o, dout in dtype t (any), lse, delta fp32.
void attn_merge(DType t, void* o_acc, float* lse_acc, const void* o_blk, const float* lse_blk,
                int64_t B, int64_t nq, int hq, int dv, cudaStream_t s);
void attn_bwd_delta(DType t, const void* o, const void* dout, float* delta, int64_t B, int64_t nq,
                    int hq, int dv, cudaStream_t s);
// Attention sinks (Backend::attn_sink_fwd / attn_sink_bwd): o in dtype t, sinks, lse, dsinks fp32.
void attn_sink_fwd(DType t, const float* sinks, void* o, float* lse, int64_t B, int64_t nq, int hq, int dv,
                   cudaStream_t s);
void attn_sink_bwd(DType t, const float* sinks, const void* o, const void* dout, const float* lse, float* dsinks,
                   int64_t B, int64_t nq, int hq, int dv, cudaStream_t s);

}  // namespace cpbench::cuda
