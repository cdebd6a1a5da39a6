// SimBackend: checks, FLOP counting and simulated time of every backend call (see sim_backend.h).
#include "kernels/sim/sim_backend.h"

#include <mpi.h>
#include <simgrid/host.h>
#include <simgrid/s4u/Host.hpp>
#include <smpi/smpi.h>

#include <malloc.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <limits>
#include <new>
#include <stdexcept>

namespace cpbench {

namespace {

// Tensors are carved out of shared regions of at least kMinRegion bytes, at kAlign (see alloc).
constexpr size_t kMinRegion = size_t(256) << 20;
constexpr size_t kAlign = 256;

// The platform whose collective costs the communicator pays (set_sim_collective_costs takes plain
// functions; one backend per rank, and SMPI privatizes this global per rank).
const SimPlatform* g_collective_platform = nullptr;
double collective_extra(int64_t chunk_bytes, int peers) {
  return g_collective_platform ? g_collective_platform->nccl_extra_seconds(double(chunk_bytes), peers) : 0.0;
}
double op_fixed(bool one_node) {
  return g_collective_platform ? g_collective_platform->op_fixed_seconds(one_node) : 0.0;
}
double p2p_time(int64_t bytes, bool one_node) {
  return g_collective_platform ? g_collective_platform->transfer_seconds(double(bytes), one_node) : 0.0;
}

}  // namespace

SimBackend::SimBackend(SimPlatform platform) : platform_(std::move(platform)) {
  // Every simulated rank is a context of this one process and builds its host-side inputs (up
  // to hundreds of MiB each, zero-filled: bench/inputs.cpp) one after the other. Keeping freed
  // blocks in the heap instead of returning them to the kernel spares a page fault per 4 KiB of
  // each of them, which otherwise dominates the simulation's run time at scale.
  // (glibc caps M_MMAP_THRESHOLD at 32 MiB, so large blocks are kept off mmap with M_MMAP_MAX.)
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
  const char* clock = std::getenv("CPBENCH_SIM_CLOCK");
  const std::string mode = clock ? clock : "deferred";
  if (mode != "deferred" && mode != "each")
    throw std::invalid_argument("CPBENCH_SIM_CLOCK='" + mode + "': expected 'deferred' (the default) or 'each'");
  settle_each_ = mode == "each" || simgrid::s4u::Host::current()->get_actor_count() > 1;
  g_collective_platform = &platform_;
  set_sim_collective_costs({collective_extra, op_fixed, p2p_time});
}

std::string SimBackend::device_name() const {
  return platform_.device + " (simulated, platform " + platform_.name + ")";
}

// ---- memory ---------------------------------------------------------------------------------------
// A simulated tensor's contents are never read or written (no kernel runs; SMPI moves no data
// between shared buffers), so a rank's tensors are carved out of a few large SMPI shared regions
// whose physical pages every rank shares (simulate.sh: smpi/shared-malloc:local, this being its
// only call site): a handful of mappings per rank, and memory that does not grow with the ranks'
// tensors. A strategy that holds the whole sequence's K and V on every rank (allgather-kv) thus
// costs the machine its host-side bookkeeping only, at thousands of ranks. Tensors keep distinct
// address ranges (the communicator refuses overlapping send and receive buffers). The MemTracker
// still accounts every tensor's bytes, so peak memory and --mem-limit are those of the real run.
void* SimBackend::take(size_t bytes, size_t* region) {
  for (size_t r = 0; r < regions_.size(); ++r) {  // first fit
    auto& free = regions_[r].free;
    for (auto it = free.begin(); it != free.end(); ++it) {
      if (it->second < bytes) continue;
      const size_t off = it->first, len = it->second;
      free.erase(it);
      if (len > bytes) free.emplace(off + bytes, len - bytes);
      *region = r;
      return regions_[r].base + off;
    }
  }
  // None fits: a new region, growing geometrically so that a rank keeps few of them.
  const size_t size = std::max({bytes, regions_.empty() ? kMinRegion : 2 * regions_.back().size, kMinRegion});
  void* p = SMPI_SHARED_MALLOC(size);
  if (!p) throw std::bad_alloc();
  regions_.push_back(Region{static_cast<char*>(p), size, {}});
  if (size > bytes) regions_.back().free.emplace(bytes, size - bytes);
  *region = regions_.size() - 1;
  return p;
}

void SimBackend::give(size_t region, void* p, size_t bytes) {
  auto& free = regions_[region].free;
  size_t off = size_t(static_cast<char*>(p) - regions_[region].base), len = bytes;
  auto next = free.lower_bound(off);
  if (next != free.end() && off + len == next->first) {  // merge with the free range after it
    len += next->second;
    next = free.erase(next);
  }
  if (next != free.begin()) {  // and with the one before it
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      prev->second += len;
      return;
    }
  }
  free.emplace(off, len);
}

