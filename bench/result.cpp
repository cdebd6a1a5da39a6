#include "bench/result.h"

#include <algorithm>
#include <cmath>

namespace cpbench {

using nlohmann::json;

std::vector<double> RankSummary::pack() const {
  return {step_ms, busy_ms, exposed_ms, standalone_ms, bytes_fwd, bytes_bwd, mem_peak, mem_weights,
          mem_activations, mem_comm, model_flops, hardware_flops, hta_overlap, timed_allocations,
          intra_fwd, inter_fwd, intra_bwd, inter_bwd, block_parameters, block_input_bytes, tp,
          norm_parameters, mlp_parameters, mlp_tp, bytes_rec, intra_rec, inter_rec, core_activations};
}

RankSummary RankSummary::unpack(const double* v) {
  RankSummary s;
  s.step_ms = v[0], s.busy_ms = v[1], s.exposed_ms = v[2], s.standalone_ms = v[3];
  s.bytes_fwd = v[4], s.bytes_bwd = v[5], s.mem_peak = v[6], s.mem_weights = v[7];
  s.mem_activations = v[8], s.mem_comm = v[9], s.model_flops = v[10], s.hardware_flops = v[11];
  s.hta_overlap = v[12], s.timed_allocations = v[13];
  s.intra_fwd = v[14], s.inter_fwd = v[15], s.intra_bwd = v[16], s.inter_bwd = v[17];
  s.block_parameters = v[18], s.block_input_bytes = v[19], s.tp = v[20];
  s.norm_parameters = v[21], s.mlp_parameters = v[22], s.mlp_tp = v[23];
  s.bytes_rec = v[24], s.intra_rec = v[25], s.inter_rec = v[26], s.core_activations = v[27];
  return s;
}

std::string VerifyResult::worst_tensor() const {
  std::string worst = "-";
  double w = 0;
  for (const auto& [name, e] : tensors)
    if (e > w) w = e, worst = name;
  return worst;
}

double TimedResult::overlap_ratio() const {
  double m = 1;
  for (const auto& o : overlap) m = std::min(m, o.ratio);
  return m;
}

bool TimedResult::sends_nothing() const {
  for (const auto* ph : {&comm_fwd, &comm_bwd, comm_recompute ? &*comm_recompute : nullptr})
    if (ph)
      for (int64_t b : ph->per_rank)
        if (b != 0) return false;
  return true;
}

std::vector<std::string> TimedResult::integrity_flags() const {
  double counted = 0;  // every rank's, as the expected figure is the whole job's
  for (double f : model_flops_per_rank) counted += f;
  return cpbench::integrity_flags(tflops, peak.tflops, peak.source, counted, expected_flops);
}

double TimedResult::hta_overlap_ratio() const {
  double m = 1;
  for (const auto& o : overlap) m = std::min(m, o.hta_ratio);
  return m;
}

json mesh_json(const MeshSpec& m) {
  json j = {{"tp", m.tp}, {"ulysses", m.U}, {"ring", m.R}, {"placement", placement_name(m.placement)}};
  if (m.inner_ring > 0) j["inner_ring"] = m.inner_ring;
  if (m.mlp_tp > 0) j["mlp_tp"] = m.mlp_tp;  // the MLP's own TP level (--mlp-tp)
  json levels = json::array();
  for (const MeshLevel& l : m.levels_innermost_first()) levels.push_back({{"name", l.name}, {"size", l.size}});
  j["levels"] = levels;
  return j;
}

JobResult JobResult::of(const Job& job) {
  JobResult r;
  r.strategy = job.info->name;
  r.label = job.label;
  r.seq = job.seq;
  r.mesh = job.mesh;
  return r;
}

TimedResult make_timed_result(const std::vector<RankSummary>& ranks, const Stats& fwd, const Stats& bwd,
                              const Stats& step, const std::vector<CommRecord>& rank0_records,
                              const std::vector<CommPrediction>& predicted, const Peak& peak,
                              int64_t activation_estimate, const std::vector<RankTiers>& predicted_tiers,
                              bool recompute) {
  // One prediction for every rank, or one per rank (a layout whose ranks send different amounts).
  auto predicted_of = [&](size_t r) -> const CommPrediction& { return predicted.size() == 1 ? predicted[0] : predicted.at(r); };
  TimedResult t;
  t.fwd_ms = fwd;
  t.bwd_ms = bwd;
  t.step_ms = step;
  using Field = double RankSummary::*;
  auto comm_phase = [&](Phase ph, Field field, Field intra, Field inter) {
    CommPhaseResult c;
    for (size_t i = 0; i < ranks.size(); ++i) {
      const RankSummary& r = ranks[i];
      c.per_rank.push_back(int64_t(std::llround(r.*field)));
      c.intra_per_rank.push_back(int64_t(std::llround(r.*intra)));
      c.inter_per_rank.push_back(int64_t(std::llround(r.*inter)));
      const CommPrediction& p = predicted_of(i);
      c.predicted_per_rank.push_back(ph == Phase::fwd ? p.fwd : ph == Phase::recompute ? p.rec : p.bwd);
    }
    c.bytes_sent = max_of(c.per_rank);
    c.predicted_bytes = max_of(c.predicted_per_rank);
    c.matches_model = c.per_rank == c.predicted_per_rank;
    c.time_ms = phase_time_ms(rank0_records, ph);
    c.ops = summarize_ops(rank0_records, ph);
    return c;
  };
  t.comm_fwd = comm_phase(Phase::fwd, &RankSummary::bytes_fwd, &RankSummary::intra_fwd, &RankSummary::inter_fwd);
  t.comm_bwd = comm_phase(Phase::bwd, &RankSummary::bytes_bwd, &RankSummary::intra_bwd, &RankSummary::inter_bwd);
  if (recompute)
    t.comm_recompute = comm_phase(Phase::recompute, &RankSummary::bytes_rec, &RankSummary::intra_rec, &RankSummary::inter_rec);
  for (const RankTiers& r : predicted_tiers) {
    t.comm_fwd.predicted_tiers.push_back(r.fwd);
    t.comm_bwd.predicted_tiers.push_back(r.bwd);
    if (recompute) t.comm_recompute->predicted_tiers.push_back(r.rec);
  }
  std::vector<double> model, hw;
  for (const auto& r : ranks) {
    const bool silent = r.bytes_fwd + r.bytes_bwd + r.bytes_rec == 0;
    t.overlap.push_back({r.standalone_ms, r.exposed_ms, exposed_overlap_ratio(r.exposed_ms, r.standalone_ms, silent),
                         r.hta_overlap});
    model.push_back(r.model_flops);
    hw.push_back(r.hardware_flops);
    t.mem_per_rank.push_back(int64_t(r.mem_peak));
    t.mem_weights = std::max(t.mem_weights, int64_t(r.mem_weights));
    t.mem_activations = std::max(t.mem_activations, int64_t(r.mem_activations));
    t.mem_comm = std::max(t.mem_comm, int64_t(r.mem_comm));
    t.timed_allocations += int64_t(r.timed_allocations);
    t.compute_ms_per_rank.push_back(r.busy_ms);
  }
  t.model_flops_per_rank = model;
  t.model_flops = mean_of(model);
  t.hardware_flops = mean_of(hw);
  const double step_s = step.median * 1e-3;
  t.tflops = step_s > 0 ? t.model_flops / step_s / 1e12 : 0;
  t.peak = peak;
  if (peak.tflops > 0 && step_s > 0) {
    t.mfu = t.model_flops / (step_s * peak.tflops * 1e12);
    t.hfu = t.hardware_flops / (step_s * peak.tflops * 1e12);
  }
  t.activation_estimate = activation_estimate;
  return t;
}

namespace {

json stats_json(const Stats& s) {
  return {{"samples", s.samples}, {"median", s.median}, {"p10", s.p10}, {"p90", s.p90}, {"min", s.min}, {"max", s.max}};
}

json comm_phase_json(const CommPhaseResult& c) {
  json ops = json::array();
  for (const auto& o : c.ops)
    ops.push_back({{"op", o.op}, {"group", o.group}, {"group_size", o.group_size}, {"count", o.count},
                   {"bytes_sent", o.bytes_sent}, {"time_ms", o.time_ms}, {"algbw_gbps", o.algbw_gbps},
                   {"busbw_gbps", o.busbw_gbps}});
  json tier_ranks = json::array();
  for (size_t i = 0; i < c.intra_per_rank.size(); ++i)
    tier_ranks.push_back({{"intra_node_bytes", c.intra_per_rank[i]}, {"inter_node_bytes", c.inter_per_rank[i]}});
  json tiers = {{"intra_node_bytes", max_of(c.intra_per_rank)}, {"inter_node_bytes", max_of(c.inter_per_rank)},
                {"per_rank", tier_ranks}};
  if (!c.predicted_tiers.empty()) {
    json pred = json::array();
    for (const TierBytes& t : c.predicted_tiers) pred.push_back({{"intra_node_bytes", t.intra}, {"inter_node_bytes", t.inter}});
    tiers["predicted"] = pred;
  }
  return {{"bytes_sent", c.bytes_sent}, {"per_rank", c.per_rank}, {"predicted_bytes", c.predicted_bytes},
          {"predicted_per_rank", c.predicted_per_rank},
          {"matches_model", c.matches_model}, {"time_ms", c.time_ms}, {"ops", ops}, {"tiers", tiers}};
}

json optional_json(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

}  // namespace

json JobResult::to_json() const {
  json r;
  r["strategy"] = strategy;
  r["label"] = label;
  r["seq"] = seq;
  r["mesh"] = mesh_json(mesh);
  r["status"] = status;
  if (status != "ok") r["reason"] = reason;
  if (!warning.empty()) r["warning"] = warning;
  if (timed) {
    const TimedResult& t = *timed;
    r["timing"] = {{"fwd_ms", stats_json(t.fwd_ms)}, {"bwd_ms", stats_json(t.bwd_ms)}, {"step_ms", stats_json(t.step_ms)}};
    r["comm"] = {{"fwd", comm_phase_json(t.comm_fwd)}, {"bwd", comm_phase_json(t.comm_bwd)}};
    if (t.comm_recompute) r["comm"]["recompute"] = comm_phase_json(*t.comm_recompute);  // --recompute
    json per_rank = json::array();
    double sa = 0, ex = 0;
    for (const auto& o : t.overlap) {
      per_rank.push_back({{"comm_standalone_ms", o.comm_standalone_ms}, {"exposed_comm_ms", o.exposed_comm_ms},
                          {"ratio", o.ratio}, {"hta_ratio", o.hta_ratio}});
      sa = std::max(sa, o.comm_standalone_ms);
      ex = std::max(ex, o.exposed_comm_ms);
    }
    r["overlap"] = {{"comm_standalone_ms", sa}, {"exposed_comm_ms", ex}, {"ratio", t.sends_nothing() ? json(nullptr) : json(t.overlap_ratio())},
                    {"hta_ratio", t.hta_overlap_ratio()}, {"per_rank", per_rank}};
    r["flops"] = {{"model", t.model_flops}, {"hardware", t.hardware_flops}};
    r["tflops"] = t.tflops;
    r["mfu"] = optional_json(t.mfu);
    r["hfu"] = optional_json(t.hfu);
    r["peak"] = {{"tflops", t.peak.tflops > 0 ? json(t.peak.tflops) : json(nullptr)}, {"source", t.peak.source}};
    if (!t.peak.reason.empty()) r["peak"]["reason"] = t.peak.reason;
    const std::vector<std::string> flags = t.integrity_flags();
    r["integrity"] = {{"ok", flags.empty()}, {"flags", flags},
                      {"expected_flops", t.expected_flops ? json(*t.expected_flops) : json(nullptr)}};
    r["memory"] = {{"peak_bytes", max_of(t.mem_per_rank)}, {"per_rank", t.mem_per_rank},
                   {"weights", t.mem_weights}, {"activations", t.mem_activations},
                   {"comm_buffers", t.mem_comm}, {"activation_estimate_bytes", t.activation_estimate},
                   {"timed_allocations", t.timed_allocations}};
    json estimate = nullptr;
    if (t.model_estimate) {
      const ModelEstimate& e = *t.model_estimate;
      json groups = json::array();
      for (const WeightGroup& w : e.groups)
        groups.push_back({{"name", w.name}, {"copies", w.copies}, {"parameters", w.parameters},
                          {"replicas", w.replicas}, {"shard", w.shard}});
      estimate = {{"layers", e.layers}, {"parameters", e.parameters}, {"weights", e.weights}, {"grads", e.grads},
                  {"optimizer", e.optimizer}, {"activations", e.activations}, {"total", e.total},
                  {"core_activations", e.core_activations}, {"shard", e.shard}, {"groups", groups},
                  {"formula", e.formula}};
    }
    r["memory"]["model_estimate"] = estimate;
    json step = nullptr;
    if (t.grad_sync) {  // per training step, apart from the per-layer comm; modelled, not executed
      const GradSync& g = *t.grad_sync;
      step = {{"shard", g.shard}, {"executed", false}, {"grad_sync_bytes", g.bytes},
              {"reduce_scatter_bytes", g.reduce_scatter}, {"all_gather_bytes", g.all_gather}, {"formula", g.formula}};
    }
    r["step"] = step;
    r["balance"] = {{"compute_ms_per_rank", t.compute_ms_per_rank}, {"imbalance", t.imbalance()},
                    {"model_flops_per_rank", t.model_flops_per_rank}, {"flops_imbalance", t.flops_imbalance()}};
    r["balance"]["scheme"] = t.balance_scheme;
    if (!t.visible_pairs_per_rank.empty()) r["balance"]["visible_pairs_per_rank"] = t.visible_pairs_per_rank;
    if (t.balance_scheme == "dynamic" && t.cp_cap > 0)  // not for single, the reference
      r["balance"]["dynamic"] = {{"cp_cap", t.cp_cap}, {"cp_degrees", t.cp_degrees}, {"tokens_per_rank", t.tokens_per_rank},
                                   {"degrees", t.degrees}, {"tokens_by_degree", t.tokens_by_degree}};
    if (!t.packs.empty()) {  // the spread over packs, not one lucky pack
      json packs = json::array();
      std::vector<double> steps, imbalances;
      bool all_ok = true;
      for (const ResampledPack& p : t.packs) {
        packs.push_back({{"lens", p.lens}, {"step_ms", p.step_ms}, {"flops_imbalance", p.flops_imbalance},
                         {"bytes_match_model", p.bytes_match_model}});
        steps.push_back(p.step_ms);
        imbalances.push_back(p.flops_imbalance);
        all_ok = all_ok && p.bytes_match_model;
      }
      auto spread = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return json{{"min", v.front()}, {"median", median(v)}, {"max", v.back()}};
      };
      r["balance"]["resample"] = {{"packs", packs}, {"step_ms", spread(steps)},
                                  {"flops_imbalance", spread(imbalances)}, {"bytes_match_model", all_ok}};
    }
  }
  if (timed && timed->inference) {
    const InferenceResult& i = *timed->inference;
    const bool decode = i.pass == "decode";  // the fields of the other pass are null
    r["inference"] = {{"pass", i.pass}, {"ring_pass", decode ? json(nullptr) : json(i.ring_pass)},
                      {"cached", i.cached}, {"new_tokens", i.new_tokens},
                      {"miss_rate", decode ? json(nullptr) : json(i.miss_rate)},
                      {"decode_steps", decode ? json(i.decode_steps) : json(nullptr)},
                      {"kv_cache_bytes", i.kv_cache_bytes},
                      {"ttft_ms", decode ? json(nullptr) : json(i.ttft_ms)},
                      {"tpot_ms", decode ? json(i.tpot_ms) : json(nullptr)},
                      {"memory_capacity_bytes", i.memory_capacity_bytes > 0 ? json(i.memory_capacity_bytes) : json(nullptr)},
                      {"max_cached_tokens", i.fit ? json(i.fit->max_cached_tokens) : json(nullptr)},
                      {"max_cached_formula", i.fit ? json(i.fit->formula) : json(nullptr)}};
  }
  if (verify) {
    json tensors = json::object();
    for (const auto& [name, e] : verify->tensors) tensors[name] = e;
    r["verify"] = {{"passed", verify->passed}, {"max_rel_l2", verify->max_rel_l2},
                   {"tolerance", verify->tolerance}, {"tensors", tensors}};
  }
  if (numerics) {
    // One figure per seed, and its median, min and max (a non-finite one as 1e300: JSON has no infinity).
    auto figure = [](const std::vector<double>& per_seed) {
      std::vector<double> v;
      for (double x : per_seed) v.push_back(std::isfinite(x) ? x : 1e300);
      const Stats s = summarize(v);
      return json{{"per_seed", v}, {"median", s.median}, {"min", s.min}, {"max", s.max}};
    };
    json tensors = json::object();
    for (const NumericsTensor& t : numerics->tensors)
      tensors[t.name] = {{"rel_fro", figure(t.rel_fro)}, {"max_abs", figure(t.max_abs)},
                         {"single_rel_fro", figure(t.single_rel_fro)}, {"ratio", figure(t.ratio())}};
    r["numerics"] = {{"reference", "float64 attention of single's q, k, v, do (and sinks)"},
                     {"seeds", numerics->seeds}, {"tensors", tensors}};
  }
  return r;
}

}  // namespace cpbench
