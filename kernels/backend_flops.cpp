// Where a FLOP is counted: every backend calls these when it issues a GEMM or an attention block.
#include "kernels/backend.h"

namespace cpbench {

void Backend::count_gemm(int64_t m, int64_t n, int64_t k) {
  const double f = 2.0 * double(m) * double(n) * double(k);
  model_flops_ += f;
  hardware_flops_ += f;
}

void Backend::count_attn(const AttnShape& s, const Positions& qpos, const Positions& kpos, bool backward) {
  // Forward: QK^T and PV, 2*d FLOPs each per visible (query, key) pair and query head.
  const double fwd = 4.0 * double(s.d) * double(s.hq) * double(s.B) *
                     double(count_visible_pairs(qpos, kpos, s.mask()));
  model_flops_ += backward ? 2.0 * fwd : fwd;
  hardware_flops_ += backward ? 2.5 * fwd : fwd;  // backward recomputes the scores
}

}  // namespace cpbench
