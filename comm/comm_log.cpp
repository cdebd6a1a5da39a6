// CommLog, op/phase names and DESIGN's byte-accounting convention.
#include <stdexcept>
#include <string>

#include "comm/communicator.h"

namespace cpbench {

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::fwd: return "fwd";
    case Phase::bwd: return "bwd";
    case Phase::other: return "other";
  }
  return "?";
}

const char* op_name(OpKind k) {
  switch (k) {
    case OpKind::all_to_all: return "all_to_all";
    case OpKind::all_gather: return "all_gather";
    case OpKind::reduce_scatter: return "reduce_scatter";
    case OpKind::send: return "send";
    case OpKind::recv: return "recv";
    case OpKind::barrier: return "barrier";
  }
  return "?";
}

// The process-wide clock of kernels/ (cpbench::now_ms), so compute records and comm records lie
// on one timeline.
double CommLog::now_ms() const { return cpbench::now_ms(); }

void CommLog::enter(OpKind op, const std::string& group, std::vector<int> peers) {
  std::lock_guard<std::mutex> lk(call_mu_);
  call_ = InFlightCall{op, group, std::move(peers), phase_, now_ms()};
  in_call_ = true;
}

void CommLog::leave() {
  std::lock_guard<std::mutex> lk(call_mu_);
  in_call_ = false;
}

bool CommLog::in_flight(InFlightCall* out) const {
  std::lock_guard<std::mutex> lk(call_mu_);
  if (in_call_ && out) *out = call_;
  return in_call_;
}

int64_t logical_bytes_sent(OpKind op, int64_t buffer_bytes, int group_size) {
  if (buffer_bytes < 0 || group_size < 1)
    throw std::invalid_argument("logical_bytes_sent: buffer_bytes=" + std::to_string(buffer_bytes) +
                                " group_size=" + std::to_string(group_size) +
                                " (need buffer_bytes >= 0, group_size >= 1)");
  if (group_size == 1) return 0;  // nothing leaves a group of one rank
  const int64_t g = group_size;
  switch (op) {
    case OpKind::all_to_all:      // buffer = the whole send buffer [g * c]: g-1 chunks leave
    case OpKind::reduce_scatter:  // buffer = the input [g * c]: g-1 chunks leave
      return buffer_bytes / g * (g - 1) + (buffer_bytes % g) * (g - 1) / g;
    case OpKind::all_gather:  // buffer = this rank's shard, sent to g-1 ranks
      return buffer_bytes * (g - 1);
    case OpKind::send: return buffer_bytes;
    case OpKind::recv:
    case OpKind::barrier: return 0;
  }
  return 0;
}

}  // namespace cpbench
