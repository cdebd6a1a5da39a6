#include "bench/metrics.h"

#include "bench/block/mla.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <stdexcept>

namespace cpbench {

Stats summarize(const std::vector<double>& samples) {
  if (samples.empty()) throw std::invalid_argument("summarize: no samples");
  Stats s;
  s.samples = samples;
  std::vector<double> v = samples;
  std::sort(v.begin(), v.end());
  auto q = [&](double p) {
    const double x = p * double(v.size() - 1);
    const size_t i = size_t(x);
    const double f = x - double(i);
    // v[i] + (v[i+1]-v[i])*f, clamped: exact for equal neighbours and never outside them (the
    // form v[i]*(1-f) + v[i+1]*f can round one ulp below min, which the validator rejects).
    return i + 1 < v.size() ? std::min(v[i + 1], v[i] + (v[i + 1] - v[i]) * f) : v[i];
  };
  s.median = q(0.5);
  s.p10 = q(0.1);
  s.p90 = q(0.9);
  s.min = v.front();
  s.max = v.back();
  return s;
}

double median(std::vector<double> v) { return summarize(v).median; }

double max_of(const std::vector<double>& v) { return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end()); }
int64_t max_of(const std::vector<int64_t>& v) { return v.empty() ? 0 : *std::max_element(v.begin(), v.end()); }

double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / double(v.size());
}

namespace {
// Algorithm bytes of one call (nccl-tests): what the op moves from the user's point of view.
double algo_bytes(const CommRecord& r) {
  return r.op == OpKind::all_gather ? double(r.buffer_bytes) * r.group_size : double(r.buffer_bytes);
}
}  // namespace

std::vector<OpSummary> summarize_ops(const std::vector<CommRecord>& recs, Phase ph) {
  std::map<std::pair<std::string, std::string>, std::pair<OpSummary, double>> by;  // -> (line, algo bytes)
  for (const auto& r : recs) {
    if (r.phase != ph) continue;
    auto& [a, algo] = by[{op_name(r.op), r.group}];
    a.op = op_name(r.op);
    a.group = r.group;
    a.group_size = r.group_size;
    a.count += 1;
    a.bytes_sent += r.bytes_sent;
    a.time_ms += r.t1_ms - r.t0_ms;
    algo += algo_bytes(r);
  }
  std::vector<OpSummary> out;
  for (auto& kv : by) {
    OpSummary a = kv.second.first;
    // A group of one rank moves nothing: no bandwidth to speak of.
    a.algbw_gbps = a.time_ms > 0 && a.group_size > 1 ? kv.second.second / a.time_ms / 1e6 : 0.0;
    const bool p2p = a.op == "send" || a.op == "recv";
    a.busbw_gbps = p2p || a.group_size <= 1 ? a.algbw_gbps : a.algbw_gbps * (a.group_size - 1) / a.group_size;
    out.push_back(a);
  }
  return out;
}

int64_t phase_bytes(const std::vector<CommRecord>& recs, Phase ph) {
  int64_t b = 0;
  for (const auto& r : recs)
    if (r.phase == ph) b += r.bytes_sent;
  return b;
}

TierBytes phase_tier_bytes(const std::vector<CommRecord>& recs, Phase ph) {
  TierBytes t;
  for (const auto& r : recs)
    if (r.phase == ph) t.intra += r.intra_node_bytes, t.inter += r.inter_node_bytes;
  return t;
}

double phase_time_ms(const std::vector<CommRecord>& recs, Phase ph) {
  double t = 0;
  for (const auto& r : recs)
    if (r.phase == ph) t += r.t1_ms - r.t0_ms;
  return t;
}

namespace {
// Sorted, disjoint cover of the intervals (empty ones dropped).
std::vector<Interval> merged(std::vector<Interval> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](const Interval& i) { return !(i.t1 > i.t0); }), v.end());
  std::sort(v.begin(), v.end(), [](const Interval& a, const Interval& b) { return a.t0 < b.t0; });
  std::vector<Interval> out;
  for (const Interval& i : v) {
    if (!out.empty() && i.t0 <= out.back().t1) out.back().t1 = std::max(out.back().t1, i.t1);
    else out.push_back(i);
  }
  return out;
}
}  // namespace

