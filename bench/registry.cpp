// The strategy registry: one line per strategy. Order is the order of reports and tables.
//
// Why a list and not self-registration from each strategy file: cpbench_lib is a static
// library, and a linker drops an object file nothing refers to, static registrars included
// (unless every consumer links it whole-archive); the list also fixes the report order. A
// strategy file defines `std::unique_ptr<Strategy> make_strategy_<id>()`; its name, summary and
// constraints come from the class itself.
#include <sstream>

#include "bench/strategy.h"

#define CPBENCH_STRATEGIES(X) \
  X(single)                   \
  X(megatron_sp)              \
  X(ulysses)                  \
  X(ring)                     \
  X(ring_zigzag)              \
  X(ring_striped)             \
  X(usp)                      \
  X(allgather_kv)

namespace cpbench {

#define CPBENCH_DECLARE(id) std::unique_ptr<Strategy> make_strategy_##id();
CPBENCH_STRATEGIES(CPBENCH_DECLARE)
#undef CPBENCH_DECLARE

namespace {
StrategyInfo info_of(std::unique_ptr<Strategy> (*make)()) {
  const auto s = make();
  return {s->name(), s->summary(), s->constraints(), make};
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

MeshSpec Strategy::resolve_mesh(const MeshSpec& requested, const LayerShape&, int P) const {
  MeshSpec m;
  m.U = 1;
  m.R = P;
  m.placement = requested.placement;
  return m;
}

int max_ulysses_degree(int P, const LayerShape& s) {
  for (int u = P; u > 1; --u)
    if (P % u == 0 && s.H % u == 0 && s.G % u == 0) return u;
  return 1;
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

std::vector<std::string> dump_tensor_names() {
  return {"x", "norm_w", "w_qkv", "w_o", "dy", "y", "dx", "dnorm_w", "dw_qkv", "dw_o",
          "q", "k",      "v",     "o",   "do", "dq", "dk", "dv",     "lse"};
}

std::vector<int64_t> global_tensor_shape(const std::string& n, const LayerShape& s) {
  const int64_t Hd = int64_t(s.H) * s.d;
  if (n == "x" || n == "dy" || n == "y" || n == "dx") return {s.B, s.N, s.D};
  if (n == "norm_w" || n == "dnorm_w") return {s.D};
  if (n == "w_qkv" || n == "dw_qkv") return {s.D, s.qkv_cols()};
  if (n == "w_o" || n == "dw_o") return {Hd, s.D};
  if (n == "q" || n == "o" || n == "do" || n == "dq") return {s.B, s.N, s.H, s.d};
  if (n == "k" || n == "v" || n == "dk" || n == "dv") return {s.B, s.N, s.G, s.d};
  if (n == "lse") return {s.B, s.H, s.N};
  throw std::invalid_argument("unknown tensor '" + n + "'");
}

}  // namespace cpbench
