// The strategy registry: one line per strategy. Order is the order of reports and tables.
//
// Why a list and not self-registration from each strategy file: cpbench_lib is a static
// library, and a linker drops an object file nothing refers to, static registrars included
// (unless every consumer links it whole-archive); the list also fixes the report order. A
// strategy file defines `std::unique_ptr<Strategy> make_strategy_<id>()`; its description
// (name, summary, constraints, tiers, capabilities) comes from the class itself (describe()).
#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "bench/strategy.h"
#include "bench/block/mla.h"

#define CPBENCH_STRATEGIES(X) \
  X(single)                   \
  X(megatron_sp)              \
  X(ulysses)                  \
  X(ring)                     \
  X(ring_zigzag)              \
  X(ring_striped)             \
  X(usp)                      \
  X(allgather_kv)             \
  X(double_ring)

namespace cpbench {

#define CPBENCH_DECLARE(id) std::unique_ptr<Strategy> make_strategy_##id();
CPBENCH_STRATEGIES(CPBENCH_DECLARE)
#undef CPBENCH_DECLARE

namespace {
StrategyInfo info_of(std::unique_ptr<Strategy> (*make)()) {
  StrategyInfo info;
  static_cast<StrategyDesc&>(info) = make()->describe();
  info.make = make;
  return info;
}
}  // namespace

const std::vector<StrategyInfo>& strategy_registry() {
#define CPBENCH_ENTRY(id) info_of(make_strategy_##id),
  static const std::vector<StrategyInfo> reg = {CPBENCH_STRATEGIES(CPBENCH_ENTRY)};
#undef CPBENCH_ENTRY
  return reg;
}

const StrategyInfo* find_strategy(const std::string& name) {
  for (const auto& s : strategy_registry())
    if (s.name == name) return &s;
  return nullptr;
}

CommPrediction& CommPrediction::add(const std::string& level, Phase ph, int to, int64_t bytes) {
  if (bytes == 0) return *this;
  shares.push_back({level, ph, to, bytes});
  (ph == Phase::fwd ? fwd : ph == Phase::recompute ? rec : bwd) += bytes;
  return *this;
}

CommPrediction& CommPrediction::add(const CommPrediction& o) {
  for (const CommShare& c : o.shares) add(c.level, c.phase, c.to, c.bytes);
  return *this;
}

MeshSpec Strategy::resolve_mesh(const MeshSpec& requested, const LayerShape&, int P) const {
  MeshSpec m;
  m.U = 1;
  m.R = P;
  m.placement = requested.placement;
  return m;
}

BalancePositions Strategy::balance_positions(const MeshSpec& m, int P) const {
  // The ring index of a rank: its index in the ring group, or in a double ring outer * w + inner.
  const MeshDesc d = mesh_desc(m);
  auto index_in = [&](int rank, const std::string& level) {
    const std::vector<int> g = Mesh::group_of(rank, d, level);
    return int(std::find(g.begin(), g.end(), rank) - g.begin());
  };
  BalancePositions b;
  b.count = m.R;
  for (int r = 0; r < P; ++r)
    b.of_rank.push_back(d.has("ring") ? index_in(r, "ring")
                                      : index_in(r, "ring_outer") * d.size_of("ring_inner") + index_in(r, "ring_inner"));
  return b;
}

void Strategy::check_new_tokens(const LayerShape& s, int P, const MeshSpec& m) const {
  const std::string under = " (--cached " + std::to_string(s.pass.cached) + " of seq=" + std::to_string(s.N) + ")";
  if (s.pass.cached % P != 0)
    throw ConstraintError(name() + ": cached=" + std::to_string(s.pass.cached) + " is not divisible by P=" +
                          std::to_string(P) + ": each rank holds an equal cache shard" + under);
  const LayerShape fresh = s.without_cache();
  try {
    check(fresh, P, m);
  } catch (const ConstraintError& e) {
    throw ConstraintError(std::string(e.what()) + ": the layout holds the seq - cached = " + std::to_string(fresh.N) +
                          " new tokens" + under);
  }
}

// The largest Ulysses degree dividing P that head_sharding_error accepts (the hint in messages).
int max_ulysses_degree(int P, const LayerShape& s) {
  for (int u = P; u > 1; --u)
    if (P % u == 0 && head_sharding_error(u, s, "u").empty()) return u;
  return 1;
}

const char* placement_name(Placement p) {
  switch (p) {
    case Placement::ulysses_inner: return "ulysses-inner";
    case Placement::ring_inner: return "ring-inner";
  }
  return "?";
}

Placement parse_placement(const std::string& s) {
  if (s == "ulysses-inner") return Placement::ulysses_inner;
  if (s == "ring-inner") return Placement::ring_inner;
  throw std::invalid_argument("unknown placement '" + s + "' (expected ulysses-inner or ring-inner)");
}

const char* balance_name(BalanceScheme b) {
  switch (b) {
    case BalanceScheme::none: return "none";
    case BalanceScheme::doc_zigzag: return "doc-zigzag";
    case BalanceScheme::greedy: return "greedy";
    case BalanceScheme::dynamic: return "dynamic";
  }
  return "?";
}

BalanceScheme parse_balance(const std::string& s) {
  if (s == "none") return BalanceScheme::none;
  if (s == "doc-zigzag") return BalanceScheme::doc_zigzag;
  if (s == "greedy") return BalanceScheme::greedy;
  if (s == "dynamic") return BalanceScheme::dynamic;
  throw std::invalid_argument("unknown balance scheme '" + s + "' (expected none, doc-zigzag, greedy or dynamic)");
}

MeshDesc MeshSpec::desc() const {
  std::vector<MeshLevel> ring = {{"ring", R}};
  if (inner_ring > 0) ring = {{"ring_outer", R / inner_ring}, {"ring_inner", inner_ring}};
  MeshDesc d;
  if (placement == Placement::ulysses_inner) {
    d.levels = ring;
    d.levels.push_back({"ulysses", U});
  } else {
    d.levels = {{"ulysses", U}};
    d.levels.insert(d.levels.end(), ring.begin(), ring.end());
  }
  if (tp > 1) d.levels.push_back({"tp", tp});
  return d;
}

std::vector<MeshLevel> MeshSpec::levels_innermost_first() const {
  std::vector<MeshLevel> ring = {{"ring", R}};
  if (inner_ring > 0) ring = {{"ring_inner", inner_ring}, {"ring_outer", R / inner_ring}};
  std::vector<MeshLevel> l = {{"tp", tp}};
  if (placement == Placement::ulysses_inner) {
    l.push_back({"ulysses", U});
    l.insert(l.end(), ring.begin(), ring.end());
  } else {
    l.insert(l.end(), ring.begin(), ring.end());
    l.push_back({"ulysses", U});
  }
  return l;
}

int resolve_inner_ring(const MeshSpec& m, const std::string& who) {
  if (m.inner_ring > 0) {
    if (m.R % m.inner_ring != 0) {
      std::ostringstream e;
      e << who << ": inner_ring=" << m.inner_ring << " does not divide ring=" << m.R;
      throw ConstraintError(e.str());
    }
    return m.inner_ring;
  }
  // The ring group's members on one node: ring groups are strided by t (the tp level is
  // innermost) under ring-inner and by t*U under ulysses-inner, so a node of K ranks holds K/t
  // or K/(t*U) of them (one when that stride does not divide K).
  const int K = m.ranks_per_node;
  if (K <= 0) return m.R;
  const int stride = m.placement == Placement::ring_inner ? m.tp : m.tp * m.U;
  int w = K % stride == 0 ? K / stride : 1;
  if (w < 1 || w > m.R || m.R % w != 0) w = m.R;
  return w;
}

std::string head_sharding_error(int u, const LayerShape& s, const std::string& what) {
  std::ostringstream e;
  if (s.H % u != 0)
    e << what << "=" << u << " does not divide heads=" << s.H;
  else if (s.G % u != 0 && u % s.G != 0)
    e << what << "=" << u << " and kv_heads=" << s.G
      << ": one must divide the other (kv heads are split, or replicated " << what
      << "/kv_heads times)";
  return e.str();
}

std::vector<std::string> dump_tensor_names(bool full_block, bool sinks, const MlaDims* mla) {
  std::vector<std::string> n = {"x", "norm_w", "w_qkv", "w_o", "dy", "y", "dx", "dnorm_w", "dw_qkv", "dw_o",
                                "q", "k",      "v",     "o",   "do", "dq", "dk", "dv",     "lse"};
  if (mla) {  // MLA's projections (bench/block/mla.h) in w_qkv's place, then their gradients
    const std::vector<std::string> w = MlaProjections::weight_names(*mla);
    n.erase(std::remove(n.begin(), n.end(), "w_qkv"), n.end());
    n.erase(std::remove(n.begin(), n.end(), "dw_qkv"), n.end());
    for (const std::string& x : w) n.push_back(x);
    for (const std::string& x : w) n.push_back("d" + x);
  }
  if (full_block)  // the MLP sub-layer's weights and their gradients (DESIGN "The transformer block")
    for (const char* m : {"norm2_w", "w_gate", "w_up", "w_down", "dnorm2_w", "dw_gate", "dw_up", "dw_down"}) n.push_back(m);
  if (sinks) n.insert(n.end(), {"sinks", "dsinks"});  // --sinks: the logits [H] and their gradient
  return n;
}

std::vector<int64_t> global_tensor_shape(const std::string& name, const LayerShape& s) {
  const int64_t N = s.token_rows(), vd = s.vdim();
  const std::string& n = name;
  if (s.mla)  // MLA's projections (bench/block/mla.h); a weight's gradient has its shape
    if (std::vector<int64_t> w = MlaProjections::weight_shape(n, s); !w.empty()) return w;
  if (n == "x" || n == "dy" || n == "y" || n == "dx") return {s.B, N, s.D};
  if (n == "norm_w" || n == "dnorm_w") return {s.D};
  if (n == "w_qkv" || n == "dw_qkv") return {s.D, s.qkv_cols()};
  if (n == "w_o" || n == "dw_o") return {int64_t(s.H) * vd, s.D};
  if (n == "q" || n == "dq") return {s.B, N, s.H, s.d};
  if (n == "o" || n == "do") return {s.B, N, s.H, vd};
  if (n == "k" || n == "dk") return {s.B, N, s.G, s.d};
  if (n == "v" || n == "dv") return {s.B, N, s.G, vd};
  if (n == "lse") return {s.B, s.H, N};
  if (n == "sinks" || n == "dsinks") return {s.H};
  if (n == "norm2_w" || n == "dnorm2_w") return {s.D};
  if (n == "w_gate" || n == "dw_gate" || n == "w_up" || n == "dw_up") return {s.D, s.F};
  if (n == "w_down" || n == "dw_down") return {s.F, s.D};
  throw std::invalid_argument("unknown tensor '" + name + "'");
}

}  // namespace cpbench
