// The device-capability check of the CUDA backend (kernels/cuda/smem_limits.h): the attention
// kernels' shared-memory needs against the opt-in limits of real devices. Pure host code: runs
// without a GPU wherever the CUDA backend is built.
#include <catch2/catch.hpp>

#include <string>

#include "kernels/cuda/smem_limits.h"

using cpbench::cuda::attn_smem_bytes;
using cpbench::cuda::smem_shortfall;

namespace {
constexpr int kOptinSm86 = 101376;  // 99 KB: sm_86 and sm_89
constexpr int kOptinSm80 = 166912;  // 163 KB
constexpr int kOptinSm90 = 232448;  // 227 KB
}  // namespace

TEST_CASE("attention kernels' shared memory per block", "[smem]") {
  // Backward: (2 BN + 4 BM)(d + 8)·2 + BN(BM + 8)·2 + 4 BM·4 with BM = BN = 64 (lse, delta and
  // the masks' per-row bounds lo, hi; issue 10 quoted 114,176 B before the row bounds).
  // Forward: (BM + 4 BN)(d + 8)·2 with BM = 128 and BN = 64 (d = 64) or 32 (d = 128).
  CHECK(attn_smem_bytes(true, 128) == 114688);
  CHECK(attn_smem_bytes(true, 64) == 65536);
  CHECK(attn_smem_bytes(false, 128) == 69632);
  CHECK(attn_smem_bytes(false, 64) == 55296);
  CHECK(attn_smem_bytes(false, 96) == 0);  // no kernel built for d = 96
}

TEST_CASE("shared-memory shortfall names kernel, need, limit and device", "[smem]") {
  for (bool bwd : {false, true})
    for (int d : {64, 128}) {
      const int need = attn_smem_bytes(bwd, d);
      CHECK(smem_shortfall("k", d, need, kOptinSm90, "0 (H100, sm_90)").empty());
      CHECK(smem_shortfall("k", d, need, kOptinSm80, "0 (A100, sm_80)").empty());
    }
  // sm_86/89: only the d = 128 backward does not fit.
  CHECK(smem_shortfall("attn_fwd", 128, attn_smem_bytes(false, 128), kOptinSm86, "x").empty());
  CHECK(smem_shortfall("attn_bwd", 64, attn_smem_bytes(true, 64), kOptinSm86, "x").empty());
  const std::string why =
      smem_shortfall("attn_bwd", 128, attn_smem_bytes(true, 128), kOptinSm86, "0 (NVIDIA GeForce RTX 4090, sm_89)");
  REQUIRE_FALSE(why.empty());
  CHECK(why.find("attn_bwd") != std::string::npos);
  CHECK(why.find("head dim 128") != std::string::npos);
  CHECK(why.find("114688 B") != std::string::npos);
  CHECK(why.find("101376 B") != std::string::npos);
  CHECK(why.find("sm_89") != std::string::npos);
}
