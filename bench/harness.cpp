#include "bench/harness.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>

#include "bench/inputs.h"

namespace cpbench {

namespace {

using nlohmann::json;

json stats_json(std::vector<double> v) {
  json j;
  j["samples"] = v;
  std::sort(v.begin(), v.end());
  auto q = [&](double p) {  // linear interpolation between closest ranks
    if (v.size() == 1) return v[0];
    const double x = p * double(v.size() - 1);
    const size_t i = size_t(x);
    const double f = x - double(i);
    return i + 1 < v.size() ? v[i] * (1 - f) + v[i + 1] * f : v[i];
  };
  j["median"] = q(0.5);
  j["p10"] = q(0.1);
  j["p90"] = q(0.9);
  j["min"] = v.front();
  j["max"] = v.back();
  return j;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Algorithm bytes of one call (nccl-tests): what the op moves from the user's point of view.
double algo_bytes(const CommRecord& r) {
  return r.op == OpKind::all_gather ? double(r.buffer_bytes) * r.group_size : double(r.buffer_bytes);
}

json phase_comm_json(const std::vector<CommRecord>& recs, Phase ph) {
  struct Agg {
    std::string op, group;
    int group_size = 0;
    int64_t count = 0, bytes = 0;
    double time_ms = 0, algo = 0;
  };
  std::map<std::pair<std::string, std::string>, Agg> by;
  for (const auto& r : recs) {
    if (r.phase != ph) continue;
    Agg& a = by[{op_name(r.op), r.group}];
    a.op = op_name(r.op);
    a.group = r.group;
    a.group_size = r.group_size;
    a.count += 1;
    a.bytes += r.bytes_sent;
    a.time_ms += r.t1_ms - r.t0_ms;
    a.algo += algo_bytes(r);
  }
  json ops = json::array();
  for (auto& kv : by) {
    const Agg& a = kv.second;
    // A group of one rank moves nothing: no bandwidth to speak of.
    const double algbw = a.time_ms > 0 && a.group_size > 1 ? a.algo / a.time_ms / 1e6 : 0.0;
    const bool p2p = a.op == "send" || a.op == "recv";
    const double busbw = p2p || a.group_size <= 1 ? algbw : algbw * (a.group_size - 1) / a.group_size;
    ops.push_back({{"op", a.op}, {"group", a.group}, {"group_size", a.group_size}, {"count", a.count},
                   {"bytes_sent", a.bytes}, {"time_ms", a.time_ms}, {"algbw_gbps", algbw},
                   {"busbw_gbps", busbw}});
  }
  return ops;
}

int64_t phase_bytes(const std::vector<CommRecord>& recs, Phase ph) {
  int64_t b = 0;
  for (const auto& r : recs)
    if (r.phase == ph) b += r.bytes_sent;
  return b;
}
double phase_time(const std::vector<CommRecord>& recs, Phase ph) {
  double t = 0;
  for (const auto& r : recs)
    if (r.phase == ph) t += r.t1_ms - r.t0_ms;
  return t;
}

// Known dense bf16/fp16 tensor-core peaks (DESIGN) by device name; 0 when unknown or when the run
// is fp32 (then the GEMM rate is calibrated). Only the SXM parts have these peaks: H100 SXM reports
// "H100 80GB HBM3" (PCIe and NVL are slower), H200 SXM "H200" (not NVL).
double device_table_peak(const std::string& device, const std::string& dtype) {
  if (dtype == "fp32") return 0;
  auto has = [&](const char* s) { return device.find(s) != std::string::npos; };
  if (has("H200") && !has("NVL")) return 989.0;
  if (has("H100") && (has("HBM3") || has("SXM"))) return 989.0;
  if (has("A100")) return 312.0;
  return 0;
}

}  // namespace

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const bool fa = std::isfinite(a[i]), fb = std::isfinite(b[i]);
    if (fa != fb) return INFINITY;  // NaN/Inf positions must match
    if (!fa) continue;
    const double d = double(a[i]) - double(b[i]);
    num += d * d;
    den += double(b[i]) * double(b[i]);
  }
  if (den == 0) return num == 0 ? 0.0 : INFINITY;
  return std::sqrt(num / den);
}

