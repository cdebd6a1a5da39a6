// cpbench: benchmark and verify context-parallel attention strategies under mpirun.
//   cpbench run    [options]   time the strategies, print a table, write a report
//   cpbench verify [options]   every strategy against single; non-zero exit on failure
//   cpbench list               strategies, presets and their constraints
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <thread>

#include "bench/config.h"
#include "bench/harness.h"
#include "bench/report.h"
#include "comm/world.h"

using namespace cpbench;
using nlohmann::json;

namespace {

// Options shared by run and verify; each sets a key of the settings JSON when given.
struct Flags {
  std::string config, model, strategies, seq, placement, mesh, usp_layout, backend, comm, dtype, out, trace, dump;
  int64_t batch = 0;
  int heads = 0, kv_heads = 0, head_dim = 0, dim = 0, ulysses = 0, ring = 0, warmup = 0, iters = 0, threads = 0;
  int64_t seed = 0;
  bool causal = true, rope = true, no_progress = false;
  double peak = 0;
  std::vector<std::pair<std::string, CLI::Option*>> given;

  void add(CLI::App* app) {
    auto reg = [&](const std::string& key, CLI::Option* o) { given.emplace_back(key, o); };
    app->add_option("--config", config, "run preset (JSON); flags given here override it")->check(CLI::ExistingFile);
    reg("model", app->add_option("--model", model, "model preset (cpbench list)"));
    reg("strategies", app->add_option("--strategies", strategies, "comma-separated; default: every applicable one"));
    reg("seq", app->add_option("--seq", seq, "global sequence length(s), comma-separated"));
    reg("batch", app->add_option("--batch", batch, "batch size B"));
    reg("heads", app->add_option("--heads", heads, "query heads H"));
    reg("kv_heads", app->add_option("--kv-heads", kv_heads, "key/value heads G"));
    reg("head_dim", app->add_option("--head-dim", head_dim, "head dimension d"));
    reg("dim", app->add_option("--dim", dim, "model dimension D"));
    reg("causal", app->add_flag("--causal,!--no-causal", causal, "causal mask (default) or none"));
    reg("rope", app->add_flag("--rope,!--no-rope", rope, "rotary embedding (default) or none"));
    reg("ulysses", app->add_option("--ulysses", ulysses, "USP Ulysses degree U"));
    reg("ring", app->add_option("--ring", ring, "USP ring degree R"));
    reg("mesh", app->add_option("--mesh", mesh, "'all': every factorization U x R of P"));
    reg("placement", app->add_option("--placement", placement, "ulysses-inner (default) | ring-inner"));
    reg("usp_layout", app->add_option("--usp-layout", usp_layout, "usp ring layout: auto (zigzag iff causal) | zigzag | contiguous"));
    reg("warmup", app->add_option("--warmup", warmup, "warm-up iterations (discarded)"));
    reg("iters", app->add_option("--iters", iters, "timed iterations"));
    reg("seed", app->add_option("--seed", seed, "input seed"));
    reg("threads", app->add_option("--threads", threads, "compute threads per rank (default: cores per node / ranks per node)"));
    reg("backend", app->add_option("--backend", backend, "cpu | cuda"));
    reg("comm", app->add_option("--comm", comm, "mpi | nccl"));
    reg("dtype", app->add_option("--dtype", dtype, "fp32 | bf16 | fp16"));
    reg("out", app->add_option("--out", out, "write the JSON report here"));
    reg("trace", app->add_option("--trace", trace, "write a Chrome/Perfetto trace here"));
    reg("dump", app->add_option("--dump", dump, "verify: write .npy tensors and meta.json under DIR/STRATEGY/"));
    reg("peak_tflops", app->add_option("--peak-tflops", peak, "peak TFLOP/s per rank for MFU"));
    app->add_flag("--no-progress", no_progress, "no progress lines on stderr");
  }

