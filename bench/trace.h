// --trace: the compute and communication intervals of each job's last timed iteration, from
// every rank, as Chrome/Perfetto trace events (collected on rank 0).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/communicator.h"
#include "comm/world.h"
#include "kernels/backend.h"

namespace cpbench {

class TraceCollector {
 public:
  // origin_ms: this rank's clock reading at a common barrier (aligns the ranks' timelines).
  explicit TraceCollector(double origin_ms) : origin_ms_(origin_ms) {}
  // Collective: every rank passes its intervals; rank 0 appends everyone's events.
  void add(World& w, const std::string& run_tag, const std::vector<ComputeRecord>& compute,
           const std::vector<CommRecord>& comm);
  const nlohmann::json& events() const { return events_; }

 private:
  double origin_ms_;
  nlohmann::json events_ = nlohmann::json::array();
};

}  // namespace cpbench
