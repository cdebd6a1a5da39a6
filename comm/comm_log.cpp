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
    case Phase::recompute: return "recompute";
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

TierBytes split_by_tier(OpKind op, int64_t buffer_bytes, const std::vector<int>& members, int me, int peer,
                        const std::vector<int>& node_of) {
  const int g = static_cast<int>(members.size());
  if (me < 0 || me >= g || peer >= g)
    throw std::invalid_argument("split_by_tier: rank " + std::to_string(me) + " / peer " + std::to_string(peer) +
                                " outside a group of " + std::to_string(g));
  auto node = [&](int group_rank) {
    const int w = members[static_cast<size_t>(group_rank)];
    return node_of.empty() ? 0 : node_of.at(static_cast<size_t>(w));
  };
  TierBytes t;
  auto to = [&](int dest, int64_t bytes) { (node(dest) == node(me) ? t.intra : t.inter) += bytes; };
  switch (op) {
    case OpKind::all_to_all:
    case OpKind::reduce_scatter:
      for (int j = 0; j < g; ++j)
        if (j != me) to(j, buffer_bytes / g);
      break;
    case OpKind::all_gather:
      for (int j = 0; j < g; ++j)
        if (j != me) to(j, buffer_bytes);
      break;
    case OpKind::send:
      if (g > 1) to(peer, buffer_bytes);
      break;
    case OpKind::recv:
    case OpKind::barrier: break;
  }
  return t;
}

void CommLog::add(OpKind op, const std::string& group, const std::vector<int>& members, int me, Phase ph,
                  int64_t buffer_bytes, int peer, double t0, double t1) {
  const int g = static_cast<int>(members.size());
  const TierBytes t = split_by_tier(op, buffer_bytes, members, me, peer, node_of_);
  CommRecord r{op, group, g, ph, logical_bytes_sent(op, buffer_bytes, g), buffer_bytes, peer, t0, t1};
  r.intra_node_bytes = t.intra;
  r.inter_node_bytes = t.inter;
  if (t.intra + t.inter != r.bytes_sent)  // the two conventions must agree (divisible buffers)
    throw std::logic_error("comm '" + group + "': tier split " + std::to_string(t.intra) + " + " +
                           std::to_string(t.inter) + " != logical bytes " + std::to_string(r.bytes_sent));
  records_.push_back(r);
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