Tensor SimBackend::alloc(std::vector<int64_t> shape, DType dtype, MemKind kind) {
  Tensor t;
  t.dtype = dtype;
  t.kind = kind;
  t.shape = std::move(shape);
  const int64_t bytes = t.numel() * static_cast<int64_t>(dtype_size(dtype));  // numel validates
  const size_t block = (static_cast<size_t>(std::max<int64_t>(bytes, 1)) + kAlign - 1) / kAlign * kAlign;
  size_t region = 0;
  void* p = take(block, &region);
  mem_.on_alloc(kind, bytes);
  // The backend outlives its tensors (contract): the range goes back to its region.
  t.holder = std::shared_ptr<void>(p, [this, kind, bytes, block, region](void* ptr) {
    mem_.on_free(kind, bytes);
    give(region, ptr, block);
  });
  t.data = p;
  return t;
}

SimBackend::~SimBackend() {
  if (g_collective_platform == &platform_) {
    set_sim_collective_costs({});
    g_collective_platform = nullptr;
  }
  for (const Region& r : regions_) SMPI_SHARED_FREE(r.base);
}

void SimBackend::upload(const std::vector<float>& host, Tensor& dst) {
  if (static_cast<int64_t>(host.size()) != dst.numel())
    throw std::invalid_argument("upload: " + std::to_string(host.size()) + " host values for a tensor of " +
                                std::to_string(dst.numel()) + " elements " + dst.shape_str());
}

std::vector<float> SimBackend::download(const Tensor& src) {
  throw std::runtime_error("download of " + src.shape_str() +
                           ": the sim backend keeps no tensor data (a simulated run times the work, it does not "
                           "compute it); verify and --dump need --backend cpu or cuda");
}

// ---- time -----------------------------------------------------------------------------------------
Event SimBackend::record_event() {
  Event e;
  e.host_ms = now_ms();  // SMPI's clock plus the work deferred so far
  return e;
}

double SimBackend::elapsed_ms(const Event& a, const Event& b) { return b.host_ms - a.host_ms; }

// The base class's entry points check, gate (replay mode), count FLOPs and log each op around
// these do_* calls on the simulated clock; each adds its cost on the platform to the rank's
// deferred clock, which the next MPI call settles (kernels/tensor.h).
// On a host that several ranks share (the `local` platform's cores_per_node), SimGrid divides its
// speed among the ranks computing at a time, so a kernel's duration is known only once SimGrid
// has run it: there each kernel is settled at once, as it is issued (CPBENCH_SIM_CLOCK=each does
// that everywhere: the ctest comparing both modes).
// The part of a kernel that runs while the bytes of one of this rank's point-to-point transfers
// move (a ring hop the strategy overlaps with it, from its post for its modelled duration) runs
// 1 + x times slower, x the platform's overlap interference; the rest at its own speed.
void SimBackend::execute(double seconds) {
  const double x = platform_.compute_slowdown;
  const double window = x > 0 ? (p2p_moving_until_ms() - now_ms()) * 1e-3 : 0.0;
  if (window > 0) seconds = seconds * (1 + x) <= window ? seconds * (1 + x) : window + (seconds - window / (1 + x));
  defer_clock(seconds);
  if (settle_each_) settle_clock();
}

// ---- element-wise and layout (memory-bound: bytes read + written) ---------------------------------
void SimBackend::do_fill(Tensor& t, float) { execute(platform_.memory_seconds(double(t.bytes()))); }