  json settings() const {
    json j = json::object();
    for (const auto& [key, opt] : given) {
      if (opt->count() == 0) continue;
      if (key == "model") j[key] = model;
      else if (key == "strategies") j[key] = strategies;
      else if (key == "seq") {
        json list = json::array();
        std::stringstream ss(seq);
        std::string item;
        while (std::getline(ss, item, ',')) {
          size_t used = 0;
          long long v = 0;
          try { v = std::stoll(item, &used); } catch (const std::exception&) { used = 0; }
          if (used != item.size() || item.empty())
            throw std::invalid_argument("--seq: '" + item + "' is not an integer");
          list.push_back(v);
        }
        j[key] = list;
      }
      else if (key == "batch") j[key] = batch;
      else if (key == "heads") j[key] = heads;
      else if (key == "kv_heads") j[key] = kv_heads;
      else if (key == "head_dim") j[key] = head_dim;
      else if (key == "dim") j[key] = dim;
      else if (key == "causal") j[key] = causal;
      else if (key == "rope") j[key] = rope;
      else if (key == "ulysses") j[key] = ulysses;
      else if (key == "ring") j[key] = ring;
      else if (key == "mesh") j[key] = mesh;
      else if (key == "placement") j[key] = placement;
      else if (key == "usp_layout") j[key] = usp_layout;
      else if (key == "warmup") j[key] = warmup;
      else if (key == "iters") j[key] = iters;
      else if (key == "seed") j[key] = seed;
      else if (key == "threads") j[key] = threads;
      else if (key == "backend") j[key] = backend;
      else if (key == "comm") j[key] = comm;
      else if (key == "dtype") j[key] = dtype;
      else if (key == "out") j[key] = out;
      else if (key == "trace") j[key] = trace;
      else if (key == "dump") j[key] = dump;
      else if (key == "peak_tflops") j[key] = peak;
    }
    if (no_progress) j["progress"] = false;
    return j;
  }
};

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
  std::printf("\nDefault run (configs/runs/default.json, embedded): %s\n", default_run_preset().dump().c_str());
}

// Reads a run preset file; errors name the file.
json read_config_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::invalid_argument("cannot read config file " + path);
  try {
    return json::parse(f);
  } catch (const json::parse_error& e) {
    throw std::invalid_argument("config file " + path + " is not valid JSON: " + e.what());
  }
}

}  // namespace

int main(int argc, char** argv) {
  World& world = World::init(&argc, &argv);
  const int rank = world.rank(), P = world.size();
  auto fail = [&](const std::string& msg) {
    if (P > 1) std::fprintf(stderr, "cpbench: error (rank %d of %d): %s\n", rank, P, msg.c_str());
    else std::fprintf(stderr, "cpbench: error: %s\n", msg.c_str());
  };

  CLI::App app{"cpbench: benchmark context-parallel attention strategies (run under mpirun)"};
  app.require_subcommand(1);
  Flags run_flags, verify_flags;
  CLI::App* run_cmd = app.add_subcommand("run", "time the strategies, print a table, write a report");
  CLI::App* verify_cmd = app.add_subcommand("verify", "every strategy against single; non-zero exit on failure");
  app.add_subcommand("list", "strategies, presets and their constraints");
  run_flags.add(run_cmd);
  verify_flags.add(verify_cmd);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = 0;
    if (rank == 0) code = app.exit(e);
    else code = e.get_exit_code();
    world.finalize();
    return code;
  }

  if (app.got_subcommand("list")) {
    if (rank == 0) print_list();
    world.finalize();
    return 0;
  }
  const bool verifying = app.got_subcommand("verify");
  const Flags& flags = verifying ? verify_flags : run_flags;

  // ---- configuration: every rank resolves the same config; invalid input fails on all ----
  RunConfig cfg;
  std::vector<Job> jobs;
  std::unique_ptr<Backend> backend;
  std::string setup_error;
  try {
    cfg.command = verifying ? "verify" : "run";
    apply_settings(cfg, default_run_preset(), "default preset");
    if (!flags.config.empty()) apply_settings(cfg, read_config_file(flags.config), flags.config);
    apply_settings(cfg, flags.settings(), "command line");
    finalize_config(cfg, P);
    if (cfg.threads == 0)
      cfg.threads = std::max(1, int(std::thread::hardware_concurrency()) / std::max(1, world.local_size()));
    jobs = plan_jobs(cfg, P);
    BackendOptions bo;
    bo.name = cfg.backend;
    bo.threads = cfg.threads;
    bo.local_rank = world.local_rank();
    backend = make_backend(bo);
    backend->set_threads(cfg.threads);
    if (verifying && backend->name() == "sim")
      throw std::invalid_argument("verify compares computed values, and the sim backend only times the work; "
                                  "simulate with `run`, verify with --backend cpu or cuda");
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
