// The compute-backend interface. Strategies call only these operations and never branch on
// the backend. Every operation is issued on the backend's compute stream: the CPU backend
// executes it inline, the CUDA backend enqueues it. Shapes are given in the comments; they are
// checked once at this boundary (see check_* in backend.cpp) and kernels trust them.
#pragma once
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "kernels/float8.h"
#include "kernels/tensor.h"

namespace cpbench {

// One interval of compute work, for the trace and for compute-busy time.
struct ComputeRecord {
  std::string name;  // "gemm", "attn_fwd", ...
  int phase;         // Phase value from comm/ (0 fwd, 1 bwd, 2 other, 3 recompute)
  double t0_ms, t1_ms;
};

// A point on the compute stream's timeline (CPU: host clock when recorded; CUDA: cudaEvent).
struct Event {
  std::shared_ptr<void> impl;
  double host_ms = 0;  // CPU backend: the time itself
};

// Document starts of a packed sequence: global positions, strictly ascending, the first 0.
// Immutable and shared by every call of a run (copying the pointer is all a call costs).
using DocStarts = std::shared_ptr<const std::vector<int64_t>>;

// Which keys a query sees (DESIGN, "Masks, documents and passes"), on global positions:
//   visible(i, j) = doc(i) == doc(j) and (!causal or j <= i)
//                   and (window == 0 or (causal and i - j < window) or (!causal and |i - j| < window))
// so query i sees the interval [lo(i), hi(i)] of positions:
//   lo = max(start(doc(i)), i - window + 1 if window),  hi = i if causal else
//   min(end(doc(i)) - 1, i + window - 1 if window). lo and hi are non-decreasing in i.
// Without documents (docs null or {0}) the sequence is one document without an end.
struct AttnMask {
  bool causal = true;
  int64_t window = 0;  // >= 0; 0 = no window
  DocStarts docs;      // null: one document

  static constexpr int64_t kNoEnd = int64_t(1) << 62;  // end of the last document
  int64_t doc_start(int64_t i) const;  // start of the document holding position i
  int64_t doc_end(int64_t i) const;    // one past its last position (kNoEnd for the last one)
  int64_t lo(int64_t i) const;
  int64_t hi(int64_t i) const;
  bool visible(int64_t i, int64_t j) const { return lo(i) <= j && j <= hi(i); }
  // Every key visible to every query (no causal rule, window or documents).
  bool full() const { return !causal && window == 0 && (!docs || docs->size() <= 1); }
};

// The attention problem of one block: queries at qpos attend keys at kpos.
//   q  [B, nq, hq, d]   k [B, nk, hk, d]   v [B, nk, hk, dv]   o [B, nq, hq, dv]   (dtype of the run)
// with d = d_qk, the dim of the scores' dot products, and dv = vdim() the values' (MLA: d = d_nope +
// d_rope = 192, dv = 128; its absorbed decode 576 and 512; 0 = d, every GQA model).
//   lse, delta [B, hq, nq] float32 (natural log)
// Query head h uses kv head (h + head0) / group(), group() = hq / hk unless `rep` says otherwise:
// a block holding a slice of a model's heads that does not start at a KV group's boundary
// (Ulysses under --uneven-heads) has rep = the model's query heads per KV head and head0 = its
// first query head's place in its KV head's group; then hk = ceil((head0 + hq) / rep) and the
// first and last KV heads may serve fewer than rep of the block's query heads.
// scale = 1/sqrt(d). Visibility: mask() (causal alone is today's rule, key pos <= query pos); a
// row that sees no key gets o = 0, lse = -inf and no gradient.
struct AttnShape {
  int64_t B = 1, nq = 0, nk = 0;
  int hq = 0, hk = 0, d = 0;
  int d_v = 0;             // the values' head dim; 0: d
  int vdim() const { return d_v > 0 ? d_v : d; }
  // v_in_k: the values are the first d_v columns of each key head's row of k (MLA's absorbed
  // decode: the latent c_kv inside its cached row [c_kv | k_R], one copy read once, as FlashMLA
  // reads it); v must then be k itself, d_v <= d. The forward only (the CPU kernels at any nq,
  // the CUDA decode kernel at nq = 1); attn_bwd refuses it.
  bool v_in_k = false;
  int64_t v_row() const { return v_in_k ? d : vdim(); }  // v's elements per (token, kv head)
  // p_e4m3: FlashAttention-3's fp8 forward (--dtype fp8): P rounded to e4m3, offset by 2^8, before
  // P·V at every nq (kernels/float8.h round_p_e4m3), on 16-bit storage holding fp8 values. Set by
  // Backend::attn_fwd from the backend's fp8 mode (set_fp8_attention), never by a caller; the CPU
  // 16-bit forward emulates it, every other kernel refuses it.
  bool p_e4m3 = false;
  int rep = 0, head0 = 0;  // the GQA map above; rep 0: hq / hk, head0 0
  int group() const { return rep > 0 ? rep : hq / hk; }
  int kv_head(int h) const { return (h + head0) / group(); }
  // The block's query heads that use kv head g: [q_begin(g), q_end(g)).
  int q_begin(int g) const { return g * group() - head0 > 0 ? g * group() - head0 : 0; }
  int q_end(int g) const { return (g + 1) * group() - head0 < hq ? (g + 1) * group() - head0 : hq; }
  bool causal = true;
  float scale = 0;      // 0 means 1/sqrt(d)
  int64_t window = 0;   // sliding window W (0 = none)
  DocStarts docs;       // packed documents (null = one document)
  AttnMask mask() const { return AttnMask{causal, window, docs}; }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;         // "cpu", "cuda"
  virtual std::string device_name() const = 0;  // CPU model or GPU name
  // Memory one rank's device has, bytes (CUDA: the GPU's total; sim: the platform's hbm_gib);
  // 0 = unknown (the CPU: its memory is shared by the ranks of the host).
  virtual int64_t device_memory_bytes() const { return 0; }