double union_length(std::vector<Interval> v) {
  double s = 0;
  for (const Interval& i : merged(std::move(v))) s += i.t1 - i.t0;
  return s;
}

double intersection_length(std::vector<Interval> a, std::vector<Interval> b) {
  const std::vector<Interval> ma = merged(std::move(a)), mb = merged(std::move(b));
  double s = 0;
  size_t i = 0, j = 0;
  while (i < ma.size() && j < mb.size()) {  // sweep two sorted disjoint lists
    const double lo = std::max(ma[i].t0, mb[j].t0), hi = std::min(ma[i].t1, mb[j].t1);
    if (hi > lo) s += hi - lo;
    if (ma[i].t1 < mb[j].t1) ++i;
    else ++j;
  }
  return s;
}

double hta_overlap(const std::vector<CommRecord>& comm, const std::vector<ComputeRecord>& compute) {
  std::vector<Interval> c, k;
  for (const auto& r : comm)
    if (r.op != OpKind::barrier) c.push_back({r.t0_ms, r.t1_ms});
  for (const auto& r : compute) k.push_back({r.t0_ms, r.t1_ms});
  const double total = union_length(c);
  if (total <= 0) return 1.0;
  return std::clamp(intersection_length(c, k) / total, 0.0, 1.0);
}

double exposed_overlap_ratio(double exposed_ms, double standalone_ms, bool sends_nothing) {
  if (sends_nothing || standalone_ms <= 0) return 1.0;
  return std::clamp(1.0 - exposed_ms / standalone_ms, 0.0, 1.0);
}

double imbalance(const std::vector<double>& per_rank) {
  const double m = mean_of(per_rank);
  // max >= mean exactly; the floating-point mean of thousands of equal values can round above
  // their maximum (0.99999999999995 for 4,096 simulated ranks), which is no imbalance at all.
  return m > 0 ? std::max(1.0, max_of(per_rank) / m) : 1.0;
}

CacheFit longest_cache(const CacheFitInput& in) {
  if (in.layers < 1 || in.shards < 1 || in.capacity <= 0 || in.cache_bytes_per_token <= 0)
    throw std::invalid_argument("longest_cache: need layers >= 1, shards >= 1, capacity > 0 and cache bytes per token > 0, got layers=" +
                                std::to_string(in.layers) + " shards=" + std::to_string(in.shards) + " capacity=" +
                                std::to_string(in.capacity) + " per_token=" + std::to_string(in.cache_bytes_per_token));
  const int64_t weights = (in.layers * in.block_parameters + 2 * in.vocab * in.dim) * kWeightBytesPerParam;
  const int64_t room = in.capacity - weights - in.step_bytes;
  CacheFit f;
  f.max_cached_tokens = room > 0 ? in.shards * (room / (in.layers * in.cache_bytes_per_token)) : 0;
  f.formula = "per rank: capacity " + std::to_string(in.capacity) + " B - weights (L " + std::to_string(in.layers) +
              " x " + std::to_string(in.block_parameters) + " + 2 x V " + std::to_string(in.vocab) + " x D " +
              std::to_string(in.dim) + ") x 2 B = " + std::to_string(weights) + " B - one step " +
              std::to_string(in.step_bytes) + " B, over L x " + std::to_string(in.cache_bytes_per_token) +
              " B per cached token held, x " + std::to_string(in.shards) + " ranks sharing the cache";
  return f;
}

