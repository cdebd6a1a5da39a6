// cpbench: benchmark and verify context-parallel attention strategies under mpirun.
//   cpbench run    [options]   time the strategies, print a table, write a report
//   cpbench verify [options]   every strategy against single; non-zero exit on failure
//   cpbench list               strategies, presets and their constraints
#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <mutex>
#include <cstdio>
#include <iostream>
#include <thread>

#include "bench/config.h"
#include "bench/dry_run.h"
#include "bench/options.h"
#include "bench/harness.h"
#include "bench/report.h"
#include "bench/verify_bound.h"
#include "bench/workloads.h"
#include "comm/world.h"
#ifdef CPBENCH_HAVE_MPI
#include "comm/mpi_communicator.h"
#endif

using namespace cpbench;
using nlohmann::json;

namespace {

void print_list() {
  std::printf("Strategies (docs/DESIGN.md):\n");
  for (const auto& s : strategy_registry()) {
    std::printf("  %-13s %s\n", s.name.c_str(), s.constraints.c_str());
    std::string sum = s.summary;
    size_t pos = 0;
    while ((pos = sum.find('\n', pos)) != std::string::npos) sum.replace(pos, 1, "\n                "), pos += 17;
    std::printf("                %s\n", sum.c_str());
    std::printf("                tiers: %s\n", s.tiers.c_str());
  }
  std::printf("\nModel presets (configs/models/, embedded):\n");
  for (const auto& m : model_presets())
    std::printf("  %-12s D=%-6d H=%-4d G=%-3d d=%-4d F=%-6lld L=%-4lld V=%-7lld %s\n", m.name.c_str(), m.dim, m.heads,
                m.kv_heads, m.head_dim, static_cast<long long>(m.ffn_dim), static_cast<long long>(m.layers),
                static_cast<long long>(m.vocab), m.description.c_str());
  std::printf("\nWorkloads for --docs NAME (configs/workloads/, embedded; fixed packs scaled to N, "
              "distributions sampled with --seed or NAME:SEED):\n");
  for (const auto& w : workloads())
    if (w.sampled())
      std::printf("  %-12s sampled: %s\n", w.name.c_str(), w.description.c_str());
    else
      std::printf("  %-12s %zu documents: %s\n", w.name.c_str(), w.weights.size(), w.description.c_str());
  std::printf("\nDefault run (configs/runs/default.json, embedded): %s\n", default_run_preset().dump().c_str());
  std::printf("\nPreset keys (--config FILE; flags are the keys with '-' for '_'): %s\n", known_option_keys().c_str());
}

// `cpbench list --json`: what print_list prints, as data, plus every flag (command_line_json) and
// the report schema version, so that tools and tests (tests/python/fuzz_cli.py,
// check_design_cli.py) read the binary's own lists instead of keeping copies.
json list_json() {
  json strategies = json::array();
  for (const auto& info : strategy_registry()) {
    const auto s = info.make();
    const Capabilities& can = info.can;  // the strategy's own (its describe())
    json passes = {"train", "prefill"};  // every strategy runs these (bench/plan.cpp refuses none)
    if (can.decode) passes.push_back("decode");
    // The travel policies (bench/parts/ring_travel.h): K,V travel everywhere; those whose queries
    // travel where the strategy takes pass-Q, and a single-ring-only one except where the
    // strategy's mesh is a double ring (double-ring).
    json ring_pass = json::array();
    LayerShape probe;
    probe.H = probe.G = 8;
    probe.d = 8;
    probe.N = 64;
    const bool double_ring = s->resolve_mesh(MeshSpec{}, probe, 4).usp_ring == UspRing::double_;
    for (const RingTravelPolicy& t : ring_travels())
      if (!t.queries_travel || (can.pass_q && (t.single_ring_only == nullptr || !double_ring)))
        ring_pass.push_back(t.flag);
    // --attention mla: what its levels can move (--mla-travel), empty when it does not run MLA.
    json mla_travel = json::array();
    if (can.mla) mla_travel.push_back("expanded");
    if (can.mla_latent) mla_travel.push_back("latent");
    json balance = {"none"};
    for (BalanceScheme b : {BalanceScheme::doc_zigzag, BalanceScheme::greedy, BalanceScheme::dynamic})
      if (can.supports(b)) balance.push_back(balance_name(b));
    strategies.push_back({{"name", info.name},
                          {"summary", info.summary},
                          {"constraints", info.constraints},
                          {"tiers", info.tiers},
                          {"uses_mesh", can.mesh},
                          {"passes", passes},
                          {"ring_pass", ring_pass},
                          {"balance", balance},
                          {"cached", can.cached},
                          {"mla_travel", mla_travel}});
  }
  json models = json::array();
  for (const auto& m : model_presets())
    models.push_back({{"name", m.name}, {"description", m.description}, {"dim", m.dim}, {"heads", m.heads},
                      {"kv_heads", m.kv_heads}, {"head_dim", m.head_dim}, {"ffn_dim", m.ffn_dim},
                      {"layers", m.layers}, {"vocab", m.vocab}, {"attention", m.mla ? "mla" : "gqa"}});
  json loads = json::array();
  for (const auto& w : workloads()) {
    json e = {{"name", w.name}, {"description", w.description}, {"sampled", w.sampled()}};
    if (w.sampled()) e["source"] = w.source;
    else e["documents"] = w.weights.size();
    loads.push_back(e);
  }
  json preset_keys = json::array();
  for (const auto& o : option_table()) preset_keys.push_back(o.key);
  json j = command_line_json();
  j["schema_version"] = kReportSchemaVersion;
  j["strategies"] = strategies;
  j["models"] = models;
  j["workloads"] = loads;
  j["default_run"] = default_run_preset();
  j["preset_keys"] = preset_keys;
  return j;
}

// SIGINT/SIGTERM: the sweep stops at the next job boundary (ranks agree there), the report is
// written with complete = false, and the exit code is 128 + the signal. A second signal ends the
// process at once (the report on disk still holds every finished job).
void on_stop_signal(int sig) {
  g_stop_signal.store(sig);
  std::signal(sig, SIG_DFL);
}
void install_stop_handlers() {
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
}

// Test-only (tests/mpi/CMakeLists.txt, check_exit_fails_*): CPBENCH_TEST_FORCE_EXIT=N (1..255)
// makes cpbench exit N after it has printed its whole result, so a test can show that a checker
// fails on a non-zero exit even when the output says "VERIFY PASSED". Not for users; unset (0), it
// does nothing; any other value is bad input, refused at setup.
int forced_exit_code() {
  const char* v = std::getenv("CPBENCH_TEST_FORCE_EXIT");
  if (!v || !*v) return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < 1 || n > 255)
    throw std::invalid_argument(std::string("CPBENCH_TEST_FORCE_EXIT='") + v + "': expected an exit code 1..255");
  return int(n);
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
    if (rank == 0) {
      if (cl.list_json) std::printf("%s\n", list_json().dump(2).c_str());
      else print_list();
    }
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
  int forced_exit = 0;
  try {
    forced_exit = forced_exit_code();
    cfg.command = verifying ? "verify" : "run";
    apply_settings(cfg, default_run_preset(), "default preset");
    cfg.seqs_given = false;  // --pass decode defaults --seq to --cached: only a seq the user gave must match
    if (!cl.config_path.empty()) apply_settings(cfg, read_run_preset(cl.config_path), cl.config_path);
    apply_settings(cfg, cl.settings, "command line");
    finalize_config(cfg, P);
#ifdef CPBENCH_HAVE_MPI
    (void)mpi_p2p_progress();  // a bad CPBENCH_COMM_PROGRESS is bad input, refused before any job
#endif
    if (verifying) (void)test_perturbation();  // likewise a bad CPBENCH_TEST_PERTURB (test only)
    if (cfg.threads == 0)
      cfg.threads = std::max(1, int(std::thread::hardware_concurrency()) / std::max(1, world.local_size()));
    jobs = plan_jobs(cfg, planned_world_size(cfg, P), world.local_size());
    if (cfg.dry_run) {
      dry_plan = dry_run_plan(cfg, jobs, planned_world_size(cfg, P));  // no backend, nothing allocated
    } else {
      BackendOptions bo;
      bo.name = cfg.backend;
      bo.threads = cfg.threads;
      bo.local_rank = world.local_rank();
      backend = make_backend(bo);
      backend->set_threads(cfg.threads);
      backend->set_fp8_attention(cfg.fp8());  // --dtype fp8: every attention forward rounds P to e4m3
      if (verifying && backend->name() == "sim")
        throw std::invalid_argument("verify compares computed values, and the sim backend only times the work; "
                                    "simulate with `run`, verify with --backend cpu or cuda");
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

  // ---- the work: a job that fails is recorded and the sweep goes on; a failure outside the jobs
  // (or on one rank while the others wait in a collective, ended by the watchdog) aborts the run.
  try {
    // NCCL's host waits poll under a deadline (comm/nccl_communicator.cpp): --timeout sets it.
    if (cfg.timeout_s > 0) setenv("CPBENCH_NCCL_TIMEOUT_S", std::to_string(cfg.timeout_s).c_str(), 0);
    const json context = report_context(world, *backend, argc, argv, cfg.ranks_per_node, cfg.head_dim);
    std::string write_error;
    // Rank 0 rewrites the report after every job (atomically): a sweep killed late keeps its results.
    auto write_report = [&](const std::vector<JobResult>& results, bool complete, int interrupted) {
      if (cfg.out.empty()) return;
      try {
        write_json_file(cfg.out, make_report(context, cfg, P, results, complete, interrupted));
      } catch (const std::exception& e) {
        write_error = e.what();
      }
    };
    if (rank == 0) write_report({}, false, 0);
    std::vector<JobResult> results;
    int interrupted = 0;
    {
      // The results written so far, for the watchdog's last report (it runs on its own thread).
      std::mutex written_mu;
      std::vector<JobResult> written;
      Harness* current = nullptr;
      auto on_timeout = [&](const std::string& message) {
        if (rank != 0) return;
        std::lock_guard<std::mutex> lk(written_mu);
        std::vector<JobResult> last = written;
        JobResult failed_job;
        if (current && current->current_job_failed(message, &failed_job)) last.push_back(failed_job);
        write_report(last, false, 0);
      };
      Harness harness(cfg, *backend, world, double(cfg.timeout_s), on_timeout);
      current = &harness;
      install_stop_handlers();
      auto sink = [&](const std::vector<JobResult>& so_far) {
        write_report(so_far, false, 0);
        std::lock_guard<std::mutex> lk(written_mu);
        written = so_far;
      };
      if (verifying) {
        results = harness.verify(jobs, sink);
      } else {
        const Peak peak = resolve_peak(cfg, *backend, world);
        backend->mem().set_limit(cfg.mem_limit_bytes);
        results = harness.run(jobs, peak, sink);
      }
      interrupted = harness.interrupted();
      if (rank == 0) {
        write_report(results, interrupted == 0, interrupted);
        if (!cfg.trace.empty()) {
          write_json_file(cfg.trace, json{{"traceEvents", harness.trace()}, {"displayTimeUnit", "ms"}});
          std::printf("trace: %s (open in ui.perfetto.dev or chrome://tracing)\n", cfg.trace.c_str());
        }
      }
    }
    int failed = 0, verified = 0;
    for (const auto& r : results) {
      failed += r.status == "failed";
      verified += r.status == "ok" && r.verify && r.verify->passed;
    }
    // --min-verified N: fewer verified strategies than requested is a failure (a check that
    // skips a strategy must not pass silently).
    const bool too_few = verifying && verified < cfg.min_verified;
    if (rank == 0) {
      if (verifying) print_verify_table(results);
      else {
        const auto nodes = context["nodes"]["node_of_rank"].get<std::vector<int>>();
        print_run_table(results, *std::max_element(nodes.begin(), nodes.end()) > 0, cfg.pass);
      }
      if (!cfg.out.empty() && write_error.empty()) std::printf("report: %s\n", cfg.out.c_str());
      if (!write_error.empty()) std::fprintf(stderr, "cpbench: error: %s\n", write_error.c_str());
      if (interrupted) std::fprintf(stderr, "cpbench: stopped by signal %d; the report holds the jobs finished before it\n", interrupted);
      if (failed) std::fprintf(stderr, "cpbench: %d job(s) failed (see the table and the report's reasons)\n", failed);
      if (too_few)
        std::fprintf(stderr, "cpbench: --min-verified %d: only %d strateg%s verified\n", cfg.min_verified, verified,
                     verified == 1 ? "y was" : "ies were");
      if (verifying) std::printf("%s\n", failed || too_few ? "VERIFY FAILED" : "VERIFY PASSED");
      std::fflush(stdout);
    }
    // Rank 0 alone knows whether its report writes failed: everyone exits with the same code.
    std::vector<double> code = {interrupted ? 128.0 + interrupted : failed || too_few || !write_error.empty() ? 1.0 : 0.0};
    world.allreduce_max(code);
    world.finalize();
    if (forced_exit > 0) return forced_exit;
    return int(code[0]);
  } catch (const std::exception& e) {
    fail(e.what());
    std::fflush(stderr);
    world.abort(3);
  }
}
