// The report (results_schema/report.schema.json) and the console table, both from the same
// result objects.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/config.h"
#include "bench/result.h"
#include "comm/nccl_counts.h"

namespace cpbench {

// Context block: hosts, devices, versions, git sha, argv, allow-listed environment.
// ranks_per_node: --ranks-per-node K (0: nodes are hosts); head_dim: the run's, which picks a
// simulated platform's efficiency tables (context.simulated). Collective.
nlohmann::json report_context(World& w, Backend& be, int argc, char** argv, int ranks_per_node, int head_dim);

// context.nccl (a run with --comm nccl): whether NCCL communicators were made, one-rank mode, the
// NCCL version (null when not built with NCCL), and per operation the calls that went through NCCL
// and those done locally (comm/nccl_counts.h), as counted in this process (rank 0 writes the
// report).
nlohmann::json nccl_context(const NcclCallCounts& c, const char* version);
// This process's counts so far (all zero when built without NCCL).
NcclCallCounts current_nccl_counts();

// The schema_version every report is written with: results_schema/report.schema.json's (test_metrics
// asserts it; scripts/schema_versions.py guards the schema's own version); one constant so that
// `cpbench list --json` states the number the reports carry.
inline constexpr int kReportSchemaVersion = 14;

// `complete` is false while the sweep runs (the report is rewritten after every job) and when it
// stopped early; `interrupted` names the signal that stopped it (0: none).
nlohmann::json make_report(const nlohmann::json& context, const RunConfig& cfg, int world_size,
                           const std::vector<JobResult>& results, bool complete, int interrupted = 0);

// Writes atomically (temp file + rename) so no half-written report is ever left.
void write_json_file(const std::string& path, const nlohmann::json& j);

// several_nodes: add the inter-node bytes column (more than one node).
void print_run_table(const std::vector<JobResult>& results, bool several_nodes = false, const std::string& pass = "train");
void print_verify_table(const std::vector<JobResult>& results);

}  // namespace cpbench
