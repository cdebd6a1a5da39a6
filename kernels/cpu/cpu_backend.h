// The CPU backend: fp32, bf16 and fp16 tensors (16-bit storage, fp32 math, rounded where the GPU
// kernels round: DESIGN "Rounding points"), host memory, OpenBLAS GEMMs, OpenMP threads. Operations execute
// inline (the "stream" is the calling thread), events are host clock reads (now_ms()).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/block_cache.h"
#include "kernels/cpu/cpu_kernels.h"

namespace cpbench {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads = 1);

  std::string name() const override { return "cpu"; }
  std::string device_name() const override;

  // 64-byte aligned host memory, dtype_size(dtype) bytes per element.
  Tensor alloc(std::vector<int64_t> shape, DType dtype, MemKind kind) override;
  void release_cached_memory() override { cache_->empty_cache(); }
  void upload(const std::vector<float>& host, Tensor& dst) override;
  std::vector<float> download(const Tensor& src) override;

  Event record_event() override;
  double elapsed_ms(const Event& a, const Event& b) override;
  void synchronize() override {}
  // OpenBLAS and OpenMP use n threads; kernels use at most n.
  void set_threads(int n) override;

  // The instruction-set level of the attention inner loops ("avx512", "avx2", "generic").
  static const char* kernel_isa();

 protected:
  // add and swiglu take one dtype for all their tensors (the other ops: the shared checks).
  void check_dtypes(const char* op, std::initializer_list<const Tensor*> tensors) const override;
  void do_fill(Tensor& t, float value) override;
  void do_copy_2d(Tensor& dst, int64_t dst_pitch, const Tensor& src, int64_t src_pitch,
                  int64_t rows, int64_t cols) override;
  void do_convert(Tensor& dst, const Tensor& src) override;
  void do_add(Tensor& out, const Tensor& a, const Tensor& b) override;
  void do_quantize_fp8(Tensor& t, Fp8Scaling scaling) override;
  void do_encode_fp8(const Tensor& src, Tensor& dst, Fp8Scaling scaling) override;
  void do_decode_fp8(const Tensor& src, Tensor& dst, Fp8Scaling scaling) override;
  void do_swiglu_fwd(const Tensor& a, const Tensor& b, Tensor& g) override;
  void do_swiglu_bwd(const Tensor& a, const Tensor& b, const Tensor& dg, Tensor& da, Tensor& db) override;
  void do_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const Tensor& A, int64_t lda, const Tensor& B, int64_t ldb, float beta, Tensor& C,
               int64_t ldc) override;
  void do_rmsnorm_fwd(const Tensor& x, const Tensor& w, float eps, int64_t rows, Tensor& y,
                      Tensor& rstd) override;
  void do_rmsnorm_bwd(const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy,
                      int64_t rows, Tensor& dx, Tensor& dw) override;
  void do_rope(Tensor& x, int64_t B, int64_t T, int heads, int d, int64_t pitch,
               const Positions& pos, double theta, bool inverse, const DocStarts& docs) override;
  void do_attn_fwd(const AttnShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                   const Positions& qpos, const Positions& kpos, Tensor& o, Tensor& lse) override;
  void do_attn_merge(const AttnShape& s, Tensor& o_acc, Tensor& lse_acc, const Tensor& o_blk,
                     const Tensor& lse_blk) override;
  void do_attn_bwd_delta(const AttnShape& s, const Tensor& o, const Tensor& dout,
                         Tensor& delta) override;
  void do_attn_sink_fwd(const AttnShape& s, const Tensor& sinks, Tensor& o, Tensor& lse) override;
  void do_attn_sink_bwd(const AttnShape& s, const Tensor& sinks, const Tensor& o, const Tensor& dout,
                        const Tensor& lse, Tensor& dsinks) override;
  void do_attn_bwd(const AttnShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                   const Tensor& dout, const Tensor& lse, const Tensor& delta,
                   const Positions& qpos, const Positions& kpos, Tensor& dq, Tensor& dk,
                   Tensor& dv) override;

 private:
  // 64-byte aligned host blocks (BlockCache sizes are multiples of 512 bytes).
  std::shared_ptr<BlockCache> cache_ = std::make_shared<BlockCache>(
      [](size_t n) { return std::aligned_alloc(64, n); }, [](void* p) { std::free(p); });
  // bf16/fp16 GEMMs widen their operands here (gemm_lowp.cpp); kept between calls.
  cpu::GemmScratch gemm_scratch_;
};

std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& opt);

}  // namespace cpbench
