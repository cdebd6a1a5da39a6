// SimPlatform: reading a platform JSON and the cost of one kernel on it (see sim_platform.h).
#include "kernels/sim/sim_platform.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <stdexcept>

#include "kernels/backend.h"

namespace cpbench {

using nlohmann::json;

const char* sim_class_name(SimClass c) {
  switch (c) {
    case SimClass::gemm: return "gemm";
    case SimClass::attn_fwd: return "attn_fwd";
    case SimClass::attn_bwd: return "attn_bwd";
    case SimClass::attn_fwd_masked: return "attn_fwd_masked";
    case SimClass::attn_bwd_masked: return "attn_bwd_masked";
    case SimClass::attn_decode: return "attn_decode";
  }
  return "?";
}

bool sim_class_optional(SimClass c) {
  return c == SimClass::attn_fwd_masked || c == SimClass::attn_bwd_masked || c == SimClass::attn_decode;
}

SimClass sim_class_fallback(SimClass c) {
  if (c == SimClass::attn_fwd_masked) return SimClass::attn_fwd;
  if (c == SimClass::attn_bwd_masked) return SimClass::attn_bwd;
  return c;
}

double attention_block_size(int64_t nq, int64_t nk, int64_t visible_pairs) {
  if (nq <= 0 || nk <= 0 || visible_pairs <= 0) return 1;
  const double pairs = double(visible_pairs);
  return std::max(1.0, std::min(pairs / double(nq), pairs / double(nk)));
}

namespace {

[[noreturn]] void bad(const std::string& where, const std::string& what) {
  throw std::invalid_argument("platform " + where + ": " + what);
}

double positive(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || !j.at(key).is_number())
    bad(where, std::string("needs a number '") + key + "'");
  const double v = j.at(key).get<double>();
  if (!(v > 0) || !std::isfinite(v)) bad(where, std::string("'") + key + "' must be > 0, got " + std::to_string(v));
  return v;
}

// A table's or curve's "source" string; empty when absent or not a string (callers refuse it).
std::string source_of(const json& o) {
  return o.contains("source") && o.at("source").is_string() ? o.at("source").get<std::string>() : "";
}

// One efficiency table: [[size, efficiency], ...], sizes >= 1 and increasing, efficiencies in (0, 1].
SimPlatform::EffPoints parse_points(const json& arr, const std::string& field, const std::string& where) {
  if (!arr.is_array() || arr.empty()) bad(where, field + " must be a non-empty array of [size, efficiency]");
  SimPlatform::EffPoints out;
  double last = 0;
  for (const json& pt : arr) {
    if (!pt.is_array() || pt.size() != 2 || !pt[0].is_number() || !pt[1].is_number())
      bad(where, field + ": each point is [size, efficiency]");
    const double size = pt[0].get<double>(), eff = pt[1].get<double>();
    if (!(size >= 1) || size <= last) bad(where, field + ": sizes must be >= 1 and increasing");
    if (!(eff > 0 && eff <= 1)) bad(where, field + ": efficiency " + std::to_string(eff) + " is not in (0, 1]");
    out.emplace_back(size, eff);
    last = size;
  }
  return out;
}

// A GEMM shape grid: rows [m, n, k, efficiency] covering every combination of the m, n and k values
// that appear (in any order), m, n, k >= 1, efficiencies in (0, 1].
SimPlatform::GemmGrid parse_gemm_grid(const json& arr, const std::string& field, const std::string& where) {
  if (!arr.is_array() || arr.empty()) bad(where, field + " must be a non-empty array of [m, n, k, efficiency]");
  SimPlatform::GemmGrid g;
  std::map<std::vector<double>, double> eff;
  std::set<double> ms, ns, ks;
  for (const json& row : arr) {
    if (!row.is_array() || row.size() != 4 || !row[0].is_number() || !row[1].is_number() || !row[2].is_number() ||
        !row[3].is_number())
      bad(where, field + ": each row is [m, n, k, efficiency]");
    const double m = row[0].get<double>(), n = row[1].get<double>(), k = row[2].get<double>(), e = row[3].get<double>();
    if (!(m >= 1) || !(n >= 1) || !(k >= 1)) bad(where, field + ": m, n and k must be >= 1");
    if (!(e > 0 && e <= 1)) bad(where, field + ": efficiency " + std::to_string(e) + " is not in (0, 1]");
    if (!eff.emplace(std::vector<double>{m, n, k}, e).second)
      bad(where, field + ": the shape " + row.dump() + " is listed twice");
    ms.insert(m), ns.insert(n), ks.insert(k);
    g.rows.push_back({m, n, k, e});
  }
  g.m.assign(ms.begin(), ms.end()), g.n.assign(ns.begin(), ns.end()), g.k.assign(ks.begin(), ks.end());
  if (eff.size() != g.m.size() * g.n.size() * g.k.size())
    bad(where, field + " must be a complete grid: " + std::to_string(eff.size()) + " shapes for " +
                   std::to_string(g.m.size()) + " m x " + std::to_string(g.n.size()) + " n x " +
                   std::to_string(g.k.size()) + " k values");
  for (double m : g.m)
    for (double n : g.n)
      for (double k : g.k) g.work.push_back(m * n * k / eff.at({m, n, k}));
  return g;
}

// Where x falls on an increasing axis: the lower index and the weight of the upper one (linear in
// x), x held at the ends.
std::pair<size_t, double> axis_weight(const std::vector<double>& axis, double x) {
  if (axis.size() == 1 || x <= axis.front()) return {0, 0.0};
  if (x >= axis.back()) return {axis.size() - 2, 1.0};
  const size_t i = size_t(std::upper_bound(axis.begin(), axis.end(), x) - axis.begin()) - 1;
  return {i, (x - axis[i]) / (axis[i + 1] - axis[i])};
}

json points_json(const SimPlatform::EffPoints& pts) {
  json out = json::array();
  for (const auto& [size, e] : pts) out.push_back({size, e});
  return out;
}

}  // namespace