void write_npy(const std::string& path, const std::vector<float>& data, const std::vector<int64_t>& shape) {
  std::string dims;
  for (int64_t s : shape) dims += std::to_string(s) + ", ";
  if (shape.size() > 1) dims.erase(dims.size() - 2);  // "(a, b)" ; 1-D keeps "(a, )" -> "(a,)"
  else dims = std::to_string(shape[0]) + ",";
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot write " + path);
  const unsigned char magic[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  f.write(reinterpret_cast<const char*>(magic), 8);
  const uint16_t hl = uint16_t(header.size());
  const unsigned char len[2] = {static_cast<unsigned char>(hl & 0xff), static_cast<unsigned char>(hl >> 8)};
  f.write(reinterpret_cast<const char*>(len), 2);
  f.write(header.data(), std::streamsize(header.size()));
  f.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size() * sizeof(float)));
  if (!f) throw std::runtime_error("error writing " + path);
}

std::vector<Job> plan_jobs(const RunConfig& cfg, int P) {
  std::vector<Job> jobs;
  for (int64_t seq : cfg.seqs) {
    const LayerShape shape = cfg.shape(seq);
    for (const auto& name : cfg.strategies) {
      const StrategyInfo* info = find_strategy(name);
      auto strat = info->make();
      // --mesh all: the meshes the strategy declares (usp: every U x R; double-ring: every w).
      const MeshSpec base{cfg.ulysses, cfg.ring, cfg.placement, cfg.ring_layout};
      const std::vector<MeshSpec> candidates = strat->mesh_candidates(base, P);
      const bool enumerate = cfg.mesh_all && (strat->uses_mesh() || candidates.size() > 1);
      const std::vector<MeshSpec> requests = enumerate ? candidates : std::vector<MeshSpec>{base};
      // Named explicitly: the strategy itself, or the mesh (--ulysses/--ring) of a mesh strategy.
      const bool named = !enumerate && (cfg.strategies_explicit || (strat->uses_mesh() && (cfg.ulysses || cfg.ring)));
      for (const MeshSpec& req : requests) {
        Job job{info, seq, req, strat->name(), ""};
        try {
          job.mesh = strat->resolve_mesh(req, shape, P);
          job.label = strat->label(job.mesh);
          strat->check(shape, P, job.mesh);
        } catch (const ConstraintError& e) {
          if (named) throw;
          job.skip = e.what();
          if (enumerate) job.label = strat->label(req);
        }
        jobs.push_back(job);
      }
    }
  }
  return jobs;
}

