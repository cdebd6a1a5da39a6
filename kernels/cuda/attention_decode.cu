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

static_assert(kDecMaxD == kAttnDecodeMaxHeadDim, "cuda_kernels.h states the decode kernels' limit");

// The split kernel's build for NC passes over a row (decode_passes): one per NC up to kDecMaxPasses.
static_assert(kDecMaxPasses == 4, "launch_split builds NC = 1 to kDecMaxPasses");
void launch_split(int passes, dim3 grid, const DecodeParams& p, cudaStream_t s) {
  switch (passes) {
    case 1: attn_decode_split_kernel<1><<<grid, kDecThreads, 0, s>>>(p); break;
    case 2: attn_decode_split_kernel<2><<<grid, kDecThreads, 0, s>>>(p); break;
    case 3: attn_decode_split_kernel<3><<<grid, kDecThreads, 0, s>>>(p); break;
    case 4: attn_decode_split_kernel<4><<<grid, kDecThreads, 0, s>>>(p); break;
    default: throw std::logic_error("cuda attn_decode: " + std::to_string(passes) + " passes");
  }
}

}  // namespace

// From the one-pass build (d, dv <= 256, every GQA model). Wider rows (MLA) hold more registers
// and shared memory, so fewer of their blocks are resident and the splits this asks for may take
// more than one wave; each split still streams kDecMinKeys keys at least, so that costs little.
int attn_decode_target_blocks(int device) {
  int sms = 0, per_sm = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, attn_decode_split_kernel<1>, kDecThreads, 0));
  if (per_sm < 1) per_sm = 1;
  return sms * per_sm;
}

int64_t attn_decode_scratch_floats(int64_t B, int hq, int dv, int target_blocks) {
  const int64_t rows = B * hq;
  return rows * decode_max_splits(rows, target_blocks) * (int64_t(dv) + 1);
}

void attn_decode(const AttnArgs& a, float* scratch, int64_t scratch_floats, int target_blocks,
                 cudaStream_t s) {
  if (a.nq != 1) throw std::invalid_argument("cuda attn_decode: nq = " + std::to_string(a.nq) + ", not 1");
  if (a.d < 1 || a.d > kDecMaxD || a.dv < 1 || a.dv > kDecMaxD)
    throw std::invalid_argument("cuda attn_decode: head dims d = " + std::to_string(a.d) + ", dv = " +
                                std::to_string(a.dv) + " (each must be in [1, " + std::to_string(kDecMaxD) + "])");
  if (a.B > 65535) throw std::invalid_argument("cuda attn_decode: B must be <= 65535 (grid limit)");
  const int64_t rows = int64_t(a.B) * a.hq;
  if (rows == 0) return;
  if (rows > INT32_MAX) throw std::invalid_argument("cuda attn_decode: B * hq must be < 2^31");
  const DecodePlan pl = decode_plan(a.nk, rows, target_blocks);
  const int64_t need = rows * pl.splits * (int64_t(a.dv) + 1);
  if (scratch == nullptr || need > scratch_floats)
    throw std::logic_error("cuda attn_decode: scratch of " + std::to_string(scratch_floats) + " floats, " +
                           std::to_string(need) + " needed");
  const int width = a.d > a.dv ? a.d : a.dv;  // a thread's columns cover both rows (the kernel's header)
  DecodeParams p{};
  p.q = a.q;
  p.k = a.k;
  p.v = a.v;
  p.o_part = scratch;
  p.lse_part = scratch + rows * pl.splits * a.dv;
  p.o = a.o;
  p.lse = a.lse;
  p.t = int(a.dtype);
  p.nk = a.nk;
  p.hq = a.hq;
  p.hk = a.hk;
  p.rep = a.rep;
  p.head0 = a.head0;
  p.d = a.d;
  p.dv = a.dv;
  p.v_row = a.v_row > 0 ? a.v_row : a.dv;
  if (p.v_row < a.dv) throw std::invalid_argument("cuda attn_decode: v_row < dv");
  p.splits = pl.splits;
  p.chunk = pl.chunk;
  p.group = decode_group(width);
  p.vec = a.d % kDecVec == 0 && a.dv % kDecVec == 0 && p.v_row % kDecVec == 0 && aligned16(a.q) && aligned16(a.k) && aligned16(a.v);
  p.qp = pos_at(a.qpos, 0);
  p.mask = a.mask;
  p.scale_log2 = a.scale * kLog2e;
  p.kpos = a.kpos;
  launch_split(decode_passes(width), dim3(unsigned(a.hq), unsigned(pl.splits), unsigned(a.B)), p, s);
  CUDA_CHECK_LAUNCH();
  const int64_t blocks = (rows + kDecCombineWarps - 1) / kDecCombineWarps;
  attn_decode_combine_kernel<<<unsigned(blocks), 32 * kDecCombineWarps, 0, s>>>(p, int(rows));
  CUDA_CHECK_LAUNCH();
}

}  // namespace cpbench::cuda