  // ---- memory -------------------------------------------------------------------------------
  // Uninitialised; poisoned with NaN in debug/verify mode (set_poison) so unwritten data shows.
  virtual Tensor alloc(std::vector<int64_t> shape, DType dtype, MemKind kind) = 0;
  MemTracker& mem() { return mem_; }
  // Returns the backend's cached free blocks to the system (between jobs of a sweep).
  virtual void release_cached_memory() {}
  void set_poison(bool on) { poison_ = on; }
  bool poisoning() const { return poison_; }
  // --dtype fp8 (forward and inference only): every attn_fwd rounds P to e4m3 (AttnShape::p_e4m3)
  // and attn_bwd refuses to run; q, k, v reach attention through quantize_fp8. Off by default.
  void set_fp8_attention(bool on) { fp8_attention_ = on; }
  bool fp8_attention() const { return fp8_attention_; }

  // Host <-> backend copies of float32 host data (converted to/from the tensor's dtype).
  virtual void upload(const std::vector<float>& host, Tensor& dst) = 0;
  virtual std::vector<float> download(const Tensor& src) = 0;
  // Raw byte copies for host-staged communication (MPI with device buffers). The CPU backend's
  // memory is host memory: device_memory() is false and communicators use the pointers directly.
  virtual bool device_memory() const { return false; }
  // false: the backend keeps no tensor data (the simulator drops uploads), so a caller may skip
  // generating large host inputs (a long KV cache's seeded rows) it would only throw away.
  virtual bool keeps_data() const { return true; }
  virtual void copy_to_host_raw(void* dst, const Tensor& src, size_t bytes);
  virtual void copy_from_host_raw(Tensor& dst, const void* src, size_t bytes);

  // ---- streams and timing -------------------------------------------------------------------
  virtual Event record_event() = 0;                           // on the compute stream
  virtual double elapsed_ms(const Event& a, const Event& b) = 0;  // b after a
  virtual void synchronize() = 0;                             // wait for all queued work
  virtual void set_threads(int n) { threads_ = n; }
  int threads() const { return threads_; }

  // Replay mode for comm_standalone: compute operations become no-ops (layout copies still run,
  // so the communication calls see the same buffers and sizes).
  void set_compute_enabled(bool on) { compute_enabled_ = on; }
  bool compute_enabled() const { return compute_enabled_; }

