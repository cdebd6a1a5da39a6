// Tensor views, dtypes, positions and memory bookkeeping (see tensor.h).
#include "kernels/tensor.h"

#include <algorithm>
#include <chrono>
#ifdef CPBENCH_SIMULATED
#include <mpi.h>
#include <simgrid/engine.h>
#include <simgrid/host.h>
#include <smpi/smpi.h>
#endif
#include <sstream>

namespace cpbench {

// ---- clock ------------------------------------------------------------------------------------
#ifdef CPBENCH_SIMULATED
namespace {
// This rank's work not yet on SMPI's clock, in seconds. One per rank: SMPI privatizes each
// rank's globals (simulate.sh: smpi/privatization:dlopen).
double g_deferred_s = 0;
}  // namespace

// cpbench-sim: SMPI's simulated clock, so compute records, comm records and events all lie on
// the simulated timeline (the host's real clock means nothing there). simgrid_get_clock() is the
// clock MPI_Wtime returns, read without MPI_Wtime's own cost (SMPI's benchmarking hooks time the
// host code between MPI calls with a thread-CPU-clock system call on every entry).
double now_ms() { return (simgrid_get_clock() + g_deferred_s) * 1e3; }

void defer_clock(double seconds) {
  if (seconds > 0) g_deferred_s += seconds;
}

void settle_clock() {
  if (g_deferred_s <= 0) return;
  const double s = g_deferred_s;
  g_deferred_s = 0;
  // smpi_execute_flops runs at the host's speed from the platform XML; convert the seconds.
  smpi_execute_flops(s * sg_host_get_speed(sg_host_self()));
}
#else
void defer_clock(double) { throw std::logic_error("defer_clock: only cpbench-sim defers work"); }
void settle_clock() {}

namespace {
std::chrono::steady_clock::time_point clock_origin() {
  static const std::chrono::steady_clock::time_point origin = std::chrono::steady_clock::now();
  return origin;
}
// Fix the origin at static-initialisation time so it does not depend on who asks first.
const bool g_origin_fixed = (clock_origin(), true);
}  // namespace

double now_ms() {
  (void)g_origin_fixed;
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                   clock_origin())
      .count();
}
#endif

namespace {
double g_p2p_moving_until_ms = 0;  // per rank (SMPI privatizes globals); only the caller's thread posts
}  // namespace
void note_p2p_moving_until(double end_ms) { g_p2p_moving_until_ms = std::max(g_p2p_moving_until_ms, end_ms); }
double p2p_moving_until_ms() { return g_p2p_moving_until_ms; }

namespace {
SimCollectiveCosts g_collective_costs;  // per rank, like the clock
}  // namespace
void set_sim_collective_costs(SimCollectiveCosts costs) { g_collective_costs = costs; }
double sim_collective_extra_s(int64_t chunk_bytes, int peers) {
  return g_collective_costs.extra ? g_collective_costs.extra(chunk_bytes, peers) : 0.0;
}
double sim_op_fixed_s(bool one_node) {
  return g_collective_costs.op_fixed ? g_collective_costs.op_fixed(one_node) : 0.0;
}
double sim_p2p_s(int64_t bytes, bool one_node) {
  return g_collective_costs.p2p ? g_collective_costs.p2p(bytes, one_node) : 0.0;
}

// ---- dtypes -----------------------------------------------------------------------------------
size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::u8: return 1;
  }
  throw std::invalid_argument("dtype_size: unknown dtype value " + std::to_string(int(t)));
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "fp32";
    case DType::bf16: return "bf16";
    case DType::f16: return "fp16";
    case DType::u8: return "u8";
  }
  return "?";
}

DType parse_dtype(const std::string& s) {
  if (s == "fp32" || s == "f32" || s == "float32") return DType::f32;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  if (s == "fp16" || s == "f16" || s == "float16") return DType::f16;
  throw std::invalid_argument("unknown dtype '" + s + "' (expected fp32, bf16 or fp16)");
}

const char* mem_kind_name(MemKind k) {
  switch (k) {
    case MemKind::weights: return "weights";
    case MemKind::activations: return "activations";
    case MemKind::comm: return "comm_buffers";  // the report's name for this kind
  }
  return "?";
}

// ---- memory tracking --------------------------------------------------------------------------
void MemTracker::on_alloc(MemKind k, int64_t bytes) {
  const int i = static_cast<int>(k);
  if (i < 0 || i >= kNumMemKinds) throw std::invalid_argument("MemTracker: bad memory kind");
  if (bytes < 0) throw std::invalid_argument("MemTracker: negative allocation size");
  ++alloc_calls_;
  if (limit_ > 0 && stats_.live_total + bytes > limit_)
    throw MemLimitError("--mem-limit exceeded: allocating " + std::to_string(bytes) + " bytes of " +
                        mem_kind_name(k) + " would need " + std::to_string(stats_.live_total + bytes) +
                        " bytes live, limit " + std::to_string(limit_) + " bytes");
  stats_.live[i] += bytes;
  if (stats_.live[i] > stats_.peak[i]) stats_.peak[i] = stats_.live[i];
  stats_.live_total += bytes;
  if (stats_.live_total > stats_.peak_total) stats_.peak_total = stats_.live_total;
}

// NOTE: called from tensor deleters, so it never throws.
void MemTracker::on_free(MemKind k, int64_t bytes) {
  const int i = static_cast<int>(k);
  if (i < 0 || i >= kNumMemKinds) return;
  stats_.live[i] -= bytes;
  stats_.live_total -= bytes;
}

void MemTracker::reset_peaks() {
  stats_.peak = stats_.live;
  stats_.peak_total = stats_.live_total;
}