SimPlatform SimPlatform::from_json(const json& j, const std::string& where) {
  if (!j.is_object()) bad(where, "is not a JSON object");
  SimPlatform p;
  p.file = where;
  p.name = j.value("name", "");
  if (p.name.empty()) bad(where, "needs a non-empty 'name'");
  p.device = j.value("device", p.name);
  if (!j.contains("peak_tflops") || !j.at("peak_tflops").is_object() || j.at("peak_tflops").empty())
    bad(where, "needs 'peak_tflops': {dtype: TFLOP/s, ...}");
  for (const auto& [dt, v] : j.at("peak_tflops").items()) {
    parse_dtype(dt);  // throws on an unknown dtype name
    if (!v.is_number() || !(v.get<double>() > 0)) bad(where, "peak_tflops." + dt + " must be a number > 0");
    p.peak_tflops[dt] = v.get<double>();
  }
  if (!j.contains("efficiency") || !j.at("efficiency").is_object()) bad(where, "needs an 'efficiency' object");
  for (int c = 0; c < kNumSimClasses; ++c) {
    const char* cls = sim_class_name(SimClass(c));
    const json& e = j.at("efficiency");
    if (sim_class_optional(SimClass(c)) && !e.contains(cls)) continue;
    const std::string field = std::string("efficiency.") + cls;
    if (e.contains(cls) && e.at(cls).is_object()) {
      // {"by_head_dim": {"128": points, ...}, "source": "..."}: tables by head dim, or
      // {"points": [...], "source": "..."}: one table for any head dim (a GEMM's), each with where
      // their numbers come from (every number in a platform names its source).
      const json& o = e.at(cls);
      const std::string src = source_of(o);
      if (SimClass(c) == SimClass::gemm && o.contains("shapes")) {
        if (src.empty()) bad(where, field + ".source must say where the table's numbers come from");
        p.efficiency_source[c] = src;
        p.gemm_grid = parse_gemm_grid(o.at("shapes"), field + ".shapes", where);
        // the squares of the grid (where it has them) as the class's table, for has_table
        EffPoints diag;
        for (const auto& r : p.gemm_grid.rows)
          if (r[0] == r[1] && r[1] == r[2]) diag.emplace_back(r[0], r[3]);
        std::sort(diag.begin(), diag.end());
        if (diag.empty()) diag.emplace_back(p.gemm_grid.rows.front()[0], p.gemm_grid.rows.front()[3]);
        p.efficiency[c][0] = diag;
        continue;
      }
      if (o.contains("points") && !o.contains("by_head_dim")) {
        if (src.empty()) bad(where, field + ".source must say where the table's numbers come from");
        p.efficiency_source[c] = src;
        p.efficiency[c][0] = parse_points(o.at("points"), field + ".points", where);
        continue;
      }
      if (!o.contains("by_head_dim") || !o.at("by_head_dim").is_object() || o.at("by_head_dim").empty())
        bad(where, field + " as an object needs a non-empty \"by_head_dim\": {\"HEAD_DIM\": [[size, efficiency], ...]} "
                           "or \"points\": [[size, efficiency], ...]");
      if (src.empty()) bad(where, field + ".source must say where the tables' numbers come from");
      p.efficiency_source[c] = src;
      for (const auto& [key, pts] : o.at("by_head_dim").items()) {
        int d = 0;
        try {
          size_t used = 0;
          d = std::stoi(key, &used);
          if (used != key.size()) d = 0;
        } catch (const std::exception&) {
          d = 0;
        }
        if (d <= 0) bad(where, field + ".by_head_dim: key '" + key + "' is not a head dim (a positive integer)");
        p.efficiency[c][d] = parse_points(pts, field + ".by_head_dim." + key, where);
      }
      continue;
    }
    if (!e.contains(cls) || !e.at(cls).is_array() || e.at(cls).empty())
      bad(where, field + " must be a non-empty array of [size, efficiency] (or {\"by_head_dim\": ..., \"source\": ...})");
    p.efficiency[c][0] = parse_points(e.at(cls), field, where);
  }
  p.memory_bw_gbs = positive(j, "memory_bw_gbs", where);
  p.hbm_gib = positive(j, "hbm_gib", where);
  p.launch_us = j.value("kernel_launch_us", 0.0);
  if (!(p.launch_us >= 0)) bad(where, "kernel_launch_us must be >= 0");
  // Required: every simulated report carries a band, and a band without its source is a number
  // nobody can check.
  if (!j.contains("band") || !j.at("band").is_object())
    bad(where, "needs 'band': {\"lo\": x, \"hi\": y, \"source\": \"...\"} (docs/SIMULATION.md, Bands)");
  const json& b = j.at("band");
  if (!b.contains("lo") || !b.at("lo").is_number() || !b.contains("hi") || !b.at("hi").is_number())
    bad(where, "band.lo and band.hi must be numbers");
  p.band_lo = b.at("lo").get<double>();
  p.band_hi = b.at("hi").get<double>();
  if (!(p.band_lo > 0) || !(p.band_lo <= 1) || !(p.band_hi >= 1) || !std::isfinite(p.band_hi))
    bad(where, "band must satisfy 0 < band.lo <= 1 <= band.hi, got lo " + std::to_string(p.band_lo) + ", hi " +
                   std::to_string(p.band_hi));
  p.band_source = b.value("source", "");
  if (p.band_source.empty()) bad(where, "band.source must name the validation the band comes from");
  if (j.contains("overlap_interference")) {
    const json& oi = j.at("overlap_interference");
    if (!oi.is_object() || !oi.contains("compute_slowdown") || !oi.at("compute_slowdown").is_number())
      bad(where, "overlap_interference needs {\"compute_slowdown\": x, \"source\": \"...\"}");
    p.compute_slowdown = oi.at("compute_slowdown").get<double>();
    if (!(p.compute_slowdown >= 0) || !(p.compute_slowdown <= 10))
      bad(where, "overlap_interference.compute_slowdown must lie in [0, 10], got " + std::to_string(p.compute_slowdown));
    p.interference_source = oi.value("source", "");
    if (p.interference_source.empty()) bad(where, "overlap_interference.source must name where the slowdown comes from");
  }
  const json net = j.contains("network") && j.at("network").is_object() ? j.at("network") : json::object();
  const json intra = net.value("intra", json::object()), inter = net.value("inter", json::object());
  p.intra_bw_gbs = intra.value("bw_gbs", 0.0);
  p.intra_lat_us = intra.value("lat_us", 0.0);
  p.inter_bw_gbs = inter.value("bw_gbs", 0.0);
  p.inter_lat_us = inter.value("lat_us", 0.0) + inter.value("fabric_lat_us", 0.0);
  // network.<tier>.op_us: one NCCL operation's fixed cost, optional (0 when absent)
  auto op_us = [&](const json& link, const char* tier) {
    if (!link.contains("op_us")) return 0.0;
    const json& v = link.at("op_us");
    const double us = v.is_number() ? v.get<double>() : -1;
    if (!(us >= 0) || !(us <= 1e6))
      bad(where, std::string("network.") + tier + ".op_us (one NCCL operation's fixed cost, us) must be a number >= 0, got " +
                     v.dump());
    return us;
  };
  // network.<tier>.p2p: a published point-to-point curve, optional
  auto p2p_curve = [&](const json& link, const char* tier) {
    SimPlatform::P2pCurve c;
    if (!link.contains("p2p")) return c;
    const json& o = link.at("p2p");
    const std::string f = std::string("network.") + tier + ".p2p";
    if (!o.is_object() || !o.contains("size_time_us") || !o.at("size_time_us").is_array() || o.at("size_time_us").empty())
      bad(where, f + " needs {\"size_time_us\": [[bytes, us], ...], \"floor_us\": us, \"source\": ...}");
    c.source = source_of(o);
    if (c.source.empty()) bad(where, f + ".source must say where the curve's numbers come from");
    double last = 0;
    for (const json& row : o.at("size_time_us")) {
      if (!row.is_array() || row.size() != 2 || !row[0].is_number() || !row[1].is_number())
        bad(where, f + ".size_time_us: each row is [bytes, us]");
      const double size = row[0].get<double>(), us = row[1].get<double>();
      if (!(size > last) || !(us > 0)) bad(where, f + ".size_time_us: sizes must increase and times be > 0");
      if (!c.time.empty() && us < c.time.back().second * 1e6)
        bad(where, f + ".size_time_us: a larger message cannot take less time");
      c.time.emplace_back(size, us * 1e-6);
      last = size;
    }
    const double floor_us = o.value("floor_us", 0.0);
    if (!(floor_us >= 0) || floor_us * 1e-6 > c.time.front().second)
      bad(where, f + ".floor_us must be >= 0 and at most the first row's time");
    c.floor_s = floor_us * 1e-6;
    return c;
  };
  p.p2p_intra = p2p_curve(intra, "intra");
  p.p2p_inter = p2p_curve(inter, "inter");
  p.intra_op_us = op_us(intra, "intra");
  p.inter_op_us = op_us(inter, "inter");
  if (intra.contains("nccl")) {
    const json& n = intra.at("nccl");
    const std::string f = "network.intra.nccl";
    if (!n.is_object() || !n.contains("ranks") || !n.at("ranks").is_number_integer() || !n.contains("size_time_us") ||
        !n.at("size_time_us").is_array() || n.at("size_time_us").empty())
      bad(where, f + " needs {\"collective\": ..., \"ranks\": R, \"size_time_us\": [[bytes, us], ...], \"source\": ...}");
    p.nccl_intra.ranks = n.at("ranks").get<int>();
    if (p.nccl_intra.ranks < 2) bad(where, f + ".ranks must be >= 2, got " + std::to_string(p.nccl_intra.ranks));
    p.nccl_intra.collective = n.value("collective", "");
    if (p.nccl_intra.collective != "all_gather" && p.nccl_intra.collective != "reduce_scatter")
      bad(where, f + ".collective must be all_gather or reduce_scatter (a ring collective), got '" +
                     p.nccl_intra.collective + "'");
    p.nccl_intra.source = source_of(n);
    if (p.nccl_intra.source.empty()) bad(where, f + ".source must say where the curve's numbers come from");
    if (!(p.intra_bw_gbs > 0) || !(p.intra_lat_us >= 0))
      bad(where, f + " needs network.intra.bw_gbs > 0 and lat_us >= 0 (the links the curve is compared with)");
    double last = 0;
    for (const json& row : n.at("size_time_us")) {
      if (!row.is_array() || row.size() != 2 || !row[0].is_number() || !row[1].is_number())
        bad(where, f + ".size_time_us: each row is [bytes, us]");
      const double size = row[0].get<double>(), us = row[1].get<double>();
      if (!(size > last) || !(us > 0)) bad(where, f + ".size_time_us: sizes must increase and times be > 0");
      last = size;
      const int R = p.nccl_intra.ranks;
      p.nccl_intra.step.emplace_back(size / R, us * 1e-6 / (R - 1));
    }
  }
  return p;
}

