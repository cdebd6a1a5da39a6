// The harness: runs each (strategy, mesh, seq) with warm-up and timed iterations, measures
// communication, overlap, FLOPs, memory and balance, verifies against `single`, dumps tensors.
// Results are JSON objects in the report's schema (results_schema/report.schema.json), built on
// rank 0; the console table and the report file are both written from them.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/config.h"
#include "comm/communicator.h"

namespace cpbench {

// One planned result: a strategy at one sequence length and mesh.
struct Job {
  const StrategyInfo* info;
  int64_t seq;
  MeshSpec mesh;       // resolved
  std::string label;   // "usp[u2xr2]"
  std::string skip;    // non-empty: skipped, with this reason
};

// Expands the config into jobs. Constraint violations of explicitly requested strategies or
// meshes throw ConstraintError (the caller exits before any work); those chosen by default are
// returned as skipped.
std::vector<Job> plan_jobs(const RunConfig& cfg, int P);

struct Peak {
  double tflops = 0;
  std::string source;  // flag | device-table | calibrated-gemm
};
// --peak-tflops, else the device table, else a GEMM rate calibrated now (collective).
Peak resolve_peak(const RunConfig& cfg, Backend& be, World& w);

class Harness {
 public:
  Harness(const RunConfig& cfg, Backend& be, World& w);
  // `cpbench run`: every job timed; returns results (complete on rank 0).
  std::vector<nlohmann::json> run(const std::vector<Job>& jobs, const Peak& peak);
  // `cpbench verify`: every job against single; returns results with "verify" blocks.
  std::vector<nlohmann::json> verify(const std::vector<Job>& jobs);
  // Chrome trace events gathered so far (rank 0), for --trace.
  nlohmann::json trace() const { return trace_; }

 private:
  nlohmann::json run_one(const Job& job, const Peak& peak);
  void add_trace(const std::string& label, int64_t seq);

  const RunConfig& cfg_;
  Backend& be_;
  World& w_;
  CommLog log_;
  double clock_offset_ms_ = 0;  // this rank's clock reading at a common barrier
  nlohmann::json trace_ = nlohmann::json::array();
};

// Writes a float32 .npy file (C order).
void write_npy(const std::string& path, const std::vector<float>& data, const std::vector<int64_t>& shape);

// relative L2 error ||a-b|| / ||b|| in double; +inf if a has NaN/Inf where b has none.
double rel_l2(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace cpbench
