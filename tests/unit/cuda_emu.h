// A host emulator of CUDA thread blocks, so the tensor-core attention kernels (the very source in
// kernels/cuda/*_kernel.cuh) can be run and checked on a machine without a GPU.
//
// Each CUDA thread is a fiber (ucontext); the fibers of a block run one at a time and switch only
// at __syncthreads and at warp-collective operations, which behave as documented in the PTX ISA:
//   mma.sync.m16n8k16 (bf16/f16 in, f32 accumulate)   "Matrix Fragments for mma.m16n8k16 with
//                                                       floating point type"
//   ldmatrix.x4 (.trans)                               "Warp-level matrix load instruction"
//   cp.async.cg 16 / commit_group / wait_group N       "Data Movement and Conversion
//                                                       Instructions: cp.async"
//   __shfl_xor_sync, atomicAdd on float and (sm_90) float4
// A collective waits until all 32 lanes of the warp have arrived (it checks that they all call the
// same operation), then computes every lane's result from all lanes' inputs. Blocks run one after
// another. Dynamic shared memory starts filled with 0xFF bytes (NaN in bf16/fp16), so a kernel
// that reads what it never wrote produces NaN.
//
// cp.async: a copy is in flight from its issue until the issuing thread's cp.async.wait_group N
// retires its commit group (PTX: the wait returns when at most N of the thread's most recent
// committed groups are pending; copies not yet committed are not waited for). Only then does the
// data land in shared memory; until then the destination holds 0xFF poison, and any access to it
// (by any thread, the issuer included) fails. The global source is read at issue.
//
// Race detection: every shared-memory access made through the emulated primitives (ldmatrix,
// cp.async, st_u32, sh_ld / sh_st of device_common.cuh) is checked against a per-byte record of
// its last writer and its readers in the current barrier epoch (the span between two
// __syncthreads of the block). Two accesses to a byte by different threads, at least one a
// write, with no __syncthreads between them fail with a message naming the kernel, the byte
// offset, both threads and warps and both source lines: read-after-write, write-after-read,
// write-after-write. An issued cp.async counts as a write at its issue (the hardware may write
// any time until the wait) and again when it lands at the wait.
// Lanes of one warp: nothing warp-synchronous is assumed (Volta and later schedule lanes
// independently, and the fibers here run lane after lane between collectives), so a conflict
// between two lanes of one warp is a race too, unless a __syncwarp of that warp lies between the
// two accesses (the CUDA memory model's ordering for __syncwarp). Collectives other than
// __syncwarp (shfl, ldmatrix, mma) converge the warp but order no memory, and do not count.
// Per byte and epoch the detector keeps the set of warps that read it and two reader threads,
// which sees every cross-warp conflict; a conflict between lanes of one warp after a __syncwarp
// may go unseen when three or more of its lanes read the byte.
//
// Mutation switch: every __syncthreads, __syncwarp and cp.async wait_group in the kernels is a
// site named by its file and line (basename:line). CPBENCH_EMU_SKIP_SYNC=<basename:line> makes
// that one site a no-op for this run (it says so on stderr once, when first reached), so a test
// can check that deleting it is caught (tests/unit/cuda_emu_mutation.py). CPBENCH_EMU_SITES=<file>
// writes every site reached, one "basename:line kind" a line, when the process exits normally.
//
// What this checks: fragment layouts, index math, masks, tile skipping, online softmax, shared
// memory addressing, barriers and cp.async waits for the accesses it sees. What it does not:
// plain C++ loads and stores of shared memory that bypass the primitives above (the kernels use
// sh_ld / sh_st for those), global-memory races (except that atomics are checked for bounds),
// memory-model subtleties below a barrier epoch, performance, and the exact rounding of the
// tensor cores (products are exact, sums in fp32 in a fixed order).
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
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <unordered_map>
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
  std::fflush(stderr);
  std::abort();
}

inline const char* base_name(const char* path) {
  const char* s = std::strrchr(path, '/');
  return s ? s + 1 : path;
}

class Emu {
 public:
  static Emu& get() {
    static Emu e;
    return e;
  }

  Idx3 block_idx, grid_dim, block_dim;
  int cur = 0;                       // running thread (fiber) index within the block
  const char* kernel_name = "kernel";  // for messages (launch sets it)

  unsigned char* smem() { return smem_.data(); }
  size_t smem_size() const { return smem_.size(); }