SimPlatform SimPlatform::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) bad(path, "cannot be read");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    bad(path, std::string("is not valid JSON: ") + e.what());
  }
  return from_json(j, path);
}

double SimPlatform::peak(DType t) const {
  auto it = peak_tflops.find(dtype_name(t));
  if (it == peak_tflops.end())
    bad(file, std::string("has no peak_tflops for ") + dtype_name(t) + " (the run's dtype)");
  return it->second;
}

const std::map<int, SimPlatform::EffPoints>& SimPlatform::tables_of(SimClass c) const {
  return has_table(c) ? efficiency[int(c)] : efficiency[int(sim_class_fallback(c))];
}

int SimPlatform::table_head_dim(SimClass c, int d) const {
  const auto& tables = tables_of(c);
  if (tables.count(d)) return d;
  if (tables.count(0)) return 0;
  if (d <= 0) return tables.begin()->first;
  int best = tables.begin()->first;
  double best_dist = 1e300;
  for (const auto& kv : tables) {
    const int key = kv.first;
    const double dist = std::fabs(std::log2(double(key) / double(d)));
    if (dist <= best_dist + 1e-12) {  // ascending keys: an equal distance takes the larger
      best = key;
      best_dist = std::min(best_dist, dist);
    }
  }
  return best;
}