Peak resolve_peak(const RunConfig& cfg, Backend& be, World& w) {
  if (cfg.peak_tflops > 0) return {cfg.peak_tflops, "flag"};
  // The table applies only if every rank's device is in it (decided together: no rank may skip
  // the calibration's collectives alone).
  std::vector<double> table = {device_table_peak(be.device_name(), cfg.dtype)};
  w.allreduce_min(table);
  if (table[0] > 0) return {table[0], "device-table"};
  // Calibrate: every rank runs the same GEMM at once (so shared cores are accounted for);
  // the peak is the median per-rank rate. fp32 on CPU.
  const int64_t n = 1024;
  DType dt = parse_dtype(cfg.dtype);
  Tensor a = be.alloc({n, n}, dt, MemKind::activations), b = be.alloc({n, n}, dt, MemKind::activations),
         c = be.alloc({n, n}, dt, MemKind::activations);
  be.fill(a, 0.5f);
  be.fill(b, 0.25f);
  be.gemm(false, false, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);  // warm-up
  be.synchronize();
  std::vector<double> rates;
  for (int rep = 0; rep < 5; ++rep) {
    w.barrier();
    Event e0 = be.record_event();
    be.gemm(false, false, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    Event e1 = be.record_event();
    be.synchronize();
    rates.push_back(2.0 * n * n * n / (be.elapsed_ms(e0, e1) * 1e-3) / 1e12);
  }
  be.compute_log().clear();
  be.reset_flops();
  std::vector<double> mine = {median(rates)}, all;
  w.gather_to_root(mine, all);
  std::vector<double> peak = {w.rank() == 0 ? median(all) : 0.0};
  w.allreduce_max(peak);
  return {peak[0], "calibrated-gemm"};
}

Harness::Harness(const RunConfig& cfg, Backend& be, World& w) : cfg_(cfg), be_(be), w_(w) {
  w_.barrier();
  clock_offset_ms_ = log_.now_ms();
}

std::vector<json> Harness::run(const std::vector<Job>& jobs, const Peak& peak) {
  std::vector<json> results;
  int index = 0;
  for (const Job& job : jobs) {
    ++index;
    if (w_.rank() == 0 && cfg_.progress)
      std::fprintf(stderr, "[%d/%zu] %s seq=%lld%s\n", index, jobs.size(), job.label.c_str(),
                   static_cast<long long>(job.seq), job.skip.empty() ? "" : " (skipped)");
    if (!job.skip.empty()) {
      results.push_back({{"strategy", job.info->name}, {"label", job.label}, {"seq", job.seq},
                         {"mesh", {{"ulysses", job.mesh.U}, {"ring", job.mesh.R}, {"placement", placement_name(job.mesh.placement)}}},
                         {"status", "skipped"}, {"reason", job.skip}});
      continue;
    }
    results.push_back(run_one(job, peak));
  }
  return results;
}

json Harness::run_one(const Job& job, const Peak& peak) {
  const int P = w_.size();
  const LayerShape shape = cfg_.shape(job.seq);
  auto strat = job.info->make();
  Mesh mesh = Mesh::build(w_, strat->mesh_desc(job.mesh), log_, be_, cfg_.comm);
  be_.mem().reset_peaks();
  be_.set_poison(false);
  StrategyEnv env{&be_, &w_, &mesh, shape, cfg_.seed, job.mesh};
  strat->setup(env);
  be_.synchronize();

  struct Iter {
    double fwd, bwd, step, busy;
  };
  auto iteration = [&]() {
    w_.barrier();
    log_.clear();
    be_.compute_log().clear();
    be_.reset_flops();
    Event e0 = be_.record_event();
    log_.set_phase(Phase::fwd);
    be_.set_phase(int(Phase::fwd));
    strat->forward();
    Event e1 = be_.record_event();
    be_.synchronize();
    log_.set_phase(Phase::bwd);
    be_.set_phase(int(Phase::bwd));
    strat->backward();
    Event e2 = be_.record_event();
    be_.synchronize();
    log_.set_phase(Phase::other);
    be_.set_phase(int(Phase::other));
    Iter it;
    it.fwd = be_.elapsed_ms(e0, e1);
    it.bwd = be_.elapsed_ms(e1, e2);
    it.step = be_.elapsed_ms(e0, e2);
    it.busy = be_.compute_busy_ms();
    return it;
  };

  for (int i = 0; i < cfg_.warmup; ++i) iteration();
  std::vector<double> fwd, bwd, step, exposed;
  std::vector<double> busy;
  double model_flops = 0, hw_flops = 0;
  for (int i = 0; i < cfg_.iters; ++i) {
    Iter it = iteration();
    fwd.push_back(it.fwd);
    bwd.push_back(it.bwd);
    step.push_back(it.step);
    busy.push_back(it.busy);
    exposed.push_back(std::max(0.0, it.step - it.busy));
    if (i == 0) {
      model_flops = be_.model_flops();
      hw_flops = be_.hardware_flops();
    }
  }
  const std::vector<CommRecord> recs = log_.records();  // last timed iteration
  if (!cfg_.trace.empty()) add_trace(job.label, job.seq);

  // comm_standalone: the same communication calls with compute switched off. The layout copies
  // (packing, reordering) still run and are busy time, as in the timed iterations; what is left
  // of the replayed step is the communication itself.
  be_.set_compute_enabled(false);
  std::vector<double> standalone;
  const int replays = std::max(1, std::min(cfg_.iters, 5));
  for (int i = 0; i < replays; ++i) {
    const Iter it = iteration();
    standalone.push_back(std::max(0.0, it.step - it.busy));
  }
  be_.set_compute_enabled(true);

  const MemStats mem = be_.mem().stats();
  strat->teardown();

  // ---- reduce over ranks ----
  const double step_med = median(step), busy_med = median(busy), exposed_med = median(exposed);
  const double standalone_med = median(standalone);
  const int64_t bytes_fwd = phase_bytes(recs, Phase::fwd), bytes_bwd = phase_bytes(recs, Phase::bwd);
  const std::vector<double> mine = {step_med, busy_med, exposed_med, standalone_med, double(bytes_fwd),
                                    double(bytes_bwd), double(mem.peak_total),
                                    double(mem.peak[int(MemKind::weights)]),
                                    double(mem.peak[int(MemKind::activations)]),
                                    double(mem.peak[int(MemKind::comm)]), model_flops, hw_flops};
  const size_t K = mine.size();
  std::vector<double> all;
  w_.gather_to_root(mine, all);
  w_.allreduce_max(fwd);
  w_.allreduce_max(bwd);
  w_.allreduce_max(step);
  if (w_.rank() != 0) return json::object();

  auto col = [&](size_t k) {
    std::vector<double> v(P);
    for (int r = 0; r < P; ++r) v[r] = all[size_t(r) * K + k];
    return v;
  };
  auto col_int = [&](size_t k) {
    std::vector<int64_t> v;
    for (double x : col(k)) v.push_back(int64_t(std::llround(x)));
    return v;
  };
  auto vmax = [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); };
  auto vmean = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return s / double(v.size());
  };

  const int64_t elem = int64_t(dtype_size(shape.dtype));
  const CommPrediction pred = strat->predicted_bytes(shape, P, job.mesh, elem, 4);
  json r;
  r["strategy"] = job.info->name;
  r["label"] = job.label;
  r["seq"] = job.seq;
  r["mesh"] = {{"ulysses", job.mesh.U}, {"ring", job.mesh.R}, {"placement", placement_name(job.mesh.placement)}};
  r["status"] = "ok";
  r["timing"] = {{"fwd_ms", stats_json(fwd)}, {"bwd_ms", stats_json(bwd)}, {"step_ms", stats_json(step)}};
  auto phase_json = [&](Phase ph, size_t k, int64_t predicted) {
    const std::vector<int64_t> per_rank = col_int(k);
    bool match = true;
    for (int64_t b : per_rank) match = match && b == predicted;
    return json{{"bytes_sent", *std::max_element(per_rank.begin(), per_rank.end())},
                {"per_rank", per_rank},
                {"predicted_bytes", predicted},
                {"matches_model", match},
                {"time_ms", phase_time(recs, ph)},
                {"ops", phase_comm_json(recs, ph)}};
  };
  r["comm"] = {{"fwd", phase_json(Phase::fwd, 4, pred.fwd)}, {"bwd", phase_json(Phase::bwd, 5, pred.bwd)}};

  json per_rank_overlap = json::array();
  double min_ratio = 1.0;
  const std::vector<double> ex = col(2), sa = col(3), sent_fwd = col(4), sent_bwd = col(5);
  for (int q = 0; q < P; ++q) {
    // A rank that sends nothing has no communication to hide: ratio 1 (DESIGN's formula would
    // otherwise charge the layout copies of the replay as "communication").
    const bool silent = sent_fwd[q] + sent_bwd[q] == 0;
    const double ratio = silent || sa[q] <= 0 ? 1.0 : std::clamp(1.0 - ex[q] / sa[q], 0.0, 1.0);
    min_ratio = std::min(min_ratio, ratio);
    per_rank_overlap.push_back({{"comm_standalone_ms", sa[q]}, {"exposed_comm_ms", ex[q]}, {"ratio", ratio}});
  }
  r["overlap"] = {{"comm_standalone_ms", vmax(sa)}, {"exposed_comm_ms", vmax(ex)}, {"ratio", min_ratio},
                  {"per_rank", per_rank_overlap}};

  const double mf = vmean(col(10)), hf = vmean(col(11));
  const double step_s = median(step) * 1e-3;
  r["flops"] = {{"model", mf}, {"hardware", hf}};
  r["tflops"] = mf / step_s / 1e12;
  r["mfu"] = mf / (step_s * peak.tflops * 1e12);
  r["hfu"] = hf / (step_s * peak.tflops * 1e12);
  r["peak"] = {{"tflops", peak.tflops}, {"source", peak.source}};

  const std::vector<int64_t> mem_rank = col_int(6);
  r["memory"] = {{"peak_bytes", *std::max_element(mem_rank.begin(), mem_rank.end())},
                 {"per_rank", mem_rank},
                 {"weights", int64_t(vmax(col(7)))},
                 {"activations", int64_t(vmax(col(8)))},
                 {"comm_buffers", int64_t(vmax(col(9)))},
                 {"activation_estimate_bytes", strat->activation_bytes_estimate(shape, P, job.mesh)}};
  const std::vector<double> busy_rank = col(1);
  const double mean_busy = vmean(busy_rank);
  const std::vector<double> flops_rank = col(10);
  const double mean_flops = vmean(flops_rank);
  r["balance"] = {{"compute_ms_per_rank", busy_rank},
                  {"imbalance", mean_busy > 0 ? vmax(busy_rank) / mean_busy : 1.0},
                  {"model_flops_per_rank", flops_rank},
                  {"flops_imbalance", mean_flops > 0 ? vmax(flops_rank) / mean_flops : 1.0}};
  return r;
}

