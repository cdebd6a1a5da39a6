// Launcher of the attention bwd kernel (attention_bwd_kernel.cuh).
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/attention_bwd_kernel.cuh"
#include "kernels/cuda/cuda_check.h"

namespace cpbench::cuda {
namespace {

using namespace kern;

template <typename T, int D>
void launch_bwd(const AttnArgs& a, cudaStream_t s) {
  BwdParams p;
  p.q = a.q;
  p.k = a.k;
  p.v = a.v;
  p.dout = a.dout;
  p.lse = a.lse_in;
  p.delta = a.delta;
  p.dq = a.dq;
  p.dk = a.dk;
  p.dv = a.dv_grad;
  p.nq = a.nq;
  p.nk = a.nk;
  p.hq = a.hq;
  p.hk = a.hk;
  p.rep = a.rep;
  p.head0 = a.head0;
  p.mask = a.mask;
  p.scale = a.scale;
  p.scale_log2 = a.scale * kLog2e;
  p.qpos = a.qpos;
  p.kpos = a.kpos;
  constexpr int smem = bwd_smem_bytes<D>();
  auto kernel = attn_bwd_kernel<T, D>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const dim3 grid(unsigned((a.nk + kBwdBN - 1) / kBwdBN), unsigned(a.hq), unsigned(a.B));
  kernel<<<grid, kBwdThreads, smem, s>>>(p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void attn_bwd(const AttnArgs& a, cudaStream_t s) {
  if (a.nq == 0 || a.nk == 0) return;
  if (a.hq > 65535 || a.B > 65535)
    throw std::invalid_argument("cuda attn_bwd: hq and B must be <= 65535 (grid limits)");
  check_single_head_dim("cuda attn_bwd", a);
  // q, k, v, dout: cp.async's 16-byte chunks; dq, dk, dv: four-float atomics (atomic_add4).
  for (auto [name, ptr] : {std::pair<const char*, const void*>{"q", a.q}, {"k", a.k}, {"v", a.v}, {"dout", a.dout},
                           {"dq", a.dq}, {"dk", a.dk}, {"dv", a.dv_grad}})
    check_aligned16("cuda attn_bwd", name, ptr);
  CPB_DISPATCH_HALF_DTYPE(a.dtype, T, CPB_DISPATCH_HEAD_DIM(a.d, D, launch_bwd<T, D>(a, s)));
}

}  // namespace cpbench::cuda