  // Runs `body` once per thread of one block of `nthreads` threads (a multiple of 32).
  void run_block(int nthreads, size_t smem_bytes, const std::function<void()>& body) {
    if (nthreads % 32 != 0) fail("block size must be a multiple of 32");
    body_ = &body;
    n_ = nthreads;
    smem_.assign(smem_bytes, 0xFF);
    // A new block is a new barrier epoch: records of earlier blocks never conflict (their epoch
    // is older), so the shadow needs no clearing, only sizing.
    if (shadow_.size() < smem_bytes) shadow_.resize(smem_bytes);
    static_shadow_.clear();
    ++block_gen_;
    if (int(fibers_.size()) < n_) fibers_.resize(size_t(n_));
    done_.assign(size_t(n_), false);
    async_.assign(size_t(n_), Async{});
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
    // Copies still in flight when the block ends can never be read: drop them.
    for (Async& a : async_)
      for (auto& group : a.committed)
        for (const Copy& c : group) clear_pending(c);
    for (Async& a : async_)
      for (const Copy& c : a.open) clear_pending(c);
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

  // __syncwarp: a collective that also orders the shared-memory accesses of the warp's lanes.
  void syncwarp() {
    struct None {
      int x;
    };
    collective<None, None>("syncwarp", None{0}, [](const None*, None*) {});
    warps_[size_t(cur / 32)].sync_epoch = ++warp_sync_serial_;  // the same for all 32 lanes
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

  bool in_dynamic_smem(const void* p) const {
    const auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(smem_.data());
    return a >= b && a < b + smem_.size();
  }
  void check_smem(const void* p, size_t bytes, size_t align, const char* what) const {
    const auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(smem_.data());
    if (a < b || a + bytes > b + smem_.size())
      fail(std::string(what) + ": shared address outside the block's dynamic shared memory");
    if (a % align) fail(std::string(what) + ": misaligned shared address");
  }

  // ---- race detection (see the header comment) ----
  // Records an access by the running thread to `bytes` bytes of shared memory at p (dynamic
  // shared memory, or static __shared__ storage for any other address) and fails on a race.
  void shared_access(const void* p, size_t bytes, bool write, const char* what, const char* file, int line) {
    const int T = cur;
    const int w = T / 32;
    const long wep = warps_[size_t(w)].sync_epoch;
    for (size_t i = 0; i < bytes; ++i) {
      const unsigned char* byte = static_cast<const unsigned char*>(p) + i;
      Shadow& s = shadow_at(byte);
      const Access me{T, wep, file, line};
      if (s.pending >= 0)
        race(byte, me, write, what, Access{s.pending, 0, s.w.file, s.w.line},
             "access to a byte a cp.async is still copying into", "whose cp.async.wait_group has not retired the copy");
      if (s.w_gen == block_gen_ && !ordered(s.w, me))
        race(byte, me, write, what, s.w, write ? "write-after-write" : "read-after-write");
      if (write) {
        if (s.r_gen == block_gen_) {
          if (s.r_warps & ~(1u << w))  // a reader in another warp
            race(byte, me, write, what, s.r[0].thread / 32 != w ? s.r[0] : s.r_other_warp, "write-after-read");
          for (const Access& r : s.r)
            if (r.thread >= 0 && !ordered(r, me)) race(byte, me, write, what, r, "write-after-read");
        }
        s.w = me;
        s.w_gen = block_gen_;
      } else {
        if (s.r_gen != block_gen_) {
          s.r_gen = block_gen_;
          s.r_warps = 0;
          s.r[0] = me;
          s.r[1] = Access{};
          s.r_other_warp = Access{};
        } else if (s.r[0].thread == T) {
          s.r[0] = me;
        } else if (s.r[1].thread < 0 || s.r[1].thread == T) {
          s.r[1] = me;
        }
        if (w != s.r[0].thread / 32 && s.r_other_warp.thread < 0) s.r_other_warp = me;
        s.r_warps |= 1u << w;
      }
    }
  }

  // ---- cp.async (see the header comment) ----
  void cp_async_issue(void* dst, const void* src, int src_bytes, const char* file, int line) {
    shared_access(dst, 16, true, "cp.async (issue)", file, line);
    Copy c;
    c.dst = static_cast<unsigned char*>(dst);
    std::memset(c.data, 0, sizeof(c.data));  // zero-fill past src-size
    if (src_bytes > 0) std::memcpy(c.data, src, size_t(src_bytes));
    c.file = file;
    c.line = line;
    std::memset(c.dst, 0xFF, 16);  // poison until it lands
    for (int i = 0; i < 16; ++i) shadow_at(c.dst + i).pending = cur;
    async_[size_t(cur)].open.push_back(c);
  }
  void cp_async_commit() {
    Async& a = async_[size_t(cur)];
    a.committed.push_back(std::move(a.open));
    a.open.clear();
  }
  void cp_async_wait(int n, const char* file, int line) {
    if (skip_site(file, line, "cp.async.wait_group")) return;
    Async& a = async_[size_t(cur)];
    while (int(a.committed.size()) > n) {
      for (const Copy& c : a.committed.front()) {
        clear_pending(c);
        std::memcpy(c.dst, c.data, 16);
        // It lands now: a write by the issuing thread in the current epoch.
        shared_access(c.dst, 16, true, "cp.async (landing at wait_group)", c.file, c.line);
      }
      a.committed.erase(a.committed.begin());
    }
  }

  // ---- mutation sites ----
  // True when CPBENCH_EMU_SKIP_SYNC names this site (it is then a no-op); records the site.
  bool skip_site(const char* file, int line, const char* kind) {
    Site& s = sites_[std::make_pair(file, line)];
    if (!s.kind) {
      s.kind = kind;
      s.name = std::string(base_name(file)) + ":" + std::to_string(line);
      s.skip = skip_name_ != nullptr && s.name == skip_name_;
    }
    if (s.skip && !s.announced) {
      std::fprintf(stderr, "cuda_emu: CPBENCH_EMU_SKIP_SYNC: %s (%s) is a no-op in this run\n", s.name.c_str(), kind);
      s.announced = true;
    }
    return s.skip;
  }

  ~Emu() {
    const char* out = std::getenv("CPBENCH_EMU_SITES");
    if (!out) return;
    if (FILE* f = std::fopen(out, "w")) {
      for (const auto& kv : sites_) std::fprintf(f, "%s %s\n", kv.second.name.c_str(), kv.second.kind);
      std::fclose(f);
    }
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
    long sync_epoch = 0;  // serial of the warp's last __syncwarp
    const char* op = "";
    alignas(16) unsigned char in[32][kSlot];
    alignas(16) unsigned char out[32][kSlot];
  };
  struct Access {
    int thread = -1;
    long warp_epoch = 0;  // the warp's __syncwarp serial at the access
    const char* file = "?";
    int line = 0;
  };
  struct Shadow {
    Access w;          // last writer
    long w_gen = -1;   // its barrier epoch
    Access r[2];       // two readers in epoch r_gen (the first, and another thread)
    Access r_other_warp;   // the first reader in a warp other than r[0]'s
    long r_gen = -1;
    uint32_t r_warps = 0;  // warps with a read in epoch r_gen (at most 32 warps a block)
    int pending = -1;      // thread whose cp.async to this byte is in flight
  };
  struct Copy {
    unsigned char* dst;
    unsigned char data[16];
    const char* file;
    int line;
  };
  struct Async {
    std::vector<Copy> open;                    // issued, not yet committed
    std::vector<std::vector<Copy>> committed;  // oldest first
  };
  struct Site {
    const char* kind = nullptr;
    std::string name;
    bool skip = false, announced = false;
  };

  // Both accesses are in the current epoch: ordered only if by one thread, or by lanes of one
  // warp with a __syncwarp between them.
  static bool ordered(const Access& a, const Access& b) {
    return a.thread == b.thread || (a.thread / 32 == b.thread / 32 && a.warp_epoch != b.warp_epoch);
  }
  Shadow& shadow_at(const void* byte) {
    if (in_dynamic_smem(byte)) return shadow_[size_t(static_cast<const unsigned char*>(byte) - smem_.data())];
    return static_shadow_[reinterpret_cast<uintptr_t>(byte)];
  }
  std::string where(const void* byte) const {
    if (in_dynamic_smem(byte))
      return "dynamic shared byte " + std::to_string(static_cast<const unsigned char*>(byte) - smem_.data());
    char buf[64];
    std::snprintf(buf, sizeof(buf), "static __shared__ byte (host address %p)", byte);
    return buf;
  }
  [[noreturn]] void race(const void* byte, const Access& me, bool write, const char* what, const Access& other,
                         const char* kind, const char* tail = "with no __syncthreads between them") const {
    auto who = [](const Access& a) {
      return a.thread < 0 ? std::string("an unrecorded thread")
                          : "thread " + std::to_string(a.thread) + " (warp " + std::to_string(a.thread / 32) + ") at " +
                                base_name(a.file) + ":" + std::to_string(a.line);
    };
    fail(std::string("race in ") + kernel_name + " block (" + std::to_string(block_idx.x) + "," +
         std::to_string(block_idx.y) + "," + std::to_string(block_idx.z) + "): " + kind + " on " + where(byte) +
         ": " + (write ? "write" : "read") + " (" + what + ") by " + who(me) + ", after " + who(other) +
         ", " + tail);
  }
  void clear_pending(const Copy& c) {
    for (int i = 0; i < 16; ++i) shadow_at(c.dst + i).pending = -1;
  }

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
  std::vector<Shadow> shadow_;
  std::unordered_map<uintptr_t, Shadow> static_shadow_;
  std::vector<Async> async_;
  std::map<std::pair<const char*, int>, Site> sites_;
  const char* skip_name_ = std::getenv("CPBENCH_EMU_SKIP_SYNC");
  std::vector<std::pair<uintptr_t, size_t>> globals_;
  ucontext_t main_;
  int block_arrived_ = 0;
  long block_gen_ = 0;
  long warp_sync_serial_ = 0;
  long progress_ = 0;
};

// CPB_DYNAMIC_SMEM in a kernel: the caller's name is the kernel's, for race messages.
inline unsigned char* dynamic_smem(const char* kernel = __builtin_FUNCTION()) {
  Emu::get().kernel_name = kernel;
  return Emu::get().smem();
}
inline Idx3 thread_idx() { return Idx3{unsigned(Emu::get().cur), 0, 0}; }

// Launches kernel<<<grid, threads, smem>>>(args...) on the emulator: blocks in order.
template <class... KArgs, class... Args>
void launch(void (*kernel)(KArgs...), Idx3 grid, int threads, size_t smem_bytes, const Args&... args) {
  static_assert(sizeof...(KArgs) == sizeof...(Args), "kernel argument count");
  Emu& e = Emu::get();
  e.grid_dim = grid;
  e.block_dim = Idx3{unsigned(threads), 1, 1};
  e.kernel_name = "a kernel (no dynamic shared memory)";
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

// __builtin_FILE/__builtin_LINE name the call site in the kernel (the mutation switch's site).
inline void __syncthreads(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  ::cpb_emu::Emu& e = ::cpb_emu::Emu::get();
  if (!e.skip_site(file, line, "__syncthreads")) e.syncthreads();
}
inline void __syncwarp(unsigned mask = 0xffffffffu, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  if (mask != 0xffffffffu) ::cpb_emu::fail("__syncwarp: only full-warp masks are emulated");
  ::cpb_emu::Emu& e = ::cpb_emu::Emu::get();
  if (!e.skip_site(file, line, "__syncwarp")) e.syncwarp();
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
inline void emu_ldsm(uint32_t (&r)[4], const void* row, bool trans, const char* file, int line) {
  ::cpb_emu::Emu::get().check_smem(row, 16, 16, "ldmatrix");
  // Each lane's 16-byte row is read at its arrival; the warp's last lane gathers all rows right
  // after, before any other warp runs, so the data read is what the checks saw.
  ::cpb_emu::Emu::get().shared_access(row, 16, false, trans ? "ldmatrix.trans" : "ldmatrix", file, line);
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
inline void ldsm_x4(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3, const void* row,
                    const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  uint32_t r[4];
  emu_ldsm(r, row, false, file, line);
  r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3];
}
inline void ldsm_x4_t(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3, const void* row,
                      const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  uint32_t r[4];
  emu_ldsm(r, row, true, file, line);
  r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3];
}

inline void cp_async16(void* smem, const void* gmem, int src_bytes, const char* file = __builtin_FILE(),
                       int line = __builtin_LINE()) {
  ::cpb_emu::Emu& e = ::cpb_emu::Emu::get();
  e.check_smem(smem, 16, 16, "cp.async");
  if (src_bytes < 0 || src_bytes > 16) ::cpb_emu::fail("cp.async: src-size outside [0, 16]");
  if (src_bytes > 0 && reinterpret_cast<uintptr_t>(gmem) % 16) ::cpb_emu::fail("cp.async: misaligned global address");
  if (src_bytes > 0) e.check_global(gmem, size_t(src_bytes), "cp.async");
  e.cp_async_issue(smem, gmem, src_bytes, file, line);
}
inline void cp_async_commit() { ::cpb_emu::Emu::get().cp_async_commit(); }
template <int N>
inline void cp_async_wait(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  static_assert(N >= 0, "cp.async.wait_group N >= 0");
  ::cpb_emu::Emu::get().cp_async_wait(N, file, line);
}

// Shared-memory loads and stores by plain pointer (device_common.cuh: plain accesses on the GPU),
// seen by the race detector. A pointer outside the dynamic shared memory is static __shared__.
template <typename E>
inline E sh_ld(const E* p, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  ::cpb_emu::Emu::get().shared_access(p, sizeof(E), false, "load", file, line);
  E v;
  std::memcpy(static_cast<void*>(&v), p, sizeof(E));
  return v;
}
template <typename E>
inline void sh_st(E* p, E v, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  ::cpb_emu::Emu::get().shared_access(p, sizeof(E), true, "store", file, line);
  std::memcpy(static_cast<void*>(p), &v, sizeof(E));
}
// st_u32's emulation (device_common.cuh): global or dynamic shared memory.
template <typename E>
inline void emu_st_u32(E* p, uint32_t v, const char* file, int line) {
  if (::cpb_emu::Emu::get().in_dynamic_smem(p)) ::cpb_emu::Emu::get().shared_access(p, 4, true, "st_u32", file, line);
  std::memcpy(static_cast<void*>(p), &v, sizeof(v));
}

}  // namespace cpbench::cuda
