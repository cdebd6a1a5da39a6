// Shared memory the tensor-core attention kernels need per block, and the device-capability check
// the CUDA backend makes with it before a launch: a kernel whose need exceeds the device's opt-in
// limit (cudaDevAttrMaxSharedMemoryPerBlockOptin: 227 KB on sm_90, 163 KB on sm_80, 99 KB on
// sm_86/sm_89) cannot launch, and the error should say which kernel, how much, and the limit.
#pragma once
#include <string>

namespace cpbench::cuda {

// Dynamic shared memory of attn_fwd (backward = false) or attn_bwd (true) built for head dim d,
// in bytes; 0 when no kernel is built for d. From the kernels' own constexpr sizes.
int attn_smem_bytes(bool backward, int d);

// "" when `need` fits in `limit`; otherwise the error message naming the kernel, the head dim,
// the need, the limit and the device (e.g. "NVIDIA GeForce RTX 4090, sm_89").
std::string smem_shortfall(const std::string& kernel, int d, int need, int limit,
                           const std::string& device);

}  // namespace cpbench::cuda