  // FLOPs of the compute operations issued since the last reset (DESIGN's counting: GEMM 2mnk;
  // attention fwd 4*d*hq*B*pairs; bwd model 2x fwd, hardware 2.5x fwd). Counted by the entry
  // points below, so every backend and strategy is counted the same way.
  double model_flops() const { return model_flops_; }
  double hardware_flops() const { return hardware_flops_; }
  void reset_flops() { model_flops_ = hardware_flops_ = 0; }
  // Off while a forward is repeated (--recompute): its FLOPs are hardware FLOPs only, so MFU
  // leaves a recompute out and HFU counts it (PaLM's and Megatron's convention).
  void set_model_flops_counted(bool on) { count_model_ = on; }

  // Compute intervals (for trace and compute-busy time); cleared by the harness.
  void set_phase(int phase) { phase_ = phase; }
  std::vector<ComputeRecord>& compute_log() { return compute_log_; }
  virtual double compute_busy_ms() const;  // sum of compute_log intervals

  // ---- operations -------------------------------------------------------------------------------
  // Non-virtual entry points (backend_ops.cpp): each checks its arguments (check_* below, then
  // the backend's own check_dtypes / check_attn_support), skips compute in replay mode (layout
  // ops run), counts FLOPs, brackets the work with op_begin/op_end (the compute log) and calls
  // the backend's do_* implementation, which trusts its arguments.

  // ---- element-wise and layout (run in replay mode too) -------------------------------------
  void fill(Tensor& t, float value);
  // dst[r*dst_pitch + c] = src[r*src_pitch + c] for r < rows, c < cols (elements; same dtype)
  void copy_2d(Tensor& dst, int64_t dst_pitch, const Tensor& src, int64_t src_pitch, int64_t rows,
               int64_t cols);
  // dst (float32 or dtype) = src converted (used to cast fp32 accumulators to the run dtype)
  void convert(Tensor& dst, const Tensor& src);
  // out = a + b (same shapes); out may alias a or b
  void add(Tensor& out, const Tensor& a, const Tensor& b);
  // In place: t's values rounded to fp8 e4m3 with power-of-two scales per tensor or per block of
  // 32 elements of its innermost dimension (kernels/float8.h quantize_e4m3; block: that dimension a
  // multiple of 32), kept in t's dtype, bf16, which holds them exactly. --dtype fp8's cast of q, k, v.
  void quantize_fp8(Tensor& t, Fp8Scaling scaling);
  // --comm-dtype fp8: src (fp32/bf16/fp16) encoded into dst, u8 of e4m3_encoded_bytes(src.numel())
  // bytes (codes, then scales: kernels/float8.h), and back (decode: dst of src's element count, the
  // values rounded to dst's dtype, exact for bf16 and fp32). Element-wise, run in replay mode too
  // (the bytes that travel are the encoded ones).
  void encode_fp8(const Tensor& src, Tensor& dst, Fp8Scaling scaling);
  void decode_fp8(const Tensor& src, Tensor& dst, Fp8Scaling scaling);

  // ---- GEMM (row-major) -----------------------------------------------------------------------
  // C[m,n] = alpha * op(A)[m,k] @ op(B)[k,n] + beta * C; lda/ldb/ldc are row pitches of the
  // stored matrices. C may be float32 while A, B are in the run dtype (weight-gradient accumulation).
  // `model_share` [0..1]: the part of its FLOPs that is the model's; the rest is work the caller
  // repeats on other ranks by design (a KV head's projection on each of the t/G ranks of a tp level
  // wider than the KV heads; 0: MLA latent travel's up-projection of a received block), counted as
  // hardware FLOPs only (DESIGN "FLOPs, MFU and HFU").
  void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
            const Tensor& A, int64_t lda, const Tensor& B, int64_t ldb, float beta, Tensor& C,
            int64_t ldc, double model_share = 1.0);
  // `batch` GEMMs of one shape in one call, entry i on A + i*sa, B + i*sb, C + i*sc (elements):
  // cuBLAS's strided-batched GEMM, one launch (the CPU loops; the simulator charges one launch).
  // MLA's decode absorbs W_UK into, and up-projects through W_UV, every head of a step this way.
  void gemm_batched(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const Tensor& A,
                    int64_t lda, int64_t sa, const Tensor& B, int64_t ldb, int64_t sb, float beta, Tensor& C,
                    int64_t ldc, int64_t sc, int64_t batch, double model_share = 1.0);

