#include "bench/dry_run.h"

#include <cstdio>

#include "bench/report.h"

namespace cpbench {

using nlohmann::json;

json dry_run_plan(const RunConfig& cfg, const std::vector<Job>& jobs, int P) {
  json plan = json::array();
  for (const Job& job : jobs) {
    const LayerShape shape = cfg.shape(job.seq);
    json j = {{"strategy", job.info->name},
              {"label", job.label},
              {"seq", job.seq},
              {"mesh", mesh_json(job.mesh)}};
    if (!job.skip.empty()) {
      j["status"] = "skipped";
      j["reason"] = job.skip;
    } else {
      const auto strat = job.info->make();
      // The same element sizes the harness gives the model: s of the communicated dtype, and
      // s_acc of the ring gradients' accumulators (--acc-dtype; float32 by default).
      const int64_t elem = int64_t(dtype_size(shape.dtype)), acc = shape.acc_bytes();
      const CommPrediction pred = strat->predicted_bytes(shape, P, job.mesh, elem, acc);
      j["status"] = "planned";
      j["predicted_bytes"] = {{"fwd", pred.fwd}, {"bwd", shape.forward_only() ? 0 : pred.bwd}};
      if (shape.recompute != Recompute::none) j["predicted_bytes"]["recompute"] = pred.rec;  // --recompute
      j["activation_estimate_bytes"] = strat->activation_bytes_estimate(shape, P, job.mesh);
      j["elem_bytes"] = elem;
      j["acc_bytes"] = acc;
    }
    plan.push_back(j);
  }
  return plan;
}

int print_dry_run(const RunConfig& cfg, const json& plan, int P) {
  std::printf("dry run: %zu job(s) planned for P=%d ranks; nothing allocated, nothing run\n", plan.size(), P);
  std::printf("%-22s %10s %-14s %18s %18s %18s\n", "strategy", "seq", "mesh", "fwd bytes/rank", "bwd bytes/rank",
              "activations/rank");
  for (const json& j : plan) {
    const int tp = j["mesh"]["tp"].get<int>();
    const std::string mesh = (tp > 1 ? "t" + std::to_string(tp) + "x" : std::string()) + "u" +
                             std::to_string(j["mesh"]["ulysses"].get<int>()) + "xr" +
                             std::to_string(j["mesh"]["ring"].get<int>());
    if (j["status"] == "skipped") {
      std::printf("%-22s %10lld %-14s skipped: %s\n", j["label"].get<std::string>().c_str(),
                  static_cast<long long>(j["seq"].get<int64_t>()), mesh.c_str(), j["reason"].get<std::string>().c_str());
      continue;
    }
    std::printf("%-22s %10lld %-14s %18lld %18lld %18lld\n", j["label"].get<std::string>().c_str(),
                static_cast<long long>(j["seq"].get<int64_t>()), mesh.c_str(),
                static_cast<long long>(j["predicted_bytes"]["fwd"].get<int64_t>()),
                static_cast<long long>(j["predicted_bytes"]["bwd"].get<int64_t>()),
                static_cast<long long>(j["activation_estimate_bytes"].get<int64_t>()));
    if (j["predicted_bytes"].contains("recompute"))
      std::printf("%-22s %10s %-14s %18s recompute: %lld bytes/rank again inside the backward\n", "", "", "", "",
                  static_cast<long long>(j["predicted_bytes"]["recompute"].get<int64_t>()));
  }
  if (!cfg.out.empty()) {
    try {
      write_json_file(cfg.out, json{{"dry_run", true}, {"config", cfg.to_json(P)}, {"jobs", plan}});
    } catch (const std::exception& e) {
      std::fprintf(stderr, "cpbench: error: cannot write the dry-run plan: %s\n", e.what());
      return 1;
    }
    std::printf("dry-run plan: %s\n", cfg.out.c_str());
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace cpbench
