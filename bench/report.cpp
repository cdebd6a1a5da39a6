#include "bench/report.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <thread>

#include "comm/world.h"
#ifdef CPBENCH_HAVE_NCCL
#include "comm/nccl_communicator.h"
#endif
#include "kernels/backend.h"
#include "kernels/sim/sim_platform.h"

#ifndef CPBENCH_GIT_SHA
#define CPBENCH_GIT_SHA "unknown"
#endif
#ifndef CPBENCH_VERSION
#define CPBENCH_VERSION "0.0.0"
#endif

namespace cpbench {

using nlohmann::json;

namespace {

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      if (p != std::string::npos) return line.substr(p + 2);
    }
  return "unknown";
}

std::string compiler() {
#if defined(__clang__)
  return "clang " __clang_version__;
#elif defined(__GNUC__)
  return "gcc " __VERSION__;
#else
  return "unknown";
#endif
}

std::string iso_now() {
  char buf[64];
  std::time_t t = std::time(nullptr);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::string human_bytes(double b) {
  char buf[32];
  if (b >= 1 << 30) std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1 << 30));
  else if (b >= 1 << 20) std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1 << 20));
  else if (b >= 1 << 10) std::snprintf(buf, sizeof buf, "%.1f KiB", b / (1 << 10));
  else std::snprintf(buf, sizeof buf, "%.0f B", b);
  return buf;
}

}  // namespace

json report_context(World& w, Backend& be, int argc, char** argv, int ranks_per_node, int head_dim) {
  json c;
  c["date"] = iso_now();
  c["hosts"] = w.all_hosts();
  c["world_size"] = w.size();
  c["ranks_per_node"] = w.local_size();
  c["nodes"] = {{"source", "host"}, {"node_of_rank", w.node_map(0)}};
  if (ranks_per_node > 0)
    c["nodes"] = {{"source", "ranks-per-node"}, {"ranks_per_node", ranks_per_node},
                  {"node_of_rank", w.node_map(ranks_per_node)}};
  c["cpu"] = {{"model", cpu_model()}, {"cores", std::max(1, int(std::thread::hardware_concurrency()))}};
  json gpus = json::array();
  if (be.name() != "cpu") gpus.push_back(be.device_name());
  c["gpus"] = gpus;
  c["versions"] = {{"mpi", w.mpi_version()}, {"nccl", nullptr}, {"cuda", nullptr},
                   {"compiler", compiler()}, {"blas", "OpenBLAS"}};
#ifdef CPBENCH_CUDA_VERSION
  c["versions"]["cuda"] = CPBENCH_CUDA_VERSION;
#endif
#ifdef CPBENCH_NCCL_VERSION
  c["versions"]["nccl"] = CPBENCH_NCCL_VERSION;
#endif
  c["git_sha"] = CPBENCH_GIT_SHA;
  json args = json::array();
  for (int i = 0; i < argc; ++i) args.push_back(argv[i]);
  c["argv"] = args;
  json env = json::object();
  for (const char* k : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE", "CUDA_VISIBLE_DEVICES",
                        "NCCL_DEBUG", "NCCL_ALGO", "NCCL_PROTO", "NCCL_IB_HCA", "NCCL_SOCKET_IFNAME",
                        "OMPI_MCA_btl", "OMPI_MCA_pml", "SLURM_JOB_ID", "CPBENCH_THREADS", "CPBENCH_COMM_PROGRESS",
                        "CPBENCH_SIM_PLATFORM"})
    if (const char* v = std::getenv(k)) env[k] = v;
  c["env"] = env;
  if (json sim = simulated_context(be, head_dim); !sim.is_null()) c["simulated"] = sim;  // cpbench-sim
  return c;
}

json nccl_context(const NcclCallCounts& c, const char* version) {
  auto ops = [](const NcclOpCounts& o) {
    return json{{"all_to_all", o.all_to_all}, {"all_gather", o.all_gather},
                {"reduce_scatter", o.reduce_scatter}, {"send", o.send}, {"recv", o.recv},
                {"barrier", o.barrier}};
  };
  json j;
  j["used"] = c.communicators > 0;
  j["communicators"] = c.communicators;
  j["one_rank_mode"] = c.one_rank_mode;
  j["version"] = version ? json(version) : json(nullptr);
  j["calls_through_nccl"] = ops(c);  // the base: calls through NCCL
  j["calls_local"] = ops(c.local);
  return j;
}

NcclCallCounts current_nccl_counts() {
#ifdef CPBENCH_HAVE_NCCL
  return nccl_call_counts();
#else
  return {};
#endif
}

