// The `sim` backend of cpbench-sim (built with smpicxx, run by smpirun; docs/SIMULATION.md).
// It executes no kernel: every call is checked like on the other backends, its FLOPs are counted
// by the same count_gemm / count_attn, and it advances the rank's simulated clock by the call's
// cost on the platform (SimPlatform: FLOPs / (peak x efficiency) or bytes / memory bandwidth).
// Tensors are logical: a rank's tensors are ranges of a few SMPI shared regions whose physical
// pages every rank shares, so their contents are meaningless, while the MemTracker still
// accounts every byte. Events and the compute log are on SMPI's simulated clock (MPI_Wtime) plus
// the rank's deferred work (kernels/tensor.h: defer_clock).
//
// The platform is read from the JSON named by the environment variable CPBENCH_SIM_PLATFORM
// (scripts/simulate.sh sets it).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/sim/sim_platform.h"

namespace cpbench {

class SimBackend final : public Backend, public SimulatedBackend {
 public:
  explicit SimBackend(SimPlatform platform);
  ~SimBackend() override;

  std::string name() const override { return "sim"; }
  bool keeps_data() const override { return false; }  // upload() drops the values
  std::string device_name() const override;
  int64_t device_memory_bytes() const override { return static_cast<int64_t>(platform_.hbm_gib * 1073741824.0); }
  const SimPlatform& platform() const override { return platform_; }

  // Any dtype; memory from SMPI's shared allocator (contents are not kept).
  Tensor alloc(std::vector<int64_t> shape, DType dtype, MemKind kind) override;
  // upload checks the size and keeps nothing; download refuses (there is no data).
  void upload(const std::vector<float>& host, Tensor& dst) override;
  std::vector<float> download(const Tensor& src) override;

  Event record_event() override;
  double elapsed_ms(const Event& a, const Event& b) override;
  void synchronize() override {}

 protected:
  void do_fill(Tensor& t, float value) override;
  void do_copy_2d(Tensor& dst, int64_t dst_pitch, const Tensor& src, int64_t src_pitch, int64_t rows,
                  int64_t cols) override;
  void do_add(Tensor& out, const Tensor& a, const Tensor& b) override;
  void do_swiglu_fwd(const Tensor& a, const Tensor& b, Tensor& g) override;
  void do_swiglu_bwd(const Tensor& a, const Tensor& b, const Tensor& dg, Tensor& da, Tensor& db) override;
  void do_convert(Tensor& dst, const Tensor& src) override;
  // --comm-dtype fp8's codec: one pass reading the values and writing the bytes (or back), memory-bound.
  void do_encode_fp8(const Tensor& src, Tensor& dst, Fp8Scaling scaling) override;
  void do_decode_fp8(const Tensor& src, Tensor& dst, Fp8Scaling scaling) override;
  void do_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const Tensor& A,
               int64_t lda, const Tensor& B, int64_t ldb, float beta, Tensor& C, int64_t ldc) override;
  void do_gemm_batched(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const Tensor& A,
                       int64_t lda, int64_t sa, const Tensor& B, int64_t ldb, int64_t sb, float beta, Tensor& C,
                       int64_t ldc, int64_t sc, int64_t batch) override;
  void do_rmsnorm_fwd(const Tensor& x, const Tensor& w, float eps, int64_t rows, Tensor& y, Tensor& rstd) override;
  void do_rmsnorm_bwd(const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy, int64_t rows,
                      Tensor& dx, Tensor& dw) override;
  void do_rope(Tensor& x, int64_t B, int64_t T, int heads, int d, int64_t pitch, const Positions& pos,
               double theta, bool inverse, const DocStarts& docs) override;
  void do_attn_fwd(const AttnShape& s, const Tensor& q, const Tensor& k, const Tensor& v, const Positions& qpos,
                   const Positions& kpos, Tensor& o, Tensor& lse) override;
  void do_attn_merge(const AttnShape& s, Tensor& o_acc, Tensor& lse_acc, const Tensor& o_blk,
                     const Tensor& lse_blk) override;
  void do_attn_bwd_delta(const AttnShape& s, const Tensor& o, const Tensor& dout, Tensor& delta) override;
  void do_attn_sink_fwd(const AttnShape& s, const Tensor& sinks, Tensor& o, Tensor& lse) override;
  void do_attn_sink_bwd(const AttnShape& s, const Tensor& sinks, const Tensor& o, const Tensor& dout,
                        const Tensor& lse, Tensor& dsinks) override;
  void do_attn_bwd(const AttnShape& s, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                   const Tensor& lse, const Tensor& delta, const Positions& qpos, const Positions& kpos, Tensor& dq,
                   Tensor& dk, Tensor& dv) override;

 private:
  // Advances this rank's simulated clock (the base class logs the op around it).
  void execute(double seconds);

  SimPlatform platform_;
  // SMPI shared regions and their free ranges (offset -> length, coalesced); see alloc.
  struct Region {
    char* base = nullptr;
    size_t size = 0;
    std::map<size_t, size_t> free;
  };
  void* take(size_t bytes, size_t* region);          // first fit, or a new region
  void give(size_t region, void* p, size_t bytes);   // back to its region's free ranges
  std::vector<Region> regions_;
  // Each kernel advances SMPI's clock as it is issued: other ranks share this rank's SimGrid host,
  // or CPBENCH_SIM_CLOCK=each (see execute).
  bool settle_each_ = false;
};

std::unique_ptr<Backend> make_sim_backend(const BackendOptions& opt);

}  // namespace cpbench