  // ---- MLP (SwiGLU) ----------------------------------------------------------------------------
  // Element-wise, run dtype storage, fp32 math; a, b, g (and da, db, dg) of one element count.
  // g = silu(a) * b, silu(a) = a * sigmoid(a)
  void swiglu_fwd(const Tensor& a, const Tensor& b, Tensor& g);
  // With s = sigmoid(a): da = dg * b * s * (1 + a * (1 - s)), db = dg * a * s (overwritten)
  void swiglu_bwd(const Tensor& a, const Tensor& b, const Tensor& dg, Tensor& da, Tensor& db);

  // ---- normalisation and rotary embedding -------------------------------------------------------
  // x [rows, D], w [D] -> y [rows, D] = x / rms(x) * w; rstd [rows] float32 (kept for backward)
  void rmsnorm_fwd(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd);
  // dx [rows, D] = d/dx; dw [D] float32 += sum over rows
  void rmsnorm_bwd(const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy,
                   Tensor& dx, Tensor& dw);
  // In place, x viewed as [B, T, heads, d] with row pitch `pitch` elements per token
  // (>= heads*d, so q and k can be rotated inside the packed qkv buffer). Rotate-half
  // (NeoX/Llama), token t of batch row b at global position p = pos.at(t), rotated by angle
  // p - start(doc(p)) when docs is given (position ids restart in each packed document), else p.
  // inverse=true applies the transpose rotation (the backward of RoPE).
  void rope(Tensor& x, int64_t B, int64_t T, int heads, int d, int64_t pitch, const Positions& pos,
            double theta, bool inverse, const DocStarts& docs = nullptr);

  // ---- attention --------------------------------------------------------------------------------
  // Forward of one block; writes o and lse (overwrites).
  void attn_fwd(const AttnShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                const Positions& qpos, const Positions& kpos, Tensor& o, Tensor& lse);
  // Online-softmax merge of a block's partial result into the running one:
  // o_acc, lse_acc [B,nq,hq,dv] / [B,hq,nq] <- merge(o_acc, lse_acc, o_blk, lse_blk)
  void attn_merge(const AttnShape& s, Tensor& o_acc, Tensor& lse_acc, const Tensor& o_blk,
                  const Tensor& lse_blk);
  // delta [B,hq,nq] float32 = rowsum(do * o) over dv (FlashAttention-2 preprocessing)
  void attn_bwd_delta(const AttnShape& s, const Tensor& o, const Tensor& dout, Tensor& delta);
  // Backward of one block given the FINAL lse and delta of the query rows.
  // Accumulates: dq [B,nq,hq,d] += ..., dk [B,nk,hk,d], dv [B,nk,hk,dv] += ... (float32 accumulators).
  void attn_bwd(const AttnShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                const Tensor& dout, const Tensor& lse, const Tensor& delta, const Positions& qpos,
                const Positions& kpos, Tensor& dq, Tensor& dk, Tensor& dv);
  // Attention sinks (GPT-OSS): a learned logit per query head in the softmax's denominator, with
  // no value. Applied ONCE, to the final (o, lse) of the query rows after every merge:
  //   lse' = log(e^lse + e^sink[h]),  o' = o * e^(lse - lse')   (a row with lse = -inf: o' = 0)
  // in place; sinks [hq] float32 (the logits of these hq heads). The attention backward then
  // runs unchanged on o' and lse' (the sink is a key with no value: its column of dP is 0).
  void attn_sink_fwd(const AttnShape& s, const Tensor& sinks, Tensor& o, Tensor& lse);
  // The sinks' gradient from the final o', dout and lse' of the same rows:
  //   dsinks[h] += -sum over (b, i) of e^(sink[h] - lse'[b,h,i]) * rowsum(dout * o')[b,i,h]
  // (dsinks [hq] float32 accumulates; every rank adds the rows it holds).
  void attn_sink_bwd(const AttnShape& s, const Tensor& sinks, const Tensor& o, const Tensor& dout,
                     const Tensor& lse, Tensor& dsinks);

 protected:
  // What the backend cannot take beyond the shared checks: check_dtypes sees the operation and
  // the dtypes of its tensor arguments (CPU: add and swiglu take one dtype); check_attn_support the attention
  // problem (CUDA: head dims of the tensor-core kernels). Both throw std::invalid_argument.
  virtual void check_dtypes(const char* op, std::initializer_list<const Tensor*> tensors) const;
  virtual void check_attn_support(const char* op, const AttnShape& s, DType dt) const;
  // Bracket one operation on the compute stream for the compute log (default: host clock).
  virtual int op_begin(const char* name);
  virtual void op_end(int token);

