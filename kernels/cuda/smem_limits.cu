// Shared-memory needs of the attention kernels (smem_limits.h), taken from their headers.
#include "kernels/cuda/attention_bwd_kernel.cuh"
#include "kernels/cuda/attention_fwd_kernel.cuh"
#include "kernels/cuda/smem_limits.h"

namespace cpbench::cuda {

int attn_smem_bytes(bool backward, int d) {
  switch (d) {
    case 64: return backward ? kern::bwd_smem_bytes<64>() : kern::fwd_smem_bytes<64>();
    case 128: return backward ? kern::bwd_smem_bytes<128>() : kern::fwd_smem_bytes<128>();
    default: return 0;
  }
}

std::string smem_shortfall(const std::string& kernel, int d, int need, int limit,
                           const std::string& device) {
  if (need <= limit) return "";
  return "cuda backend: kernel " + kernel + " (head dim " + std::to_string(d) + ") needs " +
         std::to_string(need) + " B of shared memory per block, but device " + device +
         " allows at most " + std::to_string(limit) +
         " B (cudaDevAttrMaxSharedMemoryPerBlockOptin); this head dim needs a GPU with more "
         "shared memory per block (sm_80: 163 KB, sm_90: 227 KB)";
}

}  // namespace cpbench::cuda