json make_report(const json& context, const RunConfig& cfg, int world_size, const std::vector<JobResult>& results,
                 bool complete, int interrupted) {
  json r;
  r["schema_version"] = kReportSchemaVersion;
  r["tool"] = {{"name", "cpbench"}, {"version", CPBENCH_VERSION}};
  r["complete"] = complete;
  if (interrupted) r["interrupted_by_signal"] = interrupted;
  r["context"] = context;
  if (cfg.comm == "nccl") {
#ifdef CPBENCH_NCCL_VERSION
    r["context"]["nccl"] = nccl_context(current_nccl_counts(), CPBENCH_NCCL_VERSION);
#else
    r["context"]["nccl"] = nccl_context(current_nccl_counts(), nullptr);
#endif
  }
  r["config"] = cfg.to_json(world_size);
  json list = json::array();
  // A simulated report (context.simulated, from the SimulatedBackend interface) carries its
  // platform's band on every timed result; a measured one has none (its spread is p10-p90).
  const json* band = nullptr;
  if (context.contains("simulated") && context.at("simulated").contains("band")) band = &context.at("simulated").at("band");
  for (const auto& res : results) {
    json j = res.to_json();
    if (band && j.contains("timing"))
      j["timing"]["step_ms"]["band"] = {{"lo", band->at("lo")}, {"hi", band->at("hi")}};
    list.push_back(j);
  }
  r["results"] = list;
  return r;
}

void write_json_file(const std::string& path, const json& j) {
  // Serialise first (invalid UTF-8 in argv/env/host names is replaced, never fatal), then write a
  // temporary file and rename it, removing it on any error.
  const std::string text = j.dump(1, ' ', false, json::error_handler_t::replace);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream f(tmp);
    if (!f) throw std::runtime_error("cannot write " + path);
    f << text << "\n";
    f.close();
    if (!f) {
      std::remove(tmp.c_str());
      throw std::runtime_error("error writing " + path);
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw std::runtime_error("cannot write " + path);
  }
}

void print_run_table(const std::vector<JobResult>& results, bool several_nodes, const std::string& pass) {
  if (pass == "prefill") std::printf("\npass: prefill (forward only: bwd_ms, backward bytes and FLOPs are 0)");
  if (pass == "decode")
    std::printf("\npass: decode (forward only; one step_ms is --decode-steps S tokens per sequence: tpot_ms = step_ms / S)");
  std::printf("\n%-22s %8s %6s %10s %9s %9s %8s %7s %11s %11s %5s %8s %5s %10s %6s%s\n", "strategy", "seq", "status",
              "step_ms", "fwd_ms", "bwd_ms", "TFLOP/s", "MFU", "comm_fwd", "comm_bwd", "model", "overlap", "hta",
              "peak_mem", "imbal", several_nodes ? "  inter_node" : "");
  std::vector<std::string> flagged;  // "label seq=N: flag", listed under the table
  for (const auto& r : results) {
    if (r.status != "ok" || !r.timed) {
      std::printf("%-22s %8lld %6s  %s\n", r.label.c_str(), static_cast<long long>(r.seq), r.status.c_str(),
                  r.reason.c_str());
      continue;
    }
    const TimedResult& t = *r.timed;
    const std::vector<std::string> flags = t.integrity_flags();
    for (const std::string& f : flags) flagged.push_back(r.label + " seq=" + std::to_string(r.seq) + ": " + f);
    const bool model_ok = t.comm_fwd.matches_model && t.comm_bwd.matches_model &&
                          (!t.comm_recompute || t.comm_recompute->matches_model);
    char mfu[16] = "    n/a";
    if (t.mfu) std::snprintf(mfu, sizeof mfu, "%6.1f%%", 100 * *t.mfu);
    int64_t inter = 0;  // the rank that sends most across nodes, fwd + bwd (+ recompute)
    for (size_t i = 0; i < t.comm_fwd.inter_per_rank.size(); ++i)
      inter = std::max(inter, t.comm_fwd.inter_per_rank[i] + t.comm_bwd.inter_per_rank[i] +
                                  (t.comm_recompute ? t.comm_recompute->inter_per_rank[i] : 0));
    const std::string inter_col = several_nodes ? "  " + human_bytes(double(inter)) : "";
    // A job in which no rank sends a byte has no communication to hide: "–", not 100%. (The dash
    // is 3 bytes of UTF-8 and one column, so the padding is written out.)
    const bool no_comm = t.sends_nothing();
    char overlap[16] = "       \u2013", hta[16] = "    \u2013";
    if (!no_comm) {
      std::snprintf(overlap, sizeof overlap, "%7.0f%%", 100 * t.overlap_ratio());
      std::snprintf(hta, sizeof hta, "%4.0f%%", 100 * t.hta_overlap_ratio());
    }
    std::printf("%-22s %8lld %6s %10.2f %9.2f %9.2f %8.4f %7s %11s %11s %5s %s %s %10s %6.2f%s\n",
                r.label.c_str(), static_cast<long long>(r.seq), flags.empty() ? "ok" : "ok!", t.step_ms.median,
                t.fwd_ms.median, t.bwd_ms.median, t.tflops, mfu, human_bytes(double(t.comm_fwd.bytes_sent)).c_str(),
                human_bytes(double(t.comm_bwd.bytes_sent)).c_str(), model_ok ? "=" : "DIFF",
                overlap, hta,
                human_bytes(double(max_of(t.mem_per_rank))).c_str(), t.imbalance(), inter_col.c_str());
    if (t.comm_recompute)  // inside bwd_ms; its own byte term (DESIGN "Recompute")
      std::printf("%-22s recompute: %s per rank sent again inside the backward (bwd_ms includes it)\n", "",
                  human_bytes(double(t.comm_recompute->bytes_sent)).c_str());
    if (t.inference && t.inference->pass == "decode")
      std::printf("%-22s tpot_ms %.4f over %lld steps, kv cache %s per rank\n", "", t.inference->tpot_ms,
                  static_cast<long long>(t.inference->decode_steps), human_bytes(double(t.inference->kv_cache_bytes)).c_str());
    if (!r.warning.empty()) std::printf("%-22s warning: %s\n", "", r.warning.c_str());
  }
  std::printf("(times: median over iterations of the max over ranks; comm: bytes sent per rank per layer; "
              "model: '=' when equal to the analytic model%s)\n",
              several_nodes ? "; inter_node: bytes per layer step sent to other nodes by the rank that sends most" : "");
  std::printf("overlap: 1 - exposed/standalone, the share of the communication's standalone cost hidden behind "
              "compute (waiting on a slower rank counts as exposed); worst rank\n");
  std::printf("hta:     the share of the communication calls' own duration during which the rank computed "
              "(Holistic Trace Analysis); worst rank. Both \u2013 when the job sends nothing\n");
  if (!flagged.empty()) {
    std::printf("ok!: integrity flagged (the report's results[].integrity); do not trust these rates:\n");
    for (const std::string& f : flagged) std::printf("  ! %s\n", f.c_str());
  }
}