const SimPlatform::EffPoints& SimPlatform::table(SimClass c, int d) const {
  return tables_of(c).at(table_head_dim(c, d));
}

double SimPlatform::efficiency_at(SimClass c, double size, int head_dim) const {
  const EffPoints& pts = table(c, head_dim);
  if (size <= pts.front().first) return pts.front().second;
  if (size >= pts.back().first) return pts.back().second;
  auto hi = std::upper_bound(pts.begin(), pts.end(), size,
                             [](double s, const std::pair<double, double>& p) { return s < p.first; });
  auto lo = hi - 1;
  const double f = (std::log2(size) - std::log2(lo->first)) / (std::log2(hi->first) - std::log2(lo->first));
  return lo->second + f * (hi->second - lo->second);
}

double SimPlatform::gemm_efficiency(double m, double n, double k) const {
  const GemmGrid& g = gemm_grid;
  if (g.work.empty()) return efficiency_at(SimClass::gemm, std::cbrt(std::max(m, 1.0) * std::max(n, 1.0) * std::max(k, 1.0)));
  const auto [i, fi] = axis_weight(g.m, m);
  const auto [j, fj] = axis_weight(g.n, n);
  const auto [l, fl] = axis_weight(g.k, k);
  const size_t N = g.n.size(), K = g.k.size();
  double work = 0;
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 2; ++b)
      for (int c = 0; c < 2; ++c) {
        const double w = (a ? fi : 1 - fi) * (b ? fj : 1 - fj) * (c ? fl : 1 - fl);
        if (w == 0) continue;
        work += w * g.work[((i + a) * N + (j + b)) * K + (l + c)];
      }
  const double cm = std::clamp(m, g.m.front(), g.m.back()), cn = std::clamp(n, g.n.front(), g.n.back()),
               ck = std::clamp(k, g.k.front(), g.k.back());
  return std::min(1.0, cm * cn * ck / work);
}

