// SimBackend: checks, FLOP counting and simulated time of every backend call (see sim_backend.h).
#include "kernels/sim/sim_backend.h"

#include <mpi.h>
#include <simgrid/host.h>
#include <smpi/smpi.h>

#include <malloc.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <new>
#include <stdexcept>

namespace cpbench {

namespace {

double attn_fwd_flops(const AttnShape& s, const Positions& qpos, const Positions& kpos) {
  // DESIGN's count (as count_attn): QK^T and PV, 2*d FLOPs each per visible pair and query head.
  return 4.0 * double(s.d) * double(s.hq) * double(s.B) * double(count_visible_pairs(qpos, kpos, s.mask()));
}

double block_size(const AttnShape& s) { return double(std::min(s.nq, s.nk)); }

// Tensors from this size on are SMPI shared blocks; smaller ones ordinary memory (see alloc).
constexpr size_t kSharedFrom = size_t(1) << 20;

}  // namespace

SimBackend::SimBackend(SimPlatform platform) : platform_(std::move(platform)) {
  // Every simulated rank is a context of this one process and builds its host-side inputs (up
  // to hundreds of MiB each, zero-filled: bench/inputs.cpp) one after the other. Keeping freed
  // blocks in the heap instead of returning them to the kernel spares a page fault per 4 KiB of
  // each of them, which otherwise dominates the simulation's run time at scale.
  // (glibc caps M_MMAP_THRESHOLD at 32 MiB, so large blocks are kept off mmap with M_MMAP_MAX.)
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
}

std::string SimBackend::device_name() const {
  return platform_.device + " (simulated, platform " + platform_.name + ")";
}

// ---- memory ---------------------------------------------------------------------------------------
Tensor SimBackend::alloc(std::vector<int64_t> shape, DType dtype, MemKind kind) {
  Tensor t;
  t.dtype = dtype;
  t.kind = kind;
  t.shape = std::move(shape);
  const int64_t bytes = t.numel() * static_cast<int64_t>(dtype_size(dtype));  // numel validates
  const size_t block = static_cast<size_t>(std::max<int64_t>(bytes, 64));
  void* p = nullptr;
  if (auto it = free_blocks_.find(block); it != free_blocks_.end()) {
    p = it->second;
    free_blocks_.erase(it);
  } else if (block < kSharedFrom) {
    // Small tensors are ordinary memory: a shared block costs a mapping each, and thousands of
    // ranks would run out of them (vm.max_map_count); SMPI copies these few bytes when sent.
    p = std::malloc(block);
    if (!p) throw std::bad_alloc();
  } else {
    // Every rank's tensors share the same physical pages (simulate.sh: smpi/shared-malloc:local,
    // and this is the one call site): sizes cost address space, not memory.
    p = SMPI_SHARED_MALLOC(block);
    if (!p) throw std::bad_alloc();
  }
  mem_.on_alloc(kind, bytes);
  // The backend outlives its tensors (contract): the block goes back to this backend's cache.
  t.holder = std::shared_ptr<void>(p, [this, kind, bytes, block](void* ptr) {
    mem_.on_free(kind, bytes);
    free_blocks_.emplace(block, ptr);
  });
  t.data = p;
  return t;
}

SimBackend::~SimBackend() {
  for (auto& [size, ptr] : free_blocks_) {
    if (size < kSharedFrom) std::free(ptr);
    else SMPI_SHARED_FREE(ptr);
  }
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
  e.host_ms = MPI_Wtime() * 1e3;
  return e;
}

double SimBackend::elapsed_ms(const Event& a, const Event& b) { return b.host_ms - a.host_ms; }

// The base class's entry points check, gate (replay mode), count FLOPs and log each op around
// these do_* calls on the simulated clock; each advances the clock by its cost on the platform.
void SimBackend::execute(double seconds) {
  // smpi_execute_flops runs at the host's speed from the platform XML; convert our seconds.
  if (seconds > 0) smpi_execute_flops(seconds * sg_host_get_speed(sg_host_self()));
}

// ---- element-wise and layout (memory-bound: bytes read + written) ---------------------------------
void SimBackend::do_fill(Tensor& t, float) { execute(platform_.memory_seconds(double(t.bytes()))); }

void SimBackend::do_copy_2d(Tensor& dst, int64_t, const Tensor&, int64_t, int64_t rows, int64_t cols) {
  execute(platform_.memory_seconds(2.0 * double(rows) * double(cols) * double(dtype_size(dst.dtype))));
}

void SimBackend::do_add(Tensor& out, const Tensor&, const Tensor&) {
  execute(platform_.memory_seconds(3.0 * double(out.bytes())));
}

void SimBackend::do_convert(Tensor& dst, const Tensor& src) {
  execute(platform_.memory_seconds(double(src.bytes() + dst.bytes())));
}

// ---- GEMM -------------------------------------------------------------------------------------------
void SimBackend::do_gemm(bool, bool, int64_t m, int64_t n, int64_t k, float, const Tensor& A, int64_t,
                         const Tensor&, int64_t, float, Tensor&, int64_t) {
  const double flops = 2.0 * double(m) * double(n) * double(k);
  execute(platform_.compute_seconds(SimClass::gemm, flops, double(std::min({m, n, k})), A.dtype));
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
  execute(platform_.compute_seconds(SimClass::attn_fwd, attn_fwd_flops(s, qpos, kpos), block_size(s), q.dtype));
}

void SimBackend::do_attn_merge(const AttnShape&, Tensor& o_acc, Tensor& lse_acc, const Tensor&, const Tensor&) {
  execute(platform_.memory_seconds(3.0 * double(o_acc.bytes() + lse_acc.bytes())));
}

void SimBackend::do_attn_bwd_delta(const AttnShape&, const Tensor& o, const Tensor& dout, Tensor& delta) {
  execute(platform_.memory_seconds(double(o.bytes() + dout.bytes() + delta.bytes())));
}

void SimBackend::do_attn_bwd(const AttnShape& s, const Tensor& q, const Tensor&, const Tensor&, const Tensor&,
                             const Tensor&, const Tensor&, const Positions& qpos, const Positions& kpos, Tensor&,
                             Tensor&, Tensor&) {
  // The hardware count (2.5x forward: the backward recomputes the scores), as count_attn's.
  execute(platform_.compute_seconds(SimClass::attn_bwd, 2.5 * attn_fwd_flops(s, qpos, kpos), block_size(s), q.dtype));
}

std::unique_ptr<Backend> make_sim_backend(const BackendOptions&) {
  const char* path = std::getenv("CPBENCH_SIM_PLATFORM");
  if (!path || !*path)
    throw std::invalid_argument("backend 'sim': CPBENCH_SIM_PLATFORM is not set (the platform JSON); "
                                "launch cpbench-sim through scripts/simulate.sh --platform NAME");
  return std::make_unique<SimBackend>(SimPlatform::load(path));
}

}  // namespace cpbench