  virtual void do_fill(Tensor& t, float value) = 0;
  virtual void do_copy_2d(Tensor& dst, int64_t dst_pitch, const Tensor& src, int64_t src_pitch,
                          int64_t rows, int64_t cols) = 0;
  virtual void do_convert(Tensor& dst, const Tensor& src) = 0;
  virtual void do_add(Tensor& out, const Tensor& a, const Tensor& b) = 0;
  // Not pure: a backend without the fp8 emulation (CUDA, the simulator) throws invalid_argument.
  virtual void do_quantize_fp8(Tensor& t, Fp8Scaling scaling);
  virtual void do_encode_fp8(const Tensor& src, Tensor& dst, Fp8Scaling scaling);
  virtual void do_decode_fp8(const Tensor& src, Tensor& dst, Fp8Scaling scaling);
  virtual void do_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                       const Tensor& A, int64_t lda, const Tensor& B, int64_t ldb, float beta,
                       Tensor& C, int64_t ldc) = 0;
  // Default: do_gemm on each entry's views (the CPU backend); CUDA and the simulator override it.
  virtual void do_gemm_batched(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                               const Tensor& A, int64_t lda, int64_t sa, const Tensor& B, int64_t ldb, int64_t sb,
                               float beta, Tensor& C, int64_t ldc, int64_t sc, int64_t batch);
  // Not pure: a backend without the MLP (a test double) throws std::logic_error naming the op.
  virtual void do_swiglu_fwd(const Tensor& a, const Tensor& b, Tensor& g);
  virtual void do_swiglu_bwd(const Tensor& a, const Tensor& b, const Tensor& dg, Tensor& da, Tensor& db);
  // rows = x.numel() / w.numel() (checked)
  virtual void do_rmsnorm_fwd(const Tensor& x, const Tensor& w, float eps, int64_t rows, Tensor& y,
                              Tensor& rstd) = 0;
  virtual void do_rmsnorm_bwd(const Tensor& x, const Tensor& w, const Tensor& rstd,
                              const Tensor& dy, int64_t rows, Tensor& dx, Tensor& dw) = 0;
  virtual void do_rope(Tensor& x, int64_t B, int64_t T, int heads, int d, int64_t pitch,
                       const Positions& pos, double theta, bool inverse,
                       const DocStarts& docs) = 0;
  virtual void do_attn_fwd(const AttnShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                           const Positions& qpos, const Positions& kpos, Tensor& o,
                           Tensor& lse) = 0;
  virtual void do_attn_merge(const AttnShape& s, Tensor& o_acc, Tensor& lse_acc,
                             const Tensor& o_blk, const Tensor& lse_blk) = 0;
  virtual void do_attn_bwd_delta(const AttnShape& s, const Tensor& o, const Tensor& dout,
                                 Tensor& delta) = 0;
  virtual void do_attn_bwd(const AttnShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                           const Tensor& dout, const Tensor& lse, const Tensor& delta,
                           const Positions& qpos, const Positions& kpos, Tensor& dq, Tensor& dk,
                           Tensor& dv) = 0;
  virtual void do_attn_sink_fwd(const AttnShape& s, const Tensor& sinks, Tensor& o, Tensor& lse) = 0;
  virtual void do_attn_sink_bwd(const AttnShape& s, const Tensor& sinks, const Tensor& o,
                                const Tensor& dout, const Tensor& lse, Tensor& dsinks) = 0;

  void count_gemm(int64_t m, int64_t n, int64_t k, double model_share);
  void count_attn(const AttnShape& s, const Positions& qpos, const Positions& kpos, bool backward);

  double model_flops_ = 0, hardware_flops_ = 0;
  bool count_model_ = true;
  MemTracker mem_;
  bool poison_ = false;
  bool fp8_attention_ = false;
  bool compute_enabled_ = true;
  int threads_ = 1;
  int phase_ = 2;
  std::vector<ComputeRecord> compute_log_;

 private:
  ComputeRecord open_op_{};  // the default op_begin/op_end's interval in progress
};