double SimPlatform::gemm_seconds(int64_t m, int64_t n, int64_t k, DType t) const {
  const double flops = 2.0 * double(m) * double(n) * double(k);
  if (flops <= 0) return launch_us * 1e-6;
  const double busy = flops / (peak(t) * 1e12 * gemm_efficiency(double(m), double(n), double(k)));
  return gemm_grid.work.empty() ? launch_us * 1e-6 + busy : std::max(launch_us * 1e-6, busy);
}

double SimPlatform::compute_seconds(SimClass c, double flops, double size, DType t, int head_dim) const {
  if (flops <= 0) return launch_us * 1e-6;
  return launch_us * 1e-6 + flops / (peak(t) * 1e12 * efficiency_at(c, std::max(size, 1.0), head_dim));
}

double SimPlatform::attention_seconds(int64_t nq, int64_t nk, int64_t visible_pairs, double flops, bool backward,
                                      DType t, int head_dim) const {
  const bool masked = visible_pairs < nq * nk;
  const SimClass c = backward ? (masked ? SimClass::attn_bwd_masked : SimClass::attn_bwd)
                              : (masked ? SimClass::attn_fwd_masked : SimClass::attn_fwd);
  return compute_seconds(c, flops, attention_block_size(nq, nk, visible_pairs), t, head_dim);
}