void print_verify_table(const std::vector<JobResult>& results) {
  std::printf("\n%-22s %8s %7s %12s %10s  %s\n", "strategy", "seq", "result", "max_rel_l2", "tolerance", "worst tensor");
  for (const auto& r : results) {
    if (r.status == "skipped" || !r.verify) {
      std::printf("%-22s %8lld %7s  %s\n", r.label.c_str(), static_cast<long long>(r.seq),
                  r.status == "skipped" ? "SKIP" : "FAIL", r.reason.c_str());
      continue;
    }
    const VerifyResult& v = *r.verify;
    std::printf("%-22s %8lld %7s %12.3e %10.1e  %s\n", r.label.c_str(), static_cast<long long>(r.seq),
                v.passed ? "PASS" : "FAIL", v.max_rel_l2, v.tolerance, v.worst_tensor().c_str());
  }
  // --numerics: single's error first (one per seq), then each job's and its ratio.
  bool header = false;
  int64_t single_seq = -1;
  for (const auto& r : results) {
    if (!r.numerics || r.numerics->tensors.empty()) continue;
    const NumericsResult& n = *r.numerics;
    if (!header) {
      std::printf("\nerror against float64 attention (relative Frobenius; median over %zu seed%s; [ratio to single])\n",
                  n.seeds.size(), n.seeds.size() == 1 ? "" : "s");
      std::printf("%-22s %8s", "strategy", "seq");
      for (const NumericsTensor& t : n.tensors) std::printf(" %19s", t.name.c_str());
      std::printf("\n");
      header = true;
    }
    if (r.seq != single_seq) {
      std::printf("%-22s %8lld", "single", static_cast<long long>(r.seq));
      for (const NumericsTensor& t : n.tensors) std::printf(" %19.3e", median(t.single_rel_fro));
      std::printf("\n");
      single_seq = r.seq;
    }
    std::printf("%-22s %8lld", r.label.c_str(), static_cast<long long>(r.seq));
    for (const NumericsTensor& t : n.tensors) std::printf(" %10.3e [%6.2f]", median(t.rel_fro), median(t.ratio()));
    std::printf("\n");
  }
}

}  // namespace cpbench