struct BackendOptions {
  std::string name = "cpu";  // cpu | cuda
  int threads = 1;
  int local_rank = 0;  // CUDA: device = local_rank % device count
};
std::unique_ptr<Backend> make_backend(const BackendOptions& opt);
// Names of the backends compiled into this build.
std::vector<std::string> available_backends();

// DESIGN's FLOP counting, each formula once (kernels/backend_flops.cpp): what count_gemm and
// count_attn add per call, and what the report's expected FLOPs are built from (bench/metrics.h
// expected_job_flops), so the counter and the model it is checked against cannot drift apart.
double gemm_flops(int64_t m, int64_t n, int64_t k);      // 2*m*n*k
double attn_fwd_flops(const AttnShape& s, int64_t pairs);  // QK^T and PV: 2*(d+dv)*hq*B per visible pair
// The attention backward relative to its forward: model FLOPs 2x, hardware 2.5x (the backward
// recomputes the scores).
inline constexpr double kAttnBwdModelFactor = 2.0, kAttnBwdHardwareFactor = 2.5;

// Count of visible (query, key) pairs under the mask; exact, used for FLOP counting and by the
// kernels' tests. Closed-form per (query segment, key segment, document piece): its cost grows
// with the number of segments and documents the block touches, not with nq * nk.
int64_t count_visible_pairs(const Positions& qpos, const Positions& kpos, const AttnMask& mask);
// (Counted in 128 bits; std::overflow_error when the count does not fit in int64_t, from blocks of
// more than 2^31.5 tokens each.)
// The causal rule alone (key pos <= query pos), or every pair when !causal.
int64_t count_visible_pairs(const Positions& qpos, const Positions& kpos, bool causal);
// Whether any pair is visible: what the ring schedules ask of a block pair; never overflows.
bool any_visible_pair(const Positions& qpos, const Positions& kpos, const AttnMask& mask);

// ---- boundary checks (backend.cpp) ---------------------------------------------------------------
// The shape/dtype/size checks of the operations above, shared by the backends so both reject the
// same calls. Each throws std::invalid_argument naming the operation, the tensor and the values.
// Element counts must match the documented shapes exactly (any reshape of them is accepted).
float attn_scale(const AttnShape& s);  // s.scale, or 1/sqrt(d) when it is 0
void check_attn_shape(const AttnShape& s, const char* op);  // sizes and the mask
// window >= 0 and < 2^31; document starts strictly ascending from 0, below 2^31.
void check_attn_mask(const AttnMask& m, const char* op);
void check_attn_fwd(const AttnShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                    const Positions& qpos, const Positions& kpos, const Tensor& o,
                    const Tensor& lse);
void check_attn_merge(const AttnShape& s, const Tensor& o_acc, const Tensor& lse_acc,
                      const Tensor& o_blk, const Tensor& lse_blk);
void check_attn_bwd_delta(const AttnShape& s, const Tensor& o, const Tensor& dout,
                          const Tensor& delta);
void check_attn_bwd(const AttnShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                    const Tensor& dout, const Tensor& lse, const Tensor& delta,
                    const Positions& qpos, const Positions& kpos, const Tensor& dq,
                    const Tensor& dk, const Tensor& dv);
void check_attn_sink_fwd(const AttnShape& s, const Tensor& sinks, const Tensor& o,
                         const Tensor& lse);
void check_attn_sink_bwd(const AttnShape& s, const Tensor& sinks, const Tensor& o,
                         const Tensor& dout, const Tensor& lse, const Tensor& dsinks);
void check_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const Tensor& A,
                int64_t lda, const Tensor& B, int64_t ldb, const Tensor& C, int64_t ldc);
// Returns the row count (x.numel() / w.numel()).
int64_t check_rmsnorm_fwd(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& rstd);
int64_t check_rmsnorm_bwd(const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy,
                          const Tensor& dx, const Tensor& dw);
void check_rope(const Tensor& x, int64_t B, int64_t T, int heads, int d, int64_t pitch,
                const Positions& pos, double theta, const DocStarts& docs = nullptr);
void check_copy_2d(const Tensor& dst, int64_t dst_pitch, const Tensor& src, int64_t src_pitch,
                   int64_t rows, int64_t cols);
void check_same_numel(const char* op, const Tensor& a, const Tensor& b);

}  // namespace cpbench