double SimPlatform::memory_seconds(double bytes) const {
  return launch_us * 1e-6 + std::max(bytes, 0.0) / (memory_bw_gbs * 1e9);
}

double SimPlatform::decode_seconds(double flops, double bytes, double heads_per_key, DType t, int head_dim) const {
  const double eff = has_table(SimClass::attn_decode)
                         ? efficiency_at(SimClass::attn_decode, std::max(heads_per_key, 1.0), head_dim)
                         : 1.0;
  return std::max(memory_seconds(bytes), launch_us * 1e-6 + flops / (peak(t) * 1e12 * eff));
}

namespace {
// A published time curve [(bytes, seconds)] read at `bytes` above its first row: log-log between
// rows, the last row's rate beyond it. (Below the first row each curve has its own rule.)
double curve_above_first(const std::vector<std::pair<double, double>>& pts, double bytes) {
  if (bytes >= pts.back().first) return pts.back().second * bytes / pts.back().first;
  auto hi = std::upper_bound(pts.begin(), pts.end(), bytes,
                             [](double b, const std::pair<double, double>& p) { return b < p.first; });
  auto lo = hi - 1;
  const double f = std::log(bytes / lo->first) / std::log(hi->first / lo->first);
  return lo->second * std::pow(hi->second / lo->second, f);
}
}  // namespace

double SimPlatform::nccl_step_seconds(double bytes) const {
  const auto& pts = nccl_intra.step;
  if (pts.empty()) return 0;
  if (bytes <= pts.front().first) return pts.front().second;  // the curve's floor
  return curve_above_first(pts, bytes);
}

double SimPlatform::p2p_seconds(double bytes, bool one_node) const {
  const P2pCurve& c = one_node ? p2p_intra : p2p_inter;
  const auto& pts = c.time;
  if (pts.empty()) return 0;
  // below the first row: its bandwidth, down to the floor
  if (bytes <= pts.front().first) return std::max(c.floor_s, pts.front().second * bytes / pts.front().first);
  return curve_above_first(pts, bytes);
}

double SimPlatform::transfer_seconds(double bytes, bool one_node) const {
  if (!(one_node ? p2p_intra : p2p_inter).time.empty()) return p2p_seconds(bytes, one_node);
  const double bw = one_node ? intra_bw_gbs : inter_bw_gbs, lat = one_node ? intra_lat_us : inter_lat_us;
  return bw > 0 ? lat * 1e-6 + std::max(bytes, 0.0) / (bw * 1e9) : 0.0;
}