ModelEstimate model_estimate(const ModelEstimateInput& in) {
  const auto str = [](int64_t v) { return std::to_string(v); };
  if (in.layers < 1 || in.tp < 1 || in.mlp_tp < 1 || in.replicas < 1 || in.replicas % in.tp != 0 ||
      in.replicas % in.mlp_tp != 0)
    throw std::invalid_argument("model_estimate: layers, tp, mlp_tp and replicas must be >= 1 and tp, mlp_tp divide "
                                "replicas, got layers=" + str(in.layers) + " tp=" + str(in.tp) +
                                " mlp_tp=" + str(in.mlp_tp) + " replicas=" + str(in.replicas));
  const bool opt = in.shard == "optimizer", grads = in.shard == "grads", params = in.shard == "params";
  if (!opt && !grads && !params && in.shard != "none")
    throw std::invalid_argument("model_estimate: shard must be none, optimizer, grads or params, got '" + in.shard + "'");
  ModelEstimate e;
  e.layers = in.layers;
  e.shard = in.shard;
  // Embedding and output head (untied): V x D each, vocabulary-parallel over the TP group; a
  // rank holds at most ceil(2VD / t) of them.
  const int64_t head = (2 * in.vocab * in.dim + in.tp - 1) / in.tp;
  const int64_t attn = in.block_parameters - in.norm_parameters - in.mlp_parameters;
  auto group = [&](const char* name, int64_t copies, int64_t n, int64_t g) {
    e.groups.push_back({name, copies, n, g, (n + g - 1) / g});
  };
  // The ranks holding the same weights: every rank the norms (held whole), the ranks at the same
  // TP position the projections and the vocabulary shards.
  group("norms", in.layers, in.norm_parameters, in.replicas);
  group("attention", in.layers, attn, in.replicas / in.tp);
  group("mlp", in.layers, in.mlp_parameters, in.replicas / in.mlp_tp);
  group("embedding", 1, head, in.replicas / in.tp);
  int64_t whole = 0, sharded = 0;
  for (const WeightGroup& w : e.groups) whole += w.copies * w.parameters, sharded += w.copies * w.shard;
  e.parameters = whole;
  // The largest unit whose full weights (params) or full gradients (grads, params) exist at once:
  // one block, or the embedding and head.
  const int64_t unit = std::max(in.block_parameters, head);
  e.weights = kWeightBytesPerParam * ((params ? sharded : whole) + (params ? unit : 0));
  e.grads = kGradBytesPerParam * ((grads || params ? sharded + unit : whole));
  e.optimizer = kOptimizerBytesPerParam * (in.shard == "none" ? whole : sharded);
  if (in.recompute != "none" && in.recompute != "selective" && in.recompute != "full")
    throw std::invalid_argument("model_estimate: recompute must be none, selective or full, got '" + in.recompute + "'");
  if (in.core_activation_bytes < 0 || in.core_activation_bytes > in.block_activation_bytes)
    throw std::invalid_argument("model_estimate: the core's activations " + str(in.core_activation_bytes) +
                                " B are not part of the block's " + str(in.block_activation_bytes) + " B");
  e.core_activations = in.core_activation_bytes;
  const int64_t kept = in.block_activation_bytes - in.core_activation_bytes;  // selective: per block
  e.activations = in.recompute == "full"        ? in.layers * in.block_input_bytes + in.block_activation_bytes
                  : in.recompute == "selective" ? in.layers * kept + in.core_activation_bytes
                                                : in.layers * in.block_activation_bytes;
  e.total = e.weights + e.grads + e.optimizer + e.activations;
  const std::string L = str(in.layers);
  std::string groups;
  for (const WeightGroup& w : e.groups)
    groups += (groups.empty() ? "" : ", ") + w.name + " " + str(w.copies) + " x " + str(w.parameters) + " over " +
              str(w.replicas) + " replicas -> " + str(w.shard);
  const std::string held = "held " + str(whole) + ", sharded " + str(sharded);
  e.formula = "estimate, per rank: parameters = L " + L + " x " + str(in.block_parameters) +
              " held of one block + embedding and head 2 x V " + str(in.vocab) + " x D " + str(in.dim) + " / tp " +
              str(in.tp) + " = " + str(e.parameters) + "; shard " + in.shard +
              ": groups of ranks holding the same weights, shard = ceil(parameters / replicas) per unit (" + groups +
              "): " + held + "; weights 2 B/param (bf16)" +
              (params ? " x sharded + 2 B x the largest unit " + str(unit) + " gathered" : " x held") +
              ", grads 2 B/param (bf16)" +
              (grads || params ? " x sharded + 2 B x the largest unit " + str(unit) + " before its reduce-scatter"
                               : " x held") +
              ", optimizer 12 B/param (fp32 master + two fp32 Adam moments) x " +
              (in.shard == "none" ? "held" : "sharded") + "; activations = " +
              (in.recompute == "full"
                   ? "L " + L + " x block input " + str(in.block_input_bytes) +
                         " B + one block's measured activations " + str(in.block_activation_bytes) + " B (recompute full)"
               : in.recompute == "selective"
                   ? "L " + L + " x (one block's measured activations " + str(in.block_activation_bytes) +
                         " B - its attention core's " + str(in.core_activation_bytes) + " B) + the core's " +
                         str(in.core_activation_bytes) + " B (recompute selective)"
                   : "L " + L + " x one block's measured activations " + str(in.block_activation_bytes) +
                         " B (recompute none)") +
              "; total = weights + grads + optimizer + activations";
  return e;
}

