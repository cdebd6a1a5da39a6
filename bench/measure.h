// Measurement of one job on one rank: warm-up, timed iterations, and the communication-only
// replay (comm_standalone). Returns this rank's samples and summary; nothing here talks to
// other ranks except through the strategy's own communication and the per-iteration barrier.
#pragma once
#include <vector>

#include "bench/result.h"
#include "bench/strategy.h"
#include "comm/communicator.h"

namespace cpbench {

struct MeasureOptions {
  int warmup = 1, iters = 5;
  bool prefill = false;  // forward only (inference prefill)
};

struct RankMeasurement {
  std::vector<double> fwd_ms, bwd_ms, step_ms;  // this rank's samples, one per timed iteration
  RankSummary summary;
  std::vector<CommRecord> records;         // communication of the last timed iteration
  std::vector<ComputeRecord> compute;      // compute of the last timed iteration
};

// The strategy must be set up. Timing per iteration: barrier, then events around forward and
// backward on the compute stream, one device synchronisation at the end (no host gap between
// the phases); the comm log and compute log are read only after it.
RankMeasurement measure(Strategy& strat, Backend& be, World& w, CommLog& log, const MeasureOptions& opt);

}  // namespace cpbench