double SimPlatform::nccl_extra_seconds(double bytes, int peers) const {
  if (nccl_intra.step.empty() || peers < 1) return 0;
  const double links = intra_lat_us * 1e-6 + peers * bytes / (intra_bw_gbs * 1e9);
  return std::max(0.0, peers * nccl_step_seconds(bytes) - links);
}

double SimPlatform::op_fixed_seconds(bool one_node) const {
  if (one_node) return nccl_intra.step.empty() ? intra_op_us * 1e-6 : 0.0;
  return inter_op_us * 1e-6;
}

json SimPlatform::context(int head_dim) const {
  // efficiencies: each class's table at the run's head dim (what its kernels are charged at);
  // efficiency_tables: which head dim's table that is (null: the platform's table for any head
  // dim), whether it is the run's own, and the tables' source where the platform gives one.
  json eff = json::object();
  json fallback = json::object();
  json tables = json::object();
  for (int c = 0; c < kNumSimClasses; ++c) {
    if (!has_table(SimClass(c))) {  // an optional class the platform has no table for
      fallback[sim_class_name(SimClass(c))] =
          SimClass(c) == SimClass::attn_decode ? "peak" : sim_class_name(sim_class_fallback(SimClass(c)));
      continue;
    }
    const int key = table_head_dim(SimClass(c), head_dim);
    eff[sim_class_name(SimClass(c))] = SimClass(c) == SimClass::gemm && !gemm_grid.rows.empty()
                                           ? json(gemm_grid.rows)
                                           : points_json(efficiency[c].at(key));
    json t = {{"head_dim", key > 0 ? json(key) : json(nullptr)}, {"matches_run", key == 0 || key == head_dim}};
    if (!efficiency_source[c].empty()) t["source"] = efficiency_source[c];
    tables[sim_class_name(SimClass(c))] = t;
  }
  json peaks = json::object();
  for (const auto& [dt, v] : peak_tflops) peaks[dt] = v;
  return {{"platform", name},
          {"platform_file", file},
          {"device", device},
          {"peak_tflops", peaks},
          {"efficiencies", eff},
          {"efficiencies_fallback", fallback},
          {"efficiency_tables", tables},
          {"efficiency_size", {{"gemm", gemm_grid.rows.empty() ? "(m n k)^(1/3) on the square table"
                                                               : "the whole shape (m, n, k): the grid's times interpolated multilinearly, ends held"},
                               {"attn_fwd", "min(pairs / nq, pairs / nk) of a block with every pair visible (= min(nq, nk))"},
                               {"attn_bwd", "as attn_fwd"},
                               {"attn_fwd_masked", "min(pairs / nq, pairs / nk) of a block with some pair masked"},
                               {"attn_bwd_masked", "as attn_fwd_masked"},
                               {"attn_decode", "nq = 1: memory-bound, visible keys' K and V bytes / memory_bw, or its FLOPs when longer, at the attn_decode table (size: query heads per key head; without one, at peak)"}}},
          {"memory_bw", memory_bw_gbs * 1e9},
          {"hbm_bytes", hbm_gib * 1073741824.0},
          {"kernel_launch_us", launch_us},
          {"op_fixed_us", {{"intra", nccl_intra.step.empty() ? intra_op_us : 0.0}, {"inter", inter_op_us}}},
          {"band", {{"lo", band_lo}, {"hi", band_hi}, {"source", band_source}}},
          {"overlap_interference", {{"compute_slowdown", compute_slowdown}, {"source", interference_source}}},
          {"nccl_intra", nccl_intra.step.empty()
                             ? json(nullptr)
                             : json{{"collective", nccl_intra.collective}, {"ranks", nccl_intra.ranks},
                                    {"points", int(nccl_intra.step.size())}, {"source", nccl_intra.source}}}};
}

json simulated_context(const Backend& be, int head_dim) {
  const auto* sim = dynamic_cast<const SimulatedBackend*>(&be);
  if (!sim) return nullptr;
  return sim->platform().context(head_dim);
}

}  // namespace cpbench