void SimBackend::do_copy_2d(Tensor& dst, int64_t, const Tensor&, int64_t, int64_t rows, int64_t cols) {
  execute(platform_.memory_seconds(2.0 * double(rows) * double(cols) * double(dtype_size(dst.dtype))));
}

void SimBackend::do_add(Tensor& out, const Tensor&, const Tensor&) {
  execute(platform_.memory_seconds(3.0 * double(out.bytes())));
}

// SwiGLU: memory-bound like the other element-wise kernels (its few FLOPs per element hide
// behind the loads): a, b read and g written; backward reads a, b, dg and writes da, db.
void SimBackend::do_swiglu_fwd(const Tensor& a, const Tensor& b, Tensor& g) {
  execute(platform_.memory_seconds(double(a.bytes() + b.bytes() + g.bytes())));
}

void SimBackend::do_swiglu_bwd(const Tensor& a, const Tensor& b, const Tensor& dg, Tensor& da, Tensor& db) {
  execute(platform_.memory_seconds(double(a.bytes() + b.bytes() + dg.bytes() + da.bytes() + db.bytes())));
}

void SimBackend::do_convert(Tensor& dst, const Tensor& src) {
  execute(platform_.memory_seconds(double(src.bytes() + dst.bytes())));
}

void SimBackend::do_encode_fp8(const Tensor& src, Tensor& dst, Fp8Scaling) {
  execute(platform_.memory_seconds(double(src.bytes() + dst.bytes())));
}

void SimBackend::do_decode_fp8(const Tensor& src, Tensor& dst, Fp8Scaling) {
  execute(platform_.memory_seconds(double(src.bytes() + dst.bytes())));
}

// ---- GEMM -------------------------------------------------------------------------------------------
void SimBackend::do_gemm(bool, bool, int64_t m, int64_t n, int64_t k, float, const Tensor& A, int64_t,
                         const Tensor&, int64_t, float, Tensor&, int64_t) {
  // Roofline: a GEMM with few rows (a decode step's B tokens against a weight matrix: a GEMV)
  // is bound by reading its operands, not by its FLOPs; the efficiency table, measured on large
  // blocks, would charge it a few microseconds for hundreds of MB of weights. Large GEMMs stay
  // compute-bound (their bytes take a fraction of their FLOPs' time).
  const double bytes = (double(m) * double(k) + double(k) * double(n) + double(m) * double(n)) * double(dtype_size(A.dtype));
  execute(std::max(platform_.gemm_seconds(m, n, k, A.dtype), platform_.memory_seconds(bytes)));
}

// One launch for the batch: each entry's compute time at its shape's efficiency (less the launch
// each would pay alone), or every entry's operands read once at the memory bandwidth, whichever
// is longer (MLA decode's per-head absorptions: B rows against a head's weight slice, memory-bound).
void SimBackend::do_gemm_batched(bool, bool, int64_t m, int64_t n, int64_t k, float, const Tensor& A, int64_t,
                                 int64_t, const Tensor&, int64_t, int64_t, float, Tensor&, int64_t, int64_t,
                                 int64_t batch) {
  const double launch = platform_.launch_us * 1e-6;
  const double one = std::max(0.0, platform_.gemm_seconds(m, n, k, A.dtype) - launch);
  const double bytes = (double(m) * double(k) + double(k) * double(n) + double(m) * double(n)) * double(dtype_size(A.dtype));
  execute(std::max(launch + double(batch) * one, platform_.memory_seconds(double(batch) * bytes)));
}

// ---- normalisation and rotary embedding -------------------------------------------------------------
void SimBackend::do_rmsnorm_fwd(const Tensor& x, const Tensor& w, float, int64_t, Tensor& y, Tensor& rstd) {
  execute(platform_.memory_seconds(double(x.bytes() + y.bytes() + w.bytes() + rstd.bytes())));
}

void SimBackend::do_rmsnorm_bwd(const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy, int64_t,
                                Tensor& dx, Tensor& dw) {
  execute(platform_.memory_seconds(double(x.bytes() + dy.bytes() + dx.bytes() + rstd.bytes() + w.bytes() + dw.bytes())));
}

