// Multi-head latent attention's projections (--attention mla; DeepSeek-V2 arXiv:2405.04434 §2.1,
// DeepSeek-V3 arXiv:2412.19437 §2.1.1): what replaces w_qkv in the attention sub-layer. From the
// normed input xn [rows, D]:
//   query:  c_q = rmsnorm(xn·W_DQ)·q_norm_w [rows, r_q] (no query rank: c_q = xn)
//           q_C = c_q·W_UQ [rows, H, d_nope],  q_R = rope(c_q·W_QR) [rows, H, d_rope]
//   keys:   c_kv = rmsnorm(xn·W_DKV)·kv_norm_w [rows, r_kv]   (the latent a serving cache holds)
//           k_C = c_kv·W_UK [rows, H, d_nope],  k_R = rope(xn·W_KR) [rows, d_rope], one for all heads
//   values: v = c_kv·W_UV [rows, H, d_v]
//   q = [q_C | q_R], k = [k_C | k_R] per head: the attention core's H query and H key heads of
//   d = d_nope + d_rope (scale 1/sqrt(d)), values d_v wide; o [rows, H, d_v] then goes through
//   w_o [H·d_v, D] as in every block.
// The backward is the mirror: every weight's gradient (float32) and dxn, the sum of the paths
// into xn (W_DQ or W_UQ|W_QR, W_DKV, W_KR), accumulated in float32 and stored once. k_R's
// gradient is the sum over the H heads of dk's rope columns (one key shared by every head).
//
// This is "expanded" travel's layer: the attention core then moves q, k, v per head like any
// MHA layer of H heads. Under a tensor-parallel level of t (megatron-sp, usp --tp; Megatron-Core's
// MLA does the same) a rank holds the up-projections' columns of its H/t heads (W_UQ, W_QR, W_UK,
// W_UV) and the down-projections and norms whole (W_DQ, W_DKV, W_KR: replicated, run on the
// group's gathered rows by every member, so their GEMMs count 1/t as model FLOPs and the rest as
// hardware FLOPs). The backward's paths into xn are then each rank's partial sums (its heads'
// share), which the tp level's reduce-scatter adds; the replicated weights' gradients are partial
// sums too, as every weight gradient is. Without a tp level t = 1 and everything is whole.
//
// Latent travel (--mla-travel latent): the projections are the levels' LatentKeys
// (bench/parts/latent_keys.h); under a tp level each member's latent is its TP group's rows' (the
// down-projections are replicated), its heads the ones it holds. The forward packs this rank's latent [c_kv | k_R] (k_R
// roped) and expands no k, v; the levels up-project the blocks they hold (their heads' columns of
// W_UK, W_UV) and contract their gradients back to the latent's, adding c_kvᵀ·dk_C and c_kvᵀ·dv
// to those columns of dW_UK, dW_UV (zeroed by begin_backward); backward() then starts from the
// latent's gradient the levels left in grad() instead of dk, dv.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "bench/block/block.h"
#include "bench/parts/latent_keys.h"

namespace cpbench {

class MlaProjections final : public LatentKeys {
 public:
  // The tensor-parallel level this rank is member `tr` of (t = 1: none); `first_group`: this
  // rank's TP group is the one that adds the weights to the dump (the world's first).
  struct Tp {
    int t = 1, tr = 0;
    bool first_group = true;
  };
  // Registers the weights (seeded; this rank's columns of the up-projections) and the buffers for
  // the B x T token rows the projections see (the TP group's gathered rows under a tp level).
  // Under latent travel `latent_rows`: the most token rows a level expands and contracts at once (a
  // Ulysses member's: its group's U x B x T; 0: B x T).
  void setup(TensorRegistry& reg, Backend& be, uint64_t seed, const LayerShape& s, int64_t B, int64_t T, Tp tp,
             int64_t latent_rows = 0);
  // xn [B*T, D] (run dtype) at positions pos -> q, k [B, T, hl, d], v [B, T, hl, d_v] (run dtype),
  // hl = H/t: this rank's heads. Under latent travel k, v are not written (the levels expand them
  // from local(): latent_keys.h).
  void forward(Backend& be, const Tensor& xn, const Positions& pos, Tensor& q, Tensor& k, Tensor& v);
  // dq, dk [B, T, hl, d], dv [B, T, hl, d_v] (float32, the core's) -> dxn [B*T, D] (run dtype,
  // overwritten: this rank's share under a tp level) and the weights' gradients (overwritten).
  // xn as in the forward.
  // Under latent travel dk, dv are not read: the key side starts from grad().
  void backward(Backend& be, const Tensor& xn, const Positions& pos, const Tensor& dq, const Tensor& dk,
                const Tensor& dv, Tensor& dxn);
  // Latent travel: zeroes dW_UK, dW_UV before the ring's contractions add to them.
  void begin_backward(Backend& be);
  // ---- LatentKeys (latent travel; bench/parts/latent_keys.h) -------------------------------------
  int64_t width() const override { return s_.mla_dims.kv_rank + s_.mla_dims.d_rope; }
  const Tensor& local() const override;
  Tensor& grad() override;
  void expand(Backend& be, const Tensor& lat, int64_t rows, int h0, int heads, Tensor& k, Tensor& v,
              double model_share) override;
  void contract(Backend& be, const Tensor& lat, int64_t rows, int h0, int heads, const Tensor& dk, const Tensor& dv,
                Tensor& dlat, double model_share) override;
  // The forward GEMMs' FLOPs over `rows` tokens (w_o not included): DESIGN's count of the
  // projections, which the backward doubles (a data and a weight gradient per GEMM).
  static double forward_gemm_flops(const LayerShape& s, int64_t rows);
  // The dump's names of the projections' weights, in order (a query rank adds w_dq, q_norm_w); a
  // weight's gradient is "d" + its name.
  static std::vector<std::string> weight_names(const MlaDims& m);
  // The global shape of weight `name` or of its gradient ("d" + name); empty when `name` is neither.
  static std::vector<int64_t> weight_shape(const std::string& name, const LayerShape& s);
  // Bytes of the buffers setup registers beyond q, k, v (the latents kept for the backward and
  // the scratch of both passes; latent travel's packed latent and its gradient), for `rows` tokens
  // and `heads` local heads: the activation estimate's MLA term.
  static int64_t activation_bytes(const LayerShape& s, int64_t rows, int64_t heads, int64_t latent_rows = 0);

 private:
  TensorRegistry* reg_ = nullptr;
  LayerShape s_;
  int64_t B_ = 1, T_ = 0;
  int qin_ = 0;  // the query projections' input width: r_q, or D without a query rank
  int hl_ = 0;   // this rank's heads (H/t)
  double down_share_ = 1.0;  // the replicated down-projections' model share: 1/t
  bool latent_ = false;      // --mla-travel latent
  int64_t latent_rows_ = 0;  // its levels' largest row count (setup)
  void check_slice(int64_t rows, int h0, int heads) const;  // a level's slice fits the buffers
};

}  // namespace cpbench
