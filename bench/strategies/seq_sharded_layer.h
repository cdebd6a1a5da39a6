// The attention layer of DESIGN for strategies that shard the SEQUENCE across ranks and keep
// every weight whole (single, ulysses, ring*, usp, allgather-kv). Everything outside the
// attention core is token-local, so it lives here once:
//   xn = rmsnorm(x)*norm_w;  qkv = xn @ w_qkv;  rope(q, k);  o = CORE(q, k, v);  y = x + o @ w_o
// and the mirror backward. A strategy supplies where its tokens are (token_positions) and the
// core (core_forward / core_backward), which is where its communication happens.
#pragma once
#include <string>
#include <vector>

#include "bench/strategies/qkv.h"
#include "bench/strategy.h"

namespace cpbench {

class SeqShardedLayer : public Strategy {
 public:
  void setup(StrategyEnv& env) override;
  void forward() override;
  void backward() override;
  void teardown() override;
  void export_tensor(const std::string& name, std::vector<float>& global) override;
  int64_t activation_bytes_estimate(const LayerShape& s, int P, const MeshSpec& m) const override;

 protected:
  // Global positions of this rank's T tokens, in the order they are stored.
  virtual Positions token_positions(const LayerShape& s, const Mesh& mesh) const = 0;
  // Allocate the core's own buffers (called at the end of setup).
  virtual void core_setup() {}
  // q_ [B,T,H,d], k_, v_ [B,T,G,d] (q, k roped) -> o_ [B,T,H,d]; keep what backward needs.
  virtual void core_forward() = 0;
  // do_ [B,T,H,d] -> dq_ [B,T,H,d], dk_, dv_ [B,T,G,d] (float32, overwritten).
  virtual void core_backward() = 0;
  virtual void core_teardown() {}
  // Add this rank's share of lse [B,H,N] (the core knows where its rows live).
  virtual void export_lse(std::vector<float>& global) = 0;
  // Extra bytes the core keeps live per rank beyond the token-local activations (estimate).
  virtual int64_t core_activation_bytes(const LayerShape& s, int P, const MeshSpec& m) const = 0;
  // Every rank holds the whole layer (single): only rank 0 exports.
  virtual bool replicated() const { return false; }

  Backend& be() { return *env_.be; }
  Mesh& mesh() { return *env_.mesh; }
  const Mesh& mesh() const { return *env_.mesh; }
  const LayerShape& shape() const { return env_.shape; }
  Tensor alloc(std::vector<int64_t> shape, MemKind kind = MemKind::activations);
  Tensor alloc_f32(std::vector<int64_t> shape, MemKind kind = MemKind::activations);
  QkvLayout qkv_layout() const;

  StrategyEnv env_;
  Positions pos_;  // this rank's tokens
  int64_t T_ = 0;  // tokens per batch row on this rank
  // inputs and weights
  Tensor x_, norm_w_, w_qkv_, w_o_, dy_;
  // forward activations kept for backward
  Tensor xn_, rstd_, qkv_, q_, k_, v_, o_, y_;
  // backward
  Tensor do_, dq_, dk_, dv_, dqkv_, dxn_, dx_, dnorm_w_, dw_qkv_, dw_o_;
  // bf16/fp16 runs: dq, dk, dv in the run dtype, in qkv_'s memory (dead once q, k, v are split
  // out of it; nothing exports it), so the conversion allocates nothing and adds no memory.
  Tensor dq_run_, dk_run_, dv_run_;
};

}  // namespace cpbench
