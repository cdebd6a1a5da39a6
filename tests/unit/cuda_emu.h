// A host emulator of CUDA thread blocks, so the tensor-core attention kernels (the very source in
// kernels/cuda/*_kernel.cuh) can be run and checked on a machine without a GPU.
//
// Each CUDA thread is a fiber (ucontext); the fibers of a block run one at a time and switch only
// at __syncthreads and at warp-collective operations, which behave as documented in the PTX ISA:
//   mma.sync.m16n8k16 (bf16/f16 in, f32 accumulate)   "Matrix Fragments for mma.m16n8k16 with
//                                                       floating point type"
//   ldmatrix.x4 (.trans)                               "Warp-level matrix load instruction"
//   __shfl_xor_sync, atomicAdd on float and (sm_90) float4
// A collective waits until all 32 lanes of the warp have arrived (it checks that they all call the
// same operation), then computes every lane's result from all lanes' inputs. cp.async copies at
// once (zero-filling past src-size), with the alignment and bounds checks of the hardware.
// Dynamic shared memory starts filled with 0xFF bytes (NaN in bf16/fp16), so a kernel that reads
// what it never wrote produces NaN. Blocks run one after another.
//
// What this checks: fragment layouts, index math, masks, tile skipping, online softmax, shared
// memory addressing. What it does not: real concurrency (cp.async in flight, missing waits or
// barriers between warps that the fiber schedule happens to order), performance, and the exact
// rounding of the tensor cores (products are exact, sums in fp32 in a fixed order).
//
// Include this before any kernel header, with CPB_CUDA_EMULATION defined.
#pragma once
#ifndef CPB_CUDA_EMULATION
#error "define CPB_CUDA_EMULATION before including cuda_emu.h"
#endif
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <ucontext.h>
#include <vector_types.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif
// Static shared memory (block_sum's scratch): one copy shared by the fibers of the running block.
#undef __shared__
#define __shared__ static

namespace cpb_emu {

struct Idx3 {
  unsigned x = 0, y = 0, z = 0;
};

[[noreturn]] inline void fail(const std::string& why) {
  std::fprintf(stderr, "cuda_emu: %s\n", why.c_str());
  std::abort();
}

class Emu {
 public:
  static Emu& get() {
    static Emu e;
    return e;
  }

  Idx3 block_idx, grid_dim, block_dim;
  int cur = 0;  // running thread (fiber) index within the block

  unsigned char* smem() { return smem_.data(); }
  size_t smem_size() const { return smem_.size(); }

  // Runs `body` once per thread of one block of `nthreads` threads (a multiple of 32).
  void run_block(int nthreads, size_t smem_bytes, const std::function<void()>& body) {
    if (nthreads % 32 != 0) fail("block size must be a multiple of 32");
    body_ = &body;
    n_ = nthreads;
    smem_.assign(smem_bytes, 0xFF);
    if (int(fibers_.size()) < n_) fibers_.resize(size_t(n_));
    done_.assign(size_t(n_), false);
    block_arrived_ = 0;
    warps_.assign(size_t(n_ / 32), Warp{});
    for (int i = 0; i < n_; ++i) {
      Fiber& f = fibers_[size_t(i)];
      if (!f.stack) f.stack.reset(new char[kStack]);
      getcontext(&f.ctx);
      f.ctx.uc_stack.ss_sp = f.stack.get();
      f.ctx.uc_stack.ss_size = kStack;
      f.ctx.uc_link = &main_;
      makecontext(&f.ctx, &Emu::trampoline, 0);
    }
    int remaining = n_;
    long last_progress = -1;
    while (remaining > 0) {
      if (progress_ == last_progress) fail("deadlock: threads wait at different barriers (divergent __syncthreads or warp collective)");
      last_progress = progress_;
      for (int i = 0; i < n_; ++i) {
        if (done_[size_t(i)]) continue;
        cur = i;
        swapcontext(&main_, &fibers_[size_t(i)].ctx);
        if (done_[size_t(i)]) --remaining;
      }
    }
  }

  void syncthreads() {
    const long gen = block_gen_;
    if (++block_arrived_ == n_) {
      block_arrived_ = 0;
      ++block_gen_;
      ++progress_;
      return;
    }
    while (block_gen_ == gen) yield();
  }

