// Launcher of the attention fwd kernel (attention_fwd_kernel.cuh).
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/attention_fwd_kernel.cuh"
#include "kernels/cuda/cuda_check.h"

namespace cpbench::cuda {
namespace {

using namespace kern;

template <typename T, int D>
void launch_fwd(const AttnArgs& a, cudaStream_t s) {
  FwdParams p;
  p.q = a.q;
  p.k = a.k;
  p.v = a.v;
  p.o = a.o;
  p.lse = a.lse;
  p.nq = a.nq;
  p.nk = a.nk;
  p.hq = a.hq;
  p.hk = a.hk;
  p.rep = a.rep;
  p.head0 = a.head0;
  p.mask = a.mask;
  p.scale_log2 = a.scale * kLog2e;
  p.qpos = a.qpos;
  p.kpos = a.kpos;
  constexpr int smem = fwd_smem_bytes<D>();
  auto kernel = attn_fwd_kernel<T, D>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const dim3 grid(unsigned((a.nq + kFwdBM - 1) / kFwdBM), unsigned(a.hq), unsigned(a.B));
  kernel<<<grid, kFwdThreads, smem, s>>>(p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

bool attn_head_dim_supported(int d) { return d == 64 || d == 128; }
const char* attn_supported_head_dims() { return "64, 128"; }

void attn_fwd(const AttnArgs& a, cudaStream_t s) {
  if (a.nq == 0) return;
  if (a.hq > 65535 || a.B > 65535)
    throw std::invalid_argument("cuda attn_fwd: hq and B must be <= 65535 (grid limits)");
  check_single_head_dim("cuda attn_fwd", a);
  for (auto [name, ptr] : {std::pair<const char*, const void*>{"q", a.q}, {"k", a.k}, {"v", a.v}, {"o", a.o}})
    check_aligned16("cuda attn_fwd", name, ptr);
  CPB_DISPATCH_HALF_DTYPE(a.dtype, T, CPB_DISPATCH_HEAD_DIM(a.d, D, launch_fwd<T, D>(a, s)));
}

}  // namespace cpbench::cuda