void Harness::add_trace(const std::string& label, int64_t seq) {
  // This rank's events of the last timed iteration; rank 0 collects them all.
  json ev = json::array();
  const int rank = w_.rank();
  const std::string tag = label + " seq=" + std::to_string(seq);
  for (const auto& c : be_.compute_log())
    ev.push_back({{"name", c.name}, {"cat", "compute"}, {"ph", "X"}, {"pid", rank}, {"tid", 0},
                  {"ts", (c.t0_ms - clock_offset_ms_) * 1e3}, {"dur", (c.t1_ms - c.t0_ms) * 1e3},
                  {"args", {{"phase", phase_name(Phase(c.phase))}, {"run", tag}}}});
  for (const auto& c : log_.records())
    ev.push_back({{"name", std::string(op_name(c.op)) + " " + c.group}, {"cat", "comm"}, {"ph", "X"},
                  {"pid", rank}, {"tid", 1}, {"ts", (c.t0_ms - clock_offset_ms_) * 1e3},
                  {"dur", (c.t1_ms - c.t0_ms) * 1e3},
                  {"args", {{"phase", phase_name(c.phase)}, {"bytes_sent", c.bytes_sent},
                            {"buffer_bytes", c.buffer_bytes}, {"peer", c.peer}, {"run", tag}}}});
  const std::vector<std::string> all = w_.gather_strings(ev.dump());
  if (rank != 0) return;
  if (trace_.empty())
    for (int q = 0; q < w_.size(); ++q) {
      trace_.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", q}, {"args", {{"name", "rank " + std::to_string(q)}}}});
      trace_.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", q}, {"tid", 0}, {"args", {{"name", "compute"}}}});
      trace_.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", q}, {"tid", 1}, {"args", {{"name", "communication"}}}});
    }
  for (const auto& s : all)
    for (auto& e : json::parse(s)) trace_.push_back(e);
}

