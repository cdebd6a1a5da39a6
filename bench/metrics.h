// Pure functions from measurements to the report's figures: statistics, communication
// aggregation, overlap, balance. No MPI, no backend: unit-tested on hand-made inputs
// (tests/unit/test_metrics.cpp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "kernels/backend.h"

namespace cpbench {

// Order statistics of samples (median, p10, p90 by linear interpolation between closest ranks).
struct Stats {
  double median = 0, p10 = 0, p90 = 0, min = 0, max = 0;
  std::vector<double> samples;  // in measurement order
};
Stats summarize(const std::vector<double>& samples);  // samples must not be empty
double median(std::vector<double> v);
double max_of(const std::vector<double>& v);
double mean_of(const std::vector<double>& v);
int64_t max_of(const std::vector<int64_t>& v);

// One (op, group) line of a phase's communication: count, bytes, time and the nccl-tests
// bandwidths (algbw = algorithm bytes / time; busbw = algbw * (g-1)/g for collectives).
struct OpSummary {
  std::string op, group;
  int group_size = 0;
  int64_t count = 0, bytes_sent = 0;
  double time_ms = 0, algbw_gbps = 0, busbw_gbps = 0;
};
std::vector<OpSummary> summarize_ops(const std::vector<CommRecord>& recs, Phase ph);
int64_t phase_bytes(const std::vector<CommRecord>& recs, Phase ph);
TierBytes phase_tier_bytes(const std::vector<CommRecord>& recs, Phase ph);
double phase_time_ms(const std::vector<CommRecord>& recs, Phase ph);

// A closed-open interval [t0, t1) in ms.
struct Interval {
  double t0 = 0, t1 = 0;
};
// Total length of the union of intervals.
double union_length(std::vector<Interval> v);
// Length of (union of a) ∩ (union of b).
double intersection_length(std::vector<Interval> a, std::vector<Interval> b);

// Holistic Trace Analysis' communication-computation overlap of one rank: the part of its
// communication time (union of its comm intervals) during which it also computes (union of its
// compute intervals), over its communication time. 1 when the rank does not communicate.
double hta_overlap(const std::vector<CommRecord>& comm, const std::vector<ComputeRecord>& compute);

// DESIGN's overlap ratio of one rank: clamp(1 - exposed / standalone, 0, 1); 1 for a rank that
// sends nothing (it has no communication to hide) or whose standalone replay took no time.
double exposed_overlap_ratio(double exposed_ms, double standalone_ms, bool sends_nothing);

// max / mean (1 when the mean is 0).
double imbalance(const std::vector<double>& per_rank);

}  // namespace cpbench