GradSync grad_sync(const ModelEstimate& e) {
  GradSync s;
  s.shard = e.shard;
  const bool params = e.shard == "params";
  std::string terms;
  for (const WeightGroup& w : e.groups) {
    // One reduce-scatter (or all-gather) of a unit: its shard, g - 1 times, bf16.
    const int64_t once = w.copies * kGradBytesPerParam * w.shard * (w.replicas - 1);
    s.reduce_scatter += once;
    s.all_gather += params ? 2 * once : once;
    terms += (terms.empty() ? "" : " + ") + w.name + " " + std::to_string(w.copies) + " x 2 B x " +
             std::to_string(w.shard) + " x (" + std::to_string(w.replicas) + " - 1)";
  }
  s.bytes = s.reduce_scatter + s.all_gather;
  s.formula = "model, per rank per step (not executed): shard " + e.shard + ": " +
              (params ? "3 x (" : e.shard == "grads" ? "2 x (" : "all-reduce = 2 x (") + terms + ") = " +
              std::to_string(s.bytes) + " B; " +
              (params ? "reduce-scatter of the gradients, all-gather of each unit's parameters before its forward and "
                        "its backward"
               : e.shard == "grads" ? "reduce-scatter of the gradients, all-gather of the updated parameters"
                                    : "reduce-scatter + all-gather of the gradients");
  return s;
}

std::optional<double> expected_job_flops(const LayerShape& s, int copies) {
  if (s.decode()) return std::nullopt;
  const int64_t rows = s.B * s.new_tokens();
  // The projections (w_qkv, or MLA's chain: bench/block/mla.h) and w_o over H values of vdim.
  double gemm = (s.mla ? MlaProjections::forward_gemm_flops(s, rows) : gemm_flops(rows, s.qkv_cols(), s.D)) +
                gemm_flops(rows, s.D, int64_t(s.H) * s.vdim());
  if (s.full_block) gemm += 2 * gemm_flops(rows, s.F, s.D) + gemm_flops(rows, s.D, s.F);  // gate, up; down
  AttnShape a;
  a.B = s.B, a.hq = s.H, a.d = s.d, a.d_v = s.d_v;
  const AttnMask mask = s.mask.attn();
  const double attn = attn_fwd_flops(a, count_visible_pairs(Positions::contiguous(s.pass.cached, s.new_tokens()),
                                                            Positions::contiguous(0, s.N), mask));
  // The backward runs two GEMMs (data and weight gradients) of each forward GEMM's size.
  const double layer = s.forward_only() ? gemm + attn : 3 * gemm + (1 + kAttnBwdModelFactor) * attn;
  return copies * layer;
}

std::vector<std::string> integrity_flags(double tflops, double peak_tflops, const std::string& peak_source,
                                         double counted_flops, std::optional<double> expected) {
  std::vector<std::string> flags;
  char buf[256];
  if (peak_tflops > 0 && tflops > peak_tflops) {
    std::snprintf(buf, sizeof buf, "tflops_over_peak: %.6g TFLOP/s > peak %.6g TFLOP/s (%s), MFU %.3g", tflops,
                  peak_tflops, peak_source.c_str(), tflops / peak_tflops);
    flags.push_back(buf);
  }
  if (expected && std::abs(counted_flops - *expected) > kFlopsMismatchRtol * *expected) {
    std::snprintf(buf, sizeof buf,
                  "flops_mismatch: counted %.10g != model %.10g FLOPs per step, all ranks (%+.4g%%)", counted_flops,
                  *expected, *expected > 0 ? 100 * (counted_flops - *expected) / *expected : 0.0);
    flags.push_back(buf);
  }
  return flags;
}

}  // namespace cpbench