std::vector<json> Harness::verify(const std::vector<Job>& jobs) {
  std::vector<json> results;
  const int P = w_.size();
  const double tol = cfg_.dtype == "fp32" ? 1e-5 : 2e-2;
  const std::vector<std::string> names = dump_tensor_names();
  be_.set_poison(true);

  // Runs one strategy once and returns its global tensors (complete on every rank).
  auto run_and_export = [&](const StrategyInfo& info, const MeshSpec& ms, const LayerShape& shape) {
    auto strat = info.make();
    Mesh mesh = Mesh::build(w_, strat->mesh_desc(ms), log_, be_, cfg_.comm);
    StrategyEnv env{&be_, &w_, &mesh, shape, cfg_.seed, ms};
    strat->setup(env);
    log_.set_phase(Phase::fwd);
    strat->forward();
    log_.set_phase(Phase::bwd);
    strat->backward();
    be_.synchronize();
    log_.set_phase(Phase::other);
    std::map<std::string, std::vector<float>> out;
    for (const auto& n : names) {
      const auto gs = global_tensor_shape(n, shape);
      int64_t count = 1;
      for (int64_t s : gs) count *= s;
      std::vector<float> g(size_t(count), 0.0f);
      strat->export_tensor(n, g);
      w_.allreduce_sum(g);
      out[n] = std::move(g);
    }
    strat->teardown();
    log_.clear();
    return out;
  };

  auto dump = [&](const std::string& label, const MeshSpec& ms, const LayerShape& shape,
                  const std::map<std::string, std::vector<float>>& t) {
    if (cfg_.dump.empty() || w_.rank() != 0) return;
    std::string dir = cfg_.dump + "/" + label;
    if (cfg_.seqs.size() > 1) dir += "/seq" + std::to_string(shape.N);
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw std::runtime_error("cannot create " + dir + ": " + ec.message());
    for (const auto& n : names) write_npy(dir + "/" + n + ".npy", t.at(n), global_tensor_shape(n, shape));
    json meta = {{"strategy", label}, {"B", shape.B}, {"N", shape.N}, {"H", shape.H}, {"G", shape.G},
                 {"d", shape.d}, {"D", shape.D}, {"causal", shape.causal}, {"rope", shape.rope},
                 {"P", P}, {"mesh", {{"ulysses", ms.U}, {"ring", ms.R}, {"placement", placement_name(ms.placement)}}},
                 {"eps", shape.eps}, {"rope_theta", shape.rope_theta}, {"seed", cfg_.seed}, {"dtype", cfg_.dtype}};
    std::ofstream mf(dir + "/meta.json");
    mf << meta.dump(2) << "\n";
    if (!mf) throw std::runtime_error("error writing " + dir + "/meta.json");
  };

  for (int64_t seq : cfg_.seqs) {
    const LayerShape shape = cfg_.shape(seq);
    const StrategyInfo* single = find_strategy("single");
    const MeshSpec single_mesh = single->make()->resolve_mesh({}, shape, P);
    const auto ref = run_and_export(*single, single_mesh, shape);
    dump("single", single_mesh, shape, ref);
    for (const Job& job : jobs) {
      if (job.seq != seq || job.info->name == "single") continue;
      json r = {{"strategy", job.info->name}, {"label", job.label}, {"seq", seq},
                {"mesh", {{"ulysses", job.mesh.U}, {"ring", job.mesh.R}, {"placement", placement_name(job.mesh.placement)}}}};
      if (!job.skip.empty()) {
        r["status"] = "skipped";
        r["reason"] = job.skip;
        results.push_back(r);
        continue;
      }
      if (w_.rank() == 0 && cfg_.progress)
        std::fprintf(stderr, "verify %s seq=%lld\n", job.label.c_str(), static_cast<long long>(seq));
      const auto got = run_and_export(*job.info, job.mesh, shape);
      dump(job.label, job.mesh, shape, got);
      json tensors;
      double worst = 0;
      std::string worst_name;
      for (const auto& n : names) {
        const double e = rel_l2(got.at(n), ref.at(n));
        tensors[n] = std::isfinite(e) ? e : 1e300;
        if (!(e <= worst)) {
          worst = e;
          worst_name = n;
        }
      }
      const bool passed = worst <= tol;
      r["status"] = passed ? "ok" : "failed";
      if (!passed) {
        std::ostringstream why;
        why << "verification failed: " << worst_name << " rel_l2=" << worst << " > " << tol;
        r["reason"] = why.str();
      }
      r["verify"] = {{"passed", passed}, {"max_rel_l2", std::isfinite(worst) ? worst : 1e300},
                     {"tolerance", tol}, {"tensors", tensors}};
      results.push_back(r);
    }
  }
  be_.set_poison(false);
  return results;
}

}  // namespace cpbench
