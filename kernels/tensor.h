// Tensor views, dtypes, memory kinds and the tracked-allocation bookkeeping shared by all backends.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace cpbench {

// Milliseconds on the steady clock since a process-wide origin (fixed at start-up). The compute
// log, the CPU backend's events and the comm log all use it, so their intervals share one axis.
// In cpbench-sim: SMPI's simulated clock plus this rank's deferred work (below).
double now_ms();

// cpbench-sim's deferred clock. The sim backend adds each kernel's simulated cost here instead of
// advancing SMPI's clock kernel by kernel: every advance is a SimGrid activity, and a rank issues
// tens of thousands of small kernels per job (a layout copy per peer), which at thousands of ranks
// made the simulator's event handling, not the network, the cost of a run. settle_clock() advances
// SMPI's clock by the deferred work at once. A rank's kernels run back to back on its one stream
// and nobody observes its clock between two MPI calls except through now_ms(), which counts the
// deferred work, so settling before every MPI call (MPI_CHECK, and the communicator's posts and
// waits do it) gives the same simulated times as advancing per kernel, for a rank on a SimGrid
// host of its own (every GPU platform; the sim backend settles each kernel at once where ranks
// share a host's cores, whose speed SimGrid divides among them).
// In other builds: defer_clock throws (nothing may defer), settle_clock does nothing.
void defer_clock(double seconds);
void settle_clock();

// cpbench-sim: when (now_ms()'s clock) the bytes of the rank's latest posted point-to-point
// transfers stop moving: each post extends it to post + the transfer's modelled duration
// (sim_p2p_s). The sim backend charges overlap interference only to the part of a kernel before
// it (docs/SIMULATION.md "Overlap interference"): the compute a strategy overlaps with its ring
// hops. Collectives block, so they never overlap compute. 0 before any transfer.
void note_p2p_moving_until(double end_ms);
double p2p_moving_until_ms();

// cpbench-sim: what a collective costs beyond the simulated links, installed by the sim backend
// from its platform (one install: both or neither; nullptrs in the normal build) and deferred by
// the MPI communicator. Both return 0 when nothing is installed.
//  - sim_collective_extra_s: the seconds NCCL's protocols add to a collective whose group lies
//    within one node (SimGrid charges a message its latency and the link rate; NCCL reaches its
//    bus bandwidth only for large messages): the platform's published curve (network.intra.nccl,
//    SimPlatform::nccl_extra_seconds), before each ring step (`peers` = 1, `chunk_bytes` the
//    step's block) and before an all-to-all (`peers` = g - 1, `chunk_bytes` per peer); 0 for a
//    platform without a curve.
//  - sim_op_fixed_s: one NCCL operation's fixed cost (SimPlatform::op_fixed_seconds), once at the
//    start of each collective; `one_node`: its group lies within one node.
//  - sim_p2p_s: the modelled duration of one point-to-point transfer of `bytes` (a ring hop)
//    within one node or across nodes (SimPlatform::transfer_seconds: the platform's published
//    network.<tier>.p2p curve, nccl-tests' sendrecv, a ring shift; without one the links' latency
//    + bytes / rate). The communicator completes the transfer no earlier than its post + this (at
//    its wait) and notes the window for the interference (note_p2p_moving_until).
struct SimCollectiveCosts {
  double (*extra)(int64_t chunk_bytes, int peers) = nullptr;
  double (*op_fixed)(bool one_node) = nullptr;
  double (*p2p)(int64_t bytes, bool one_node) = nullptr;
};
void set_sim_collective_costs(SimCollectiveCosts costs);
double sim_collective_extra_s(int64_t chunk_bytes, int peers);
double sim_op_fixed_s(bool one_node);
double sim_p2p_s(int64_t bytes, bool one_node);

// u8: raw bytes, no element type: an encoded block in transit (--comm-dtype fp8: e4m3 codes and
// their scales, kernels/float8.h); only copies, sends and the fp8 codec touch it.
enum class DType { f32, bf16, f16, u8 };
size_t dtype_size(DType t);
const char* dtype_name(DType t);
DType parse_dtype(const std::string& s);  // throws std::invalid_argument

// What a buffer holds; the allocator keeps live and peak bytes per kind.
enum class MemKind { weights = 0, activations = 1, comm = 2 };
constexpr int kNumMemKinds = 3;
const char* mem_kind_name(MemKind k);

