// Attention in float64 by its textbook definition: for each query row, a direct softmax over the
// keys it sees (DESIGN's visibility rule written out, not AttnMask's intervals), the output, and
// the explicit softmax Jacobian for the gradients. Never the kernels' tiled algorithms: it is the
// reference the kernel tests compare against, and `cpbench verify --numerics` measures every
// strategy's error against (bench/numerics.h). One copy, in kernels/ so both can use it.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/backend.h"

namespace cpbench {

// DESIGN's visibility rule on global positions: same document, causal order, the sliding window.
bool ref_visible(const AttnShape& s, int64_t i, int64_t j);

// Brute-force count of visible pairs (the FLOP counter's reference).
int64_t ref_visible_pairs(const AttnShape& s, const Positions& qpos, const Positions& kpos);

struct AttnRef {
  std::vector<double> o, lse;      // [B,nq,hq,dv], [B,hq,nq]
  std::vector<double> dq, dk, dv;  // gradients of sum(o * dout)
  std::vector<double> dsinks;      // [hq], with sinks: the gradient of each head's sink logit
};

// What a caller adds to the plain problem.
struct AttnRefOptions {
  // --sinks (GPT-OSS): a logit per query head in every row's denominator, a key with no value.
  const std::vector<double>* sinks = nullptr;
  // Work sharing: only the (batch row, query head) pairs with (b * hq + h) % parts == part are
  // computed; the others stay 0 (lse -inf), so the parts' results sum to the whole (dk, dv sum
  // over the query heads that share a kv head).
  int part = 0, parts = 1;
};

// The problem of s (B, nq, nk, heads, head dims, GQA map, scale, mask) on q [B,nq,hq,d], k
// [B,nk,hk,d], v [B,nk,hk,dv] at positions qpos, kpos; with_grad: dq, dk, dv (and dsinks) of
// sum(o * dout), dout [B,nq,hq,dv].
AttnRef attn_reference(const AttnShape& s, const std::vector<double>& q, const std::vector<double>& k,
                       const std::vector<double>& v, const std::vector<double>& dout, const Positions& qpos,
                       const Positions& kpos, bool with_grad, const AttnRefOptions& opt = {});

}  // namespace cpbench
