// `cpbench run --dry-run`: the planned jobs with each strategy's analytic bytes (DESIGN's model)
// and activation memory estimate, computed from the shapes alone. Allocates no tensor and needs
// no ranks: `--world-size P` plans for P ranks on one process.
#pragma once
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/config.h"
#include "bench/harness.h"

namespace cpbench {

// One object per job: strategy, label, seq, mesh, status ("planned" | "skipped"), reason,
// predicted_bytes {fwd, bwd}, activation_estimate_bytes, elem_bytes, acc_bytes.
nlohmann::json dry_run_plan(const RunConfig& cfg, const std::vector<Job>& jobs, int P);

// Prints the plan as a table and writes {"dry_run": true, "config": ..., "jobs": [...]} to
// cfg.out when given (rank 0 only). Returns the exit code: 0, or 1 when the file cannot be written.
int print_dry_run(const RunConfig& cfg, const nlohmann::json& plan, int P);

}  // namespace cpbench