struct MemStats {
  std::array<int64_t, kNumMemKinds> live{};  // bytes allocated now, per kind
  std::array<int64_t, kNumMemKinds> peak{};  // peak of live[k] per kind
  int64_t live_total = 0;
  int64_t peak_total = 0;  // peak of the sum (not the sum of the peaks)
};

// An allocation that would take a rank's tracked bytes over --mem-limit. The message names the
// request, the bytes it would need and the limit.
struct MemLimitError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Tracks live/peak bytes and counts allocator calls. Backends call on_alloc BEFORE their real
// allocation (so a request over the limit allocates nothing) and on_free around their frees.
class MemTracker {
 public:
  // Throws MemLimitError when live + bytes would exceed the limit (0 = no limit).
  void on_alloc(MemKind k, int64_t bytes);
  void on_free(MemKind k, int64_t bytes);
  const MemStats& stats() const { return stats_; }
  // Restart peaks from the current live bytes (e.g. after setup, before timing).
  void reset_peaks();
  // Per-rank cap on live bytes (all kinds together); 0 = none.
  void set_limit(int64_t bytes) { limit_ = bytes; }
  int64_t limit() const { return limit_; }
  // Allocator calls since construction (the harness reads it around timed iterations, which must
  // allocate nothing).
  int64_t alloc_calls() const { return alloc_calls_; }

 private:
  MemStats stats_;
  int64_t limit_ = 0;
  int64_t alloc_calls_ = 0;
};

// A typed view of backend memory (host memory on CPU, device memory on CUDA). Copies share the
// same allocation (reference counted); the allocation is returned when the last view goes away.
// Layouts are row-major and contiguous unless an op takes explicit pitches.
struct Tensor {
  std::shared_ptr<void> holder;  // owns the allocation (null for a non-owning view)
  void* data = nullptr;          // first element of this view
  DType dtype = DType::f32;
  MemKind kind = MemKind::activations;
  std::vector<int64_t> shape;

  int64_t numel() const;
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  bool empty() const { return data == nullptr; }
  // A view of `count` elements starting `offset` elements in, with the given shape
  // (defaults to 1-D). Shares ownership.
  Tensor view(int64_t offset, std::vector<int64_t> new_shape) const;
  // Same memory, another shape with the same element count.
  Tensor reshape(std::vector<int64_t> new_shape) const;
  template <class T>
  T* ptr() const { return static_cast<T*>(data); }
  std::string shape_str() const;
};

// Global token positions of the rows of a block: a short list of arithmetic segments in row
// order, any number (contiguous: 1 segment stride 1; zigzag: 2 segments stride 1; striped:
// 1 segment stride P; a gathered zigzag group: 2U segments). Up to kInline segments are held
// inline, so copying the common layouts allocates nothing. Attention kernels derive per-row
// visibility from these positions and the mask (backend.h, AttnMask).
struct PosSeg {
  int64_t start = 0, stride = 1, count = 0;
};
class Positions {
 public:
  static constexpr int kInline = 4;
  Positions() = default;
  static Positions contiguous(int64_t start, int64_t count);
  static Positions strided(int64_t start, int64_t stride, int64_t count);
  static Positions two(int64_t start0, int64_t count0, int64_t start1, int64_t count1);
  // Any list of segments (each start >= 0, stride >= 1, count >= 0; std::invalid_argument else).
  static Positions segments(const std::vector<PosSeg>& segs);
  // Appends one segment (validated as above); returns *this.
  Positions& append(PosSeg g);

  int nseg() const { return nseg_; }
  const PosSeg& seg(int i) const { return i < kInline ? inline_[size_t(i)] : more_[size_t(i - kInline)]; }
  int64_t count() const;
  int64_t at(int64_t i) const;       // position of row i
  std::vector<int64_t> list() const;  // all positions in row order
  // Rows [first, first + n) as positions (a slice may span segments); std::out_of_range when
  // the rows are not all there.
  Positions rows(int64_t first, int64_t n) const;
  std::string str() const;

 private:
  std::array<PosSeg, kInline> inline_{};
  std::vector<PosSeg> more_;  // segments kInline.. (empty for the common layouts)
  int nseg_ = 0;
};

}  // namespace cpbench
