// cpbench: benchmark and verify context-parallel attention strategies under mpirun.
//   cpbench run    [options]   time the strategies, print a table, write a report
//   cpbench verify [options]   every strategy against single; non-zero exit on failure
//   cpbench list               strategies, presets and their constraints
#include <cstdio>
#include <iostream>
#include <thread>

#include "bench/config.h"
#include "bench/dry_run.h"
#include "bench/options.h"
#include "bench/harness.h"
#include "bench/report.h"
#include "bench/workloads.h"
#include "comm/world.h"

using namespace cpbench;
using nlohmann::json;

namespace {

void print_list() {
  std::printf("Strategies (DESIGN.md):\n");
  for (const auto& s : strategy_registry()) {
    std::printf("  %-13s %s\n", s.name.c_str(), s.constraints.c_str());
    std::string sum = s.summary;
    size_t pos = 0;
    while ((pos = sum.find('\n', pos)) != std::string::npos) sum.replace(pos, 1, "\n                "), pos += 17;
    std::printf("                %s\n", sum.c_str());
  }
  std::printf("\nModel presets (configs/models/, embedded):\n");
  for (const auto& m : model_presets())
    std::printf("  %-12s D=%-6d H=%-4d G=%-3d d=%-4d %s\n", m.name.c_str(), m.dim, m.heads, m.kv_heads, m.head_dim,
                m.description.c_str());
  std::printf("\nWorkloads for --docs NAME (configs/workloads/, embedded; scaled to N):\n");
  for (const auto& w : workloads())
    std::printf("  %-12s %zu documents: %s\n", w.name.c_str(), w.weights.size(), w.description.c_str());
  std::printf("\nDefault run (configs/runs/default.json, embedded): %s\n", default_run_preset().dump().c_str());
  std::printf("\nPreset keys (--config FILE; flags are the keys with '-' for '_'): %s\n", known_option_keys().c_str());
}

}  // namespace

int main(int argc, char** argv) {
  World& world = World::init(&argc, &argv);
  const int rank = world.rank(), P = world.size();
  auto fail = [&](const std::string& msg) {
    if (P > 1) std::fprintf(stderr, "cpbench: error (rank %d of %d): %s\n", rank, P, msg.c_str());
    else std::fprintf(stderr, "cpbench: error: %s\n", msg.c_str());
  };

  // The command line (bench/options.cpp): the same argv gives every rank the same result.
  const CommandLine cl = parse_command_line(argc, argv, rank == 0);
  if (cl.exit_code >= 0) {
    if (!cl.error.empty()) fail(cl.error);
    world.finalize();
    return cl.exit_code;
  }
  if (cl.command == "list") {
    if (rank == 0) print_list();
    world.finalize();
    return 0;
  }
  const bool verifying = cl.command == "verify";

  // ---- configuration: every rank resolves the same config; invalid input fails on all ----
  RunConfig cfg;
  std::vector<Job> jobs;
  std::unique_ptr<Backend> backend;
  std::string setup_error;
  json dry_plan;
  try {
    cfg.command = verifying ? "verify" : "run";
    apply_settings(cfg, default_run_preset(), "default preset");
    if (!cl.config_path.empty()) apply_settings(cfg, read_run_preset(cl.config_path), cl.config_path);
    apply_settings(cfg, cl.settings, "command line");
    finalize_config(cfg, P);
    if (cfg.threads == 0)
      cfg.threads = std::max(1, int(std::thread::hardware_concurrency()) / std::max(1, world.local_size()));
    jobs = plan_jobs(cfg, planned_world_size(cfg, P));
    if (cfg.dry_run) {
      dry_plan = dry_run_plan(cfg, jobs, planned_world_size(cfg, P));  // no backend, nothing allocated
    } else {
      BackendOptions bo;
      bo.name = cfg.backend;
      bo.threads = cfg.threads;
      bo.local_rank = world.local_rank();
      backend = make_backend(bo);
      backend->set_threads(cfg.threads);
    }
  } catch (const std::exception& e) {
    setup_error = e.what();
  }
  // Agree on failure so that no rank goes on into a collective alone.
  std::vector<double> any_error = {setup_error.empty() ? 0.0 : 1.0};
  world.allreduce_max(any_error);
  if (any_error[0] > 0) {
    fail(setup_error.empty() ? "another rank failed during setup" : setup_error);
    world.finalize();
    return 2;
  }
  if (cfg.dry_run) {
    const int code = rank == 0 ? print_dry_run(cfg, dry_plan, planned_world_size(cfg, P)) : 0;
    world.finalize();
    return code;
  }

  // ---- the work: any failure past this point on one rank aborts the whole job ----
  try {
    Harness harness(cfg, *backend, world);
    std::vector<json> results;
    if (verifying) {
      results = harness.verify(jobs);
    } else {
      const Peak peak = resolve_peak(cfg, *backend, world);
      results = harness.run(jobs, peak);
    }
    const json context = report_context(world, *backend, argc, argv);
    int failed = 0;
    if (rank == 0) {
      if (verifying) print_verify_table(results);
      else print_run_table(results);
      for (const auto& r : results) failed += r.value("status", "") == "failed";
      if (!cfg.out.empty()) {
        write_json_file(cfg.out, make_report(context, cfg, P, results));
        std::printf("report: %s\n", cfg.out.c_str());
      }
      if (!cfg.trace.empty()) {
        write_json_file(cfg.trace, json{{"traceEvents", harness.trace()}, {"displayTimeUnit", "ms"}});
        std::printf("trace: %s (open in ui.perfetto.dev or chrome://tracing)\n", cfg.trace.c_str());
      }
      if (verifying) std::printf("%s\n", failed ? "VERIFY FAILED" : "VERIFY PASSED");
      std::fflush(stdout);
    }
    std::vector<double> f = {double(failed)};
    world.allreduce_max(f);
    world.finalize();
    return f[0] > 0 ? 1 : 0;
  } catch (const std::exception& e) {
    fail(e.what());
    std::fflush(stderr);
    world.abort(3);
  }
}
