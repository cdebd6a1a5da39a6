// Launchers of the decode attention kernels (attention_decode_kernel.cuh): one query row per
// (batch, head), the keys split along their index, partials merged by a second kernel.
#include <climits>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/attention_decode_kernel.cuh"
#include "kernels/cuda/cuda_check.h"

namespace cpbench::cuda {
namespace {

using namespace kern;

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

int attn_decode_target_blocks(int device) {
  int sms = 0, per_sm = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, attn_decode_split_kernel, kDecThreads, 0));
  if (per_sm < 1) per_sm = 1;
  return sms * per_sm;
}

int64_t attn_decode_scratch_floats(int64_t B, int hq, int d, int target_blocks) {
  const int64_t rows = B * hq;
  return rows * decode_max_splits(rows, target_blocks) * (int64_t(d) + 1);
}

void attn_decode(const AttnArgs& a, float* scratch, int64_t scratch_floats, int target_blocks,
                 cudaStream_t s) {
  if (a.nq != 1) throw std::invalid_argument("cuda attn_decode: nq = " + std::to_string(a.nq) + ", not 1");
  if (a.d < 1 || a.d > kDecMaxD)
    throw std::invalid_argument("cuda attn_decode: head dim " + std::to_string(a.d) + " outside [1, 256]");
  if (a.B > 65535) throw std::invalid_argument("cuda attn_decode: B must be <= 65535 (grid limit)");
  const int64_t rows = int64_t(a.B) * a.hq;
  if (rows == 0) return;
  if (rows > INT32_MAX) throw std::invalid_argument("cuda attn_decode: B * hq must be < 2^31");
  const DecodePlan pl = decode_plan(a.nk, rows, target_blocks);
  const int64_t need = rows * pl.splits * (int64_t(a.d) + 1);
  if (scratch == nullptr || need > scratch_floats)
    throw std::logic_error("cuda attn_decode: scratch of " + std::to_string(scratch_floats) + " floats, " +
                           std::to_string(need) + " needed");
  DecodeParams p{};
  p.q = a.q;
  p.k = a.k;
  p.v = a.v;
  p.o_part = scratch;
  p.lse_part = scratch + rows * pl.splits * a.d;
  p.o = a.o;
  p.lse = a.lse;
  p.t = int(a.dtype);
  p.nk = a.nk;
  p.hq = a.hq;
  p.hk = a.hk;
  p.rep = a.rep;
  p.head0 = a.head0;
  p.d = a.d;
  p.splits = pl.splits;
  p.chunk = pl.chunk;
  p.group = decode_group(a.d);
  p.vec = a.d % kDecVec == 0 && aligned16(a.q) && aligned16(a.k) && aligned16(a.v);
  p.qp = pos_at(a.qpos, 0);
  p.mask = a.mask;
  p.scale_log2 = a.scale * kLog2e;
  p.kpos = a.kpos;
  attn_decode_split_kernel<<<dim3(unsigned(a.hq), unsigned(pl.splits), unsigned(a.B)), kDecThreads, 0, s>>>(p);
  CUDA_CHECK_LAUNCH();
  const int64_t blocks = (rows + kDecCombineWarps - 1) / kDecCombineWarps;
  attn_decode_combine_kernel<<<unsigned(blocks), 32 * kDecCombineWarps, 0, s>>>(p, int(rows));
  CUDA_CHECK_LAUNCH();
}

}  // namespace cpbench::cuda