void SimBackend::do_rope(Tensor& x, int64_t B, int64_t T, int heads, int d, int64_t, const Positions&, double, bool,
                         const DocStarts&) {
  execute(platform_.memory_seconds(2.0 * double(B * T) * heads * d * double(dtype_size(x.dtype))));
}

// ---- attention ----------------------------------------------------------------------------------------
void SimBackend::do_attn_fwd(const AttnShape& s, const Tensor& q, const Tensor&, const Tensor&, const Positions& qpos,
                             const Positions& kpos, Tensor&, Tensor&) {
  const int64_t pairs = count_visible_pairs(qpos, kpos, s.mask());
  const double flops = attn_fwd_flops(s, pairs);
  if (s.nq == 1) {
    // Decode attention (one query row per sequence against a long shard, split along the keys):
    // memory-bound, so it costs the bytes of the visible keys' K and V read once at the platform's
    // memory bandwidth (its sourced memory_bw_gbs), or its FLOPs if those take longer, at the
    // platform's attn_decode rate (MLA's absorbed decode, 128 heads on one latent, is compute-bound:
    // FlashMLA's published figure) or at peak without one; the attn_fwd efficiency table (measured
    // on blocks of >= 128 queries) does not describe it.
    const double keys = flops / (2.0 * (s.d + s.vdim()) * s.hq * double(s.B));  // visible keys per sequence
    // k (d) and v (d_v); v inside k's rows (MLA's absorbed decode) is read with them, once
    const double row = s.v_in_k ? s.d : s.d + s.vdim();
    const double bytes = double(s.B) * keys * s.hk * row * double(dtype_size(q.dtype));
    execute(platform_.decode_seconds(flops, bytes, double(s.group()), q.dtype, s.d));
    return;
  }
  execute(platform_.attention_seconds(s.nq, s.nk, pairs, flops, /*backward=*/false, q.dtype, s.d));
}

void SimBackend::do_attn_merge(const AttnShape&, Tensor& o_acc, Tensor& lse_acc, const Tensor&, const Tensor&) {
  execute(platform_.memory_seconds(3.0 * double(o_acc.bytes() + lse_acc.bytes())));
}

void SimBackend::do_attn_bwd_delta(const AttnShape&, const Tensor& o, const Tensor& dout, Tensor& delta) {
  execute(platform_.memory_seconds(double(o.bytes() + dout.bytes() + delta.bytes())));
}

// The sinks: element-wise passes over o and lse (read and write), like the merge.
void SimBackend::do_attn_sink_fwd(const AttnShape&, const Tensor&, Tensor& o, Tensor& lse) {
  execute(platform_.memory_seconds(2.0 * double(o.bytes() + lse.bytes())));
}

void SimBackend::do_attn_sink_bwd(const AttnShape&, const Tensor&, const Tensor& o, const Tensor& dout,
                                  const Tensor& lse, Tensor&) {
  execute(platform_.memory_seconds(double(o.bytes() + dout.bytes() + lse.bytes())));
}

void SimBackend::do_attn_bwd(const AttnShape& s, const Tensor& q, const Tensor&, const Tensor&, const Tensor&,
                             const Tensor&, const Tensor&, const Positions& qpos, const Positions& kpos, Tensor&,
                             Tensor&, Tensor&) {
  // The hardware count (2.5x forward: the backward recomputes the scores), as count_attn's.
  const int64_t pairs = count_visible_pairs(qpos, kpos, s.mask());
  execute(platform_.attention_seconds(s.nq, s.nk, pairs, kAttnBwdHardwareFactor * attn_fwd_flops(s, pairs), /*backward=*/true, q.dtype, s.d));
}

std::unique_ptr<Backend> make_sim_backend(const BackendOptions&) {
  const char* path = std::getenv("CPBENCH_SIM_PLATFORM");
  if (!path || !*path)
    throw std::invalid_argument("backend 'sim': CPBENCH_SIM_PLATFORM is not set (the platform JSON); "
                                "launch cpbench-sim through scripts/simulate.sh --platform NAME");
  return std::make_unique<SimBackend>(SimPlatform::load(path));
}

}  // namespace cpbench