// ---- Tensor -----------------------------------------------------------------------------------
namespace {
int64_t shape_numel(const std::vector<int64_t>& shape) {
  if (shape.empty()) return 0;
  int64_t n = 1;
  for (int64_t s : shape) {
    if (s < 0) throw std::invalid_argument("tensor shape has a negative dimension");
    n *= s;
  }
  return n;
}
std::string fmt_shape(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}
}  // namespace

// A tensor without a shape has no elements (scalars are shape {1}).
int64_t Tensor::numel() const { return shape_numel(shape); }

Tensor Tensor::view(int64_t offset, std::vector<int64_t> new_shape) const {
  const int64_t n = shape_numel(new_shape);
  if (new_shape.empty())
    throw std::invalid_argument("Tensor::view: the new shape must have at least one dimension");
  if (offset < 0 || offset + n > numel())
    throw std::out_of_range("Tensor::view: elements [" + std::to_string(offset) + ", " +
                            std::to_string(offset + n) + ") outside a tensor of " +
                            std::to_string(numel()) + " elements " + shape_str());
  Tensor t = *this;
  t.data = static_cast<char*>(data) + static_cast<size_t>(offset) * dtype_size(dtype);
  t.shape = std::move(new_shape);
  return t;
}

Tensor Tensor::reshape(std::vector<int64_t> new_shape) const {
  // One dimension may be -1: inferred from the element count.
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < new_shape.size(); ++i) {
    if (new_shape[i] == -1) {
      if (infer >= 0) throw std::invalid_argument("Tensor::reshape: more than one -1 dimension");
      infer = static_cast<int>(i);
    } else if (new_shape[i] < 0) {
      throw std::invalid_argument("Tensor::reshape: negative dimension in " + fmt_shape(new_shape));
    } else {
      known *= new_shape[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel() % known != 0)
      throw std::invalid_argument("Tensor::reshape: cannot infer -1 in " + fmt_shape(new_shape) +
                                  " from " + shape_str());
    new_shape[infer] = numel() / known;
  }
  if (shape_numel(new_shape) != numel())
    throw std::invalid_argument("Tensor::reshape: " + shape_str() + " has " +
                                std::to_string(numel()) + " elements, " + fmt_shape(new_shape) +
                                " needs " + std::to_string(shape_numel(new_shape)));
  Tensor t = *this;
  t.shape = std::move(new_shape);
  return t;
}

std::string Tensor::shape_str() const { return fmt_shape(shape); }

// ---- Positions --------------------------------------------------------------------------------
Positions Positions::contiguous(int64_t start, int64_t count) { return strided(start, 1, count); }

Positions Positions::strided(int64_t start, int64_t stride, int64_t count) {
  return Positions().append(PosSeg{start, stride, count});
}

Positions Positions::two(int64_t start0, int64_t count0, int64_t start1, int64_t count1) {
  Positions p;
  p.append(PosSeg{start0, 1, count0});
  p.append(PosSeg{start1, 1, count1});
  return p;
}

Positions Positions::segments(const std::vector<PosSeg>& segs) {
  Positions p;
  for (const PosSeg& g : segs) p.append(g);
  return p;
}

Positions& Positions::append(PosSeg g) {
  if (g.start < 0 || g.stride < 1 || g.count < 0)
    throw std::invalid_argument("Positions: need start >= 0, stride >= 1, count >= 0 (got start " +
                                std::to_string(g.start) + ", stride " + std::to_string(g.stride) +
                                ", count " + std::to_string(g.count) + ")");
  if (nseg_ < kInline)
    inline_[size_t(nseg_)] = g;
  else
    more_.push_back(g);
  ++nseg_;
  return *this;
}

int64_t Positions::count() const {
  int64_t n = 0;
  for (int s = 0; s < nseg_; ++s) n += seg(s).count;
  return n;
}

int64_t Positions::at(int64_t i) const {
  if (i < 0) throw std::out_of_range("Positions::at: negative row");
  for (int s = 0; s < nseg_; ++s) {
    const PosSeg& g = seg(s);
    if (i < g.count) return g.start + i * g.stride;
    i -= g.count;
  }
  throw std::out_of_range("Positions::at: row beyond " + std::to_string(count()) + " rows of " +
                          str());
}

std::vector<int64_t> Positions::list() const {
  std::vector<int64_t> v;
  v.reserve(static_cast<size_t>(count()));
  for (int s = 0; s < nseg_; ++s) {
    const PosSeg& g = seg(s);
    for (int64_t i = 0; i < g.count; ++i) v.push_back(g.start + i * g.stride);
  }
  return v;
}

Positions Positions::rows(int64_t first, int64_t n) const {
  if (first < 0 || n < 0 || first + n > count())
    throw std::out_of_range("Positions::rows: rows [" + std::to_string(first) + ", " + std::to_string(first + n) +
                            ") of " + std::to_string(count()) + " rows of " + str());
  Positions out;
  int64_t row = 0;
  for (int s = 0; s < nseg_; ++s) {
    const PosSeg& g = seg(s);
    const int64_t lo = std::max(first, row), hi = std::min(first + n, row + g.count);
    if (lo < hi) out.append({g.start + (lo - row) * g.stride, g.stride, hi - lo});
    row += g.count;
  }
  return out;
}

// Python-like ranges: "range(0,128)", "range(3,515,4)", "range(0,64)+range(448,512)".
std::string Positions::str() const {
  if (nseg_ == 0) return "range(0,0)";
  std::ostringstream os;
  for (int s = 0; s < nseg_; ++s) {
    const PosSeg& g = seg(s);
    if (s) os << '+';
    os << "range(" << g.start << ',' << g.start + g.count * g.stride;
    if (g.stride != 1) os << ',' << g.stride;
    os << ')';
  }
  return os.str();
}

}  // namespace cpbench