  // One warp-collective operation. `op` names it (all lanes must agree); `in` is this lane's
  // input; `fn(ins, outs)` computes all 32 outputs from all 32 inputs, run by the last lane.
  template <class In, class Out, class Fn>
  Out collective(const char* op, const In& in, Fn fn) {
    static_assert(sizeof(In) <= kSlot && sizeof(Out) <= kSlot, "collective payload too large");
    const int w = cur / 32, lane = cur % 32;
    Warp& W = warps_[size_t(w)];
    if (W.arrived == 0) W.op = op;
    else if (std::strcmp(W.op, op) != 0)
      fail(std::string("warp ") + std::to_string(w) + ": lanes in different collectives (" + W.op + " vs " + op + ")");
    std::memcpy(W.in[lane], &in, sizeof(In));
    const long gen = W.gen;
    if (++W.arrived == 32) {
      In ins[32];
      Out outs[32];
      for (int l = 0; l < 32; ++l) std::memcpy(&ins[l], W.in[l], sizeof(In));
      fn(ins, outs);
      for (int l = 0; l < 32; ++l) std::memcpy(W.out[l], &outs[l], sizeof(Out));
      W.arrived = 0;
      ++W.gen;
      ++progress_;
    } else {
      while (W.gen == gen) yield();
    }
    Out out;
    std::memcpy(&out, W.out[lane], sizeof(Out));
    return out;
  }

  // Global memory the kernel may touch (cp.async sources, atomics): registered by the test.
  void allow_global(const void* p, size_t bytes) {
    globals_.emplace_back(reinterpret_cast<uintptr_t>(p), bytes);
  }
  void clear_globals() { globals_.clear(); }
  void check_global(const void* p, size_t bytes, const char* what) const {
    const auto a = reinterpret_cast<uintptr_t>(p);
    for (const auto& g : globals_)
      if (a >= g.first && a + bytes <= g.first + g.second) return;
    fail(std::string(what) + ": global address outside every tensor of the launch");
  }

  void check_smem(const void* p, size_t bytes, size_t align, const char* what) const {
    const auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(smem_.data());
    if (a < b || a + bytes > b + smem_.size())
      fail(std::string(what) + ": shared address outside the block's dynamic shared memory");
    if (a % align) fail(std::string(what) + ": misaligned shared address");
  }

 private:
  static constexpr size_t kStack = 256 * 1024;
  static constexpr size_t kSlot = 64;
  struct Fiber {
    ucontext_t ctx;
    std::unique_ptr<char[]> stack;
  };
  struct Warp {
    int arrived = 0;
    long gen = 0;
    const char* op = "";
    alignas(16) unsigned char in[32][kSlot];
    alignas(16) unsigned char out[32][kSlot];
  };

  static void trampoline() {
    Emu& e = get();
    (*e.body_)();
    e.done_[size_t(e.cur)] = true;
    ++e.progress_;
    // returning resumes uc_link (the scheduler)
  }
  void yield() { swapcontext(&fibers_[size_t(cur)].ctx, &main_); }

  const std::function<void()>* body_ = nullptr;
  int n_ = 0;
  std::vector<Fiber> fibers_;
  std::vector<bool> done_;
  std::vector<Warp> warps_;
  std::vector<unsigned char> smem_;
  std::vector<std::pair<uintptr_t, size_t>> globals_;
  ucontext_t main_;
  int block_arrived_ = 0;
  long block_gen_ = 0;
  long progress_ = 0;
};

inline unsigned char* dynamic_smem() { return Emu::get().smem(); }
inline Idx3 thread_idx() { return Idx3{unsigned(Emu::get().cur), 0, 0}; }

// Launches kernel<<<grid, threads, smem>>>(args...) on the emulator: blocks in order.
template <class... KArgs, class... Args>
void launch(void (*kernel)(KArgs...), Idx3 grid, int threads, size_t smem_bytes, const Args&... args) {
  static_assert(sizeof...(KArgs) == sizeof...(Args), "kernel argument count");
  Emu& e = Emu::get();
  e.grid_dim = grid;
  e.block_dim = Idx3{unsigned(threads), 1, 1};
  const std::function<void()> body = [&] { kernel(KArgs(args)...); };
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        e.block_idx = Idx3{x, y, z};
        e.run_block(threads, smem_bytes, body);
      }
}

}  // namespace cpb_emu

