// The element-wise inner loops of the CPU attention kernels (softmax on score tiles, masks, dS),
// compiled for several x86 ISA levels in one binary and picked at start-up from the CPU's
// features (no -march flags: the same binary runs on any x86-64). Tiles are row-major float
// blocks with a row pitch `ld`; scores are pre-multiplied by scale*log2(e), so exponentials are
// base 2.
#pragma once
#include <cstdint>

namespace cpbench::cpu {

struct VecOps {
  const char* isa;  // "avx512", "avx2", "generic"

  // S[i][j] = -inf where key position kp[j] lies outside row i's visible interval
  // [lo[i], hi[i]] (backend.h, AttnMask).
  void (*mask_tile)(float* S, int64_t ld, int rows, int cols, const int32_t* lo,
                    const int32_t* hi, const int32_t* kp);

  // Online-softmax step of the forward: for each row i, m_new = max(m[i], max_j S[i][j]);
  // S[i][j] <- exp2(S[i][j] - m_new) (0 where S is -inf); l[i] <- l[i]*exp2(m[i]-m_new) + rowsum;
  // O[i][0:d] *= exp2(m[i]-m_new); m[i] <- m_new. Rows that have seen no key keep m = -inf,
  // l = 0 and get P = 0.
  void (*softmax_tile)(float* S, int64_t ld, int rows, int cols, float* m, float* l, float* O,
                       int64_t ldo, int d);

  // Backward: P[i][j] = exp2(S[i][j] - lse2[i]) in place; rows with lse2 = -inf get P = 0.
  void (*prob_tile)(float* S, int64_t ld, int rows, int cols, const float* lse2);

  // Backward: dP[i][j] = P[i][j] * (dP[i][j] - delta[i]) in place.
  void (*dsoftmax_tile)(const float* P, float* dP, int64_t ld, int rows, int cols,
                        const float* delta);
};

// The best variant this CPU supports (chosen once). CPBENCH_ISA=generic|avx2|avx512 forces a
// lower level, for testing every variant on one machine.
const VecOps& vec_ops();
// Every variant this CPU can run, best first (tests compare them).
int vec_ops_variants(const VecOps** out, int max);

}  // namespace cpbench::cpu
