// Where a FLOP is counted: every backend calls these when it issues a GEMM or an attention block.
#include "kernels/backend.h"

namespace cpbench {

double gemm_flops(int64_t m, int64_t n, int64_t k) { return 2.0 * double(m) * double(n) * double(k); }

double attn_fwd_flops(const AttnShape& s, int64_t pairs) {
  // QK^T (2*d) and PV (2*dv) FLOPs per visible (query, key) pair and query head.
  return 2.0 * double(s.d + s.vdim()) * double(s.hq) * double(s.B) * double(pairs);
}

void Backend::count_gemm(int64_t m, int64_t n, int64_t k, double model_share) {
  const double f = gemm_flops(m, n, k);
  if (count_model_) model_flops_ += model_share * f;
  hardware_flops_ += f;
}

void Backend::count_attn(const AttnShape& s, const Positions& qpos, const Positions& kpos, bool backward) {
  const double fwd = attn_fwd_flops(s, count_visible_pairs(qpos, kpos, s.mask()));
  if (count_model_) model_flops_ += backward ? kAttnBwdModelFactor * fwd : fwd;
  hardware_flops_ += backward ? kAttnBwdHardwareFactor * fwd : fwd;
}

}  // namespace cpbench