// ---- CUDA built-ins ------------------------------------------------------------------------------
#define threadIdx (::cpb_emu::thread_idx())
#define blockIdx (::cpb_emu::Emu::get().block_idx)
#define gridDim (::cpb_emu::Emu::get().grid_dim)
#define blockDim (::cpb_emu::Emu::get().block_dim)

inline void __syncthreads() { ::cpb_emu::Emu::get().syncthreads(); }
inline void __syncwarp(unsigned = 0xffffffffu) {
  struct None {
    int x;
  };
  ::cpb_emu::Emu::get().collective<None, None>("syncwarp", None{0}, [](const None*, None*) {});
}
inline float __shfl_xor_sync(unsigned mask, float v, int lane_mask) {
  if (mask != 0xffffffffu) ::cpb_emu::fail("__shfl_xor_sync: only full-warp masks are emulated");
  struct F {
    float v;
    int m;
  };
  const F r = ::cpb_emu::Emu::get().collective<F, F>("shfl_xor", F{v, lane_mask}, [](const F* in, F* out) {
    for (int l = 0; l < 32; ++l) {
      if (in[l].m != in[0].m) ::cpb_emu::fail("__shfl_xor_sync: lanes disagree on the lane mask");
      out[l] = in[l ^ in[l].m];
    }
  });
  return r.v;
}
inline float atomicAdd(float* p, float v) {  // one OS thread: a plain read-modify-write
  ::cpb_emu::Emu::get().check_global(p, sizeof(float), "atomicAdd");
  const float old = *p;
  *p = old + v;
  return old;
}
// The sm_90 vector form (global memory, 16-byte aligned, as the hardware requires).
inline float4 atomicAdd(float4* p, float4 v) {
  ::cpb_emu::Emu::get().check_global(p, sizeof(float4), "atomicAdd(float4)");
  if (reinterpret_cast<uintptr_t>(p) % 16) ::cpb_emu::fail("atomicAdd(float4): misaligned address");
  const float4 old = *p;
  p->x = old.x + v.x;
  p->y = old.y + v.y;
  p->z = old.z + v.z;
  p->w = old.w + v.w;
  return old;
}
inline int min(int a, int b) { return a < b ? a : b; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline int max(int a, int b) { return a > b ? a : b; }

// ---- the kernels' warp-level primitives (see device_common.cuh) ---------------------------------
namespace cpbench::cuda {

template <typename T>
inline float emu_half_to_float(uint16_t bits) {
  T h;
  std::memcpy(static_cast<void*>(&h), &bits, 2);
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __bfloat162float(h);
  else
    return __half2float(h);
}
template <typename T>
inline float emu_lo(uint32_t r) { return emu_half_to_float<T>(uint16_t(r & 0xffffu)); }
template <typename T>
inline float emu_hi(uint32_t r) { return emu_half_to_float<T>(uint16_t(r >> 16)); }

// D = A * B + C, m16n8k16, A row-major 16x16, B 16x8, fp32 C/D, in the PTX fragment layout.
template <typename T>
inline void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  struct In {
    uint32_t a[4], b[2];
    float c[4];
  };
  struct Out {
    float d[4];
  };
  In in;
  std::memcpy(in.a, a, sizeof(in.a));
  in.b[0] = b0;
  in.b[1] = b1;
  std::memcpy(in.c, c, sizeof(in.c));
  const Out out = ::cpb_emu::Emu::get().collective<In, Out>("mma.m16n8k16", in, [](const In* ins, Out* outs) {
    float A[16][16], B[16][8], C[16][8];
    for (int l = 0; l < 32; ++l) {
      const int g = l >> 2, t = l & 3;
      const In& x = ins[l];
      // A: a0,a1 row g cols 2t,2t+1 | a2,a3 row g+8 | a4,a5 row g cols +8 | a6,a7 row g+8 cols +8
      A[g][2 * t] = emu_lo<T>(x.a[0]);
      A[g][2 * t + 1] = emu_hi<T>(x.a[0]);
      A[g + 8][2 * t] = emu_lo<T>(x.a[1]);
      A[g + 8][2 * t + 1] = emu_hi<T>(x.a[1]);
      A[g][2 * t + 8] = emu_lo<T>(x.a[2]);
      A[g][2 * t + 9] = emu_hi<T>(x.a[2]);
      A[g + 8][2 * t + 8] = emu_lo<T>(x.a[3]);
      A[g + 8][2 * t + 9] = emu_hi<T>(x.a[3]);
      // B: b0,b1 rows 2t,2t+1 col g | b2,b3 rows 2t+8, 2t+9 col g
      B[2 * t][g] = emu_lo<T>(x.b[0]);
      B[2 * t + 1][g] = emu_hi<T>(x.b[0]);
      B[2 * t + 8][g] = emu_lo<T>(x.b[1]);
      B[2 * t + 9][g] = emu_hi<T>(x.b[1]);
      // C: c0,c1 row g cols 2t,2t+1 | c2,c3 row g+8
      C[g][2 * t] = x.c[0];
      C[g][2 * t + 1] = x.c[1];
      C[g + 8][2 * t] = x.c[2];
      C[g + 8][2 * t + 1] = x.c[3];
    }
    for (int l = 0; l < 32; ++l) {
      const int g = l >> 2, t = l & 3;
      const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
      for (int e = 0; e < 4; ++e) {
        float acc = C[rows[e]][cols[e]];
        for (int k = 0; k < 16; ++k) acc += A[rows[e]][k] * B[k][cols[e]];
        outs[l].d[e] = acc;
      }
    }
  });
  std::memcpy(c, out.d, sizeof(out.d));
}

// ldmatrix.x4: lanes 8i..8i+7 give the row addresses of matrix i; register i of lane (g, t) gets
// M_i[g][2t], M_i[g][2t+1] (no trans) or M_i[2t][g], M_i[2t+1][g] (trans); low half first.
inline void emu_ldsm(uint32_t (&r)[4], const void* row, bool trans) {
  ::cpb_emu::Emu::get().check_smem(row, 16, 16, "ldmatrix");
  struct In {
    const void* p;
    int trans;
  };
  struct Out {
    uint32_t r[4];
  };
  const Out out = ::cpb_emu::Emu::get().collective<In, Out>(trans ? "ldmatrix.trans" : "ldmatrix", In{row, trans}, [](const In* ins, Out* outs) {
    for (int l = 0; l < 32; ++l) {
      const int g = l >> 2, t = l & 3;
      for (int i = 0; i < 4; ++i) {
        uint16_t lo, hi;
        if (!ins[l].trans) {
          const auto* p = static_cast<const uint16_t*>(ins[8 * i + g].p);
          lo = p[2 * t];
          hi = p[2 * t + 1];
        } else {
          lo = static_cast<const uint16_t*>(ins[8 * i + 2 * t].p)[g];
          hi = static_cast<const uint16_t*>(ins[8 * i + 2 * t + 1].p)[g];
        }
        outs[l].r[i] = uint32_t(lo) | (uint32_t(hi) << 16);
      }
    }
  });
  std::memcpy(r, out.r, sizeof(r));
}
inline void ldsm_x4(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3, const void* row) {
  uint32_t r[4];
  emu_ldsm(r, row, false);
  r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3];
}
inline void ldsm_x4_t(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3, const void* row) {
  uint32_t r[4];
  emu_ldsm(r, row, true);
  r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3];
}

inline void cp_async16(void* smem, const void* gmem, int src_bytes) {
  ::cpb_emu::Emu::get().check_smem(smem, 16, 16, "cp.async");
  if (src_bytes < 0 || src_bytes > 16) ::cpb_emu::fail("cp.async: src-size outside [0, 16]");
  if (src_bytes > 0 && reinterpret_cast<uintptr_t>(gmem) % 16) ::cpb_emu::fail("cp.async: misaligned global address");
  if (src_bytes > 0) ::cpb_emu::Emu::get().check_global(gmem, size_t(src_bytes), "cp.async");
  std::memset(smem, 0, 16);
  if (src_bytes > 0) std::memcpy(smem, gmem, size_t(src_bytes));
}
inline void cp_async_commit() {}
template <int N>
inline void cp_async_wait() {}

}  // namespace cpbench::cuda
